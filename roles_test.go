package main

// Specification of the process's roles (roles.go, --role): the node plugin (the default) never
// runs the status writer, not even when given the status flags that older manifests gave every
// node; the status controller does, and needs a Lease namespace; any other role is refused with
// what is allowed. The wiring tests run the real run() against a recording stand-in for the API
// server (no cluster): what matters here is which requests each role sends. That the API server
// refuses the node plugin's account the status writes, and that the status controller's
// Deployment writes status in a real cluster, is specified in test/e2e/api/leastprivilege_test.go
// and test/e2e/api/status_test.go.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"k8s.io/client-go/tools/clientcmd"
)

func TestRoleFlag(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.role != roleNode {
		t.Fatalf("no --role: role %q (%v), want %q", o.role, err, roleNode)
	}
	if o, err := parseFlags([]string{"--role=status", "--status-lease-namespace=csi-sharedresource"}); err != nil || o.role != roleStatus {
		t.Errorf("--role=status with a Lease namespace: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want []string // in the refusal
	}{
		{[]string{"--role=status"}, []string{"--role=status needs --status-lease-namespace"}},
		{[]string{"--role=controller"}, []string{`--role "controller" is not a role`, `"node"`, `"status"`}},
		{[]string{"--role="}, []string{`--role "" is not a role`}},
	} {
		_, err := parseFlags(tc.args)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("parseFlags(%q): %v, want a refusal saying %q", tc.args, err, w)
			}
		}
	}
}

// A node plugin given the status flags (an upgraded image under an older manifest) warns that it
// ignores them rather than failing: failing would take every node's mounts down over a flag that
// no longer does anything.
func TestNodeRoleIgnoresTheStatusFlags(t *testing.T) {
	o, err := parseFlags([]string{"--status-lease-namespace=csi-sharedresource"})
	if err != nil {
		t.Fatalf("the node plugin refuses an older manifest's --status-lease-namespace: %v", err)
	}
	if got := nodeRoleIgnored(o); !slices.Equal(got, []string{"--status-lease-namespace"}) {
		t.Errorf("ignored %q, want [--status-lease-namespace]", got)
	}
	o, _ = parseFlags([]string{"--role=status", "--status-lease-namespace=csi-sharedresource"})
	if got := nodeRoleIgnored(o); got != nil {
		t.Errorf("the status controller ignores %q", got)
	}
}

// The node plugin, given an older manifest's --status-lease-namespace, syncs its share caches and
// serves, and sends no request to the Lease nor to any share's status: it does not campaign and
// does not write. The status controller, on the same stand-in, campaigns for the Lease.
func TestOnlyTheStatusRoleCampaignsForTheStatusLease(t *testing.T) {
	for _, tc := range []struct {
		role      string
		campaigns bool
	}{{roleNode, false}, {roleStatus, true}} {
		t.Run(tc.role, func(t *testing.T) {
			api := newRecordingAPI(t)
			dir := t.TempDir()
			args := []string{
				"--role=" + tc.role,
				"--kubeconfig=" + api.kubeconfig,
				"--status-lease-namespace=csi-sharedresource",
				"--status-lease-duration=3s",
				"--relist-interval=1s",
				"--endpoint=unix://" + filepath.Join(dir, "csi.sock"),
				"--kubelet-root-dir=" + dir,
				"--state-dir=" + filepath.Join(dir, "plugins", driverName),
				"--registration-dir=",
				"--health-address=",
				"--node-id=node-a",
				"--service-account=" + testDriverAccount,
			}
			o, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- run(ctx, o) }()
			// Both share informers listed (the caches sync right after), then a few seconds, in
			// which a status writer asks for the Lease at once and again every retry period.
			deadline := time.Now().Add(10 * time.Second)
			for !api.listedBothShareKinds() {
				if time.Now().After(deadline) {
					t.Fatalf("the %s role did not list the shares in 10s; requests: %q", tc.role, api.requests())
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(2 * time.Second)
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("run did not return after its context ended")
			}
			lease, status := 0, 0
			for _, r := range api.requests() {
				if strings.Contains(r, "/apis/coordination.k8s.io/") {
					lease++
				}
				if strings.Contains(r, "/status") {
					status++
				}
			}
			if tc.campaigns && lease == 0 {
				t.Errorf("the status controller never asked for the Lease; requests: %q", api.requests())
			}
			if !tc.campaigns && (lease != 0 || status != 0) {
				t.Errorf("the node plugin sent %d Lease and %d status requests, want none; requests: %q", lease, status, api.requests())
			}
			t.Logf("%s role: %d Lease requests, %d status requests, %d in all", tc.role, lease, status, len(api.requests()))
		})
	}
}

// recordingAPI stands in for the API server: it records every request ("METHOD path"), answers
// the share lists with no share and holds their watches open, and answers anything else 503.
type recordingAPI struct {
	kubeconfig string
	mu         sync.Mutex
	seen       []string
}

func newRecordingAPI(t *testing.T) *recordingAPI {
	t.Helper()
	a := &recordingAPI{}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		a.mu.Unlock()
		for _, row := range share.AllKinds() {
			gvr := share.GVR(row.Kind)
			if r.Method != http.MethodGet || r.URL.Path != "/apis/"+gvr.Group+"/"+gvr.Version+"/"+gvr.Resource {
				continue
			}
			q := r.URL.Query()
			switch {
			case q.Get("sendInitialEvents") == "true":
				// No streaming lists here: client-go falls back to list and watch.
				http.Error(w, "streaming lists are not served", http.StatusBadRequest)
			case q.Get("watch") == "true" || q.Get("watch") == "1":
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-stop:
				}
			default:
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"apiVersion":"%s/%s","kind":"List","metadata":{"resourceVersion":"1"},"items":[]}`, gvr.Group, gvr.Version)
			}
			return
		}
		http.Error(w, "not served here", http.StatusServiceUnavailable)
	}))
	t.Cleanup(func() { close(stop); srv.Close() })

	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	a.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, a.kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *recordingAPI) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// listedBothShareKinds: each share kind has been listed (not only watched).
func (a *recordingAPI) listedBothShareKinds() bool {
	for _, row := range share.AllKinds() {
		gvr := share.GVR(row.Kind)
		listed := false
		for _, r := range a.requests() {
			path, query, _ := strings.Cut(r, "?")
			listed = listed || (path == "GET /apis/"+gvr.Group+"/"+gvr.Version+"/"+gvr.Resource && !strings.Contains(query, "watch="))
		}
		if !listed {
			return false
		}
	}
	return true
}
