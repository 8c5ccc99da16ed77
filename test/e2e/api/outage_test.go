package api

// Specification of outages: the API server unreachable during a run never revokes a volume, and
// the driver recovers when it is back; a deleted source keeps the last good data, and one created
// again as another object is not followed while the share has no pin. The driver
// reaches the API server through a TCP proxy the test controls; cutting the proxy refuses new
// connections and drops open ones, which is what the driver sees when the API server stops (the
// real server keeps serving the other tests).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
)

// apiProxy forwards TCP connections to the API server until cut.
type apiProxy struct {
	addr     string
	upstream string
	mu       sync.Mutex
	lis      net.Listener
	conns    map[net.Conn]struct{}
}

func startAPIProxy(t *testing.T, upstream string) *apiProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{addr: lis.Addr().String(), upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.serve(lis)
	t.Cleanup(p.cut)
	return p
}

func (p *apiProxy) serve(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *apiProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up) // the proxy ends when either side does
	c.Close()
}

// cut stops accepting and drops every open connection.
func (p *apiProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// restore listens again on the same address.
func (p *apiProxy) restore(t *testing.T) {
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger for a moment
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serve(lis)
}

// proxiedKubeconfig writes a copy of the driver's kubeconfig (deploy.yaml's ServiceAccount) whose
// server is the proxy; TLS still verifies the API server's certificate under its real name.
func proxiedKubeconfig(t *testing.T, e *framework.KubeEnv) (path string, proxy *apiProxy) {
	cfg, err := clientcmd.LoadFromFile(e.DriverKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	cluster := cfg.Clusters[ctx.Cluster]
	u, err := url.Parse(cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	proxy = startAPIProxy(t, u.Host)
	if cluster.TLSServerName == "" {
		cluster.TLSServerName = u.Hostname()
	}
	cluster.Server = "https://" + proxy.addr
	path = filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path, proxy
}

func TestAPIServerOutageNeverRevokesAndRecovers(t *testing.T) {
	e := framework.E2e(t)
	kc, proxy := proxiedKubeconfig(t, e)
	p := e.StartDriver(t, framework.WithArgs("--kubeconfig="+kc))
	f, v := publishedVolume(t, e, p)

	proxy.cut()
	// While the API server is unreachable, access is revoked and the Secret rotated: the driver
	// cannot know, and an error must never revoke. Several cycles pass.
	f.revoke()
	rotated := map[string][]byte{"ca.crt": p.Secret("rotated")}
	e.UpdateSecret(t, f.platform, "ca-bundle", rotated)
	time.Sleep(3 * relist)
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("during the outage the volume changed: %v", err)
	}
	// New publishes fail Unavailable (the kubelet retries), and leave nothing behind.
	w := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	err := p.Publish(w)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("publish during the outage: %v, want Unavailable", err)
	}
	if _, err := os.Lstat(w.Target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed publish left its target: %v", err)
	}

	proxy.restore(t)
	restoredAt := time.Now()
	// Within one interval of the API server's return, the revocation takes effect...
	framework.Eventually(t, relist+relistSlack, func() error {
		if files := framework.ReadVolume(t, v.Target); len(files) != 0 {
			return fmt.Errorf("still %d files", len(files))
		}
		return nil
	})
	t.Logf("revocation applied %v after the API server came back", time.Since(restoredAt).Round(100*time.Millisecond))
	// ...and, granted again, the volume shows the rotated data; new publishes work.
	e.Grant(t, f.consumer, framework.KindSecret, f.share, framework.ServiceAccount(f.consumer, "app"))
	framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(rotated)) })
	framework.Eventually(t, relist+relistSlack, func() error { return p.Publish(w) })
	p.UnpublishAll(t, v, w)
}

func TestSourceDeletedKeepsLastGoodData(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f, v := publishedVolume(t, e, p)
	if err := e.Kube.CoreV1().Secrets(f.platform).Delete(t.Context(), "ca-bundle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * relist)
	// Deleting a Secret (e.g. to re-create it during a rotation) does not blank its consumers.
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("after the source was deleted: %v", err)
	}
	// A new publish while the source is missing fails FailedPrecondition (tested in test/e2e/api/driver_test.go).
	p.UnpublishAll(t, v)
}

// A source deleted and created again is another object: with no status controller running, the
// share has no pin in its status (status.sourceUID), and the volume's own record of the object
// its files came from pins it. The running volume keeps the original data and its pod is told
// once that the source was replaced; it is not refreshed to the re-creator's bytes. (Were the
// pin to fail open while the status controller is down or lagging, whoever may create the
// source anew would feed every running consumer.)
func TestSourceRecreatedWithoutAPinKeepsTheOriginalData(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t) // no status controller: the share's status stays empty
	f, v := publishedVolume(t, e, p)
	u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(t.Context(), f.share, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := unstructured.NestedString(u.Object, "status", "sourceUID"); uid != "" {
		t.Fatalf("the share has a pin (%s) though no status controller runs", uid)
	}
	if err := e.Kube.CoreV1().Secrets(f.platform).Delete(t.Context(), "ca-bundle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recreated := map[string][]byte{"ca.crt": p.Secret("recreated")}
	e.CreateSecret(t, f.platform, "ca-bundle", recreated)
	var told []corev1.Event
	framework.Eventually(t, relist+relistSlack, func() error {
		told, err = e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshFailed)
		if err != nil || len(told) == 0 {
			return fmt.Errorf("no %s event yet (%v)", framework.ReasonRefreshFailed, err)
		}
		return nil
	})
	if !strings.Contains(told[0].Message, "was deleted and created again") {
		t.Errorf("%s event %q does not say the source was replaced", framework.ReasonRefreshFailed, told[0].Message)
	}
	time.Sleep(2 * relist) // later cycles neither refresh nor tell again
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("the volume followed the re-created source: %v", err)
	}
	if evs, _ := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshed); len(evs) > 0 {
		t.Errorf("the volume was refreshed from the re-created source: %s", evs[0].Message)
	}
	if evs, _ := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshFailed); len(evs) != 1 || framework.EvCount(evs[0]) > 1 {
		t.Errorf("%s recorded %d events (%v), want one, once", framework.ReasonRefreshFailed, len(evs), evs)
	}
	p.UnpublishAll(t, v)
}

// The same, and then the status controller starts: its first pin does not take the re-created
// object (created after the share, past the first pin's grace, whose status never said it had no
// source). The share is
// Ready False/SourceReplaced, naming the command that accepts the object, and has no pin; the
// running volume keeps the original data, not refreshed. (Before, the first pin took whatever
// object it read first, and running volumes followed it with a "refreshed" event.)
func TestFirstPinDoesNotTakeASourceRecreatedAfterTheShare(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t) // no status controller yet: the share's status stays empty
	f, v := publishedVolume(t, e, p)
	u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(t.Context(), f.share, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The re-created object must be newer than the share by more than the first pin's grace, in
	// a later second (the API keeps whole seconds).
	time.Sleep(time.Until(u.GetCreationTimestamp().Add(framework.FirstPinGrace + 1100*time.Millisecond)))
	if err := e.Kube.CoreV1().Secrets(f.platform).Delete(t.Context(), "ca-bundle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.CreateSecret(t, f.platform, "ca-bundle", map[string][]byte{"ca.crt": p.Secret("recreated")})
	framework.Eventually(t, relist+relistSlack, func() error {
		if told, err := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshFailed); err != nil || len(told) == 0 {
			return fmt.Errorf("no %s event yet (%v)", framework.ReasonRefreshFailed, err)
		}
		return nil
	})

	e.StartStatusController(t)
	framework.Eventually(t, relist+relistSlack, func() error {
		c, u, err := e.ReadyCondition(framework.KindSecret, f.share)
		if err != nil {
			return err
		}
		return framework.WantReady(c, u, metav1.ConditionFalse, framework.ReasonSourceReplaced, "--subresource=status")
	})
	time.Sleep(2 * relist) // relists of the volume, and the status controller's periodic checks
	u, err = e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(t.Context(), f.share, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := unstructured.NestedString(u.Object, "status", "sourceUID"); uid != "" {
		t.Errorf("the status controller pinned the share to %s, an object created after it", uid)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("the volume followed the re-created source: %v", err)
	}
	if evs, _ := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshed); len(evs) > 0 {
		t.Errorf("the volume was refreshed from the re-created source: %s", evs[0].Message)
	}
	p.UnpublishAll(t, v)
}
