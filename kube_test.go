package main

// Specification of kubeClient.authorizerReady: what the API server's /readyz?verbose says of its
// informer-sync check, whatever its other checks say. An HTTP server stands in for the API
// server's readiness handler (the answers below are its format, apiserver's healthz package).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

func TestAuthorizerReadyFollowsTheInformerSyncCheck(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  int
		body    string
		wantErr string // "" for ready
	}{
		{name: "ready", status: http.StatusOK, body: "[+]ping ok\n[+]etcd ok\n[+]informer-sync ok\n[+]poststarthook/rbac/bootstrap-roles ok\nreadyz check passed\n"},
		{name: "starting: informers not synced", status: http.StatusInternalServerError,
			body: "[+]ping ok\n[-]informer-sync failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n", wantErr: "[-]informer-sync failed"},
		{name: "unready for another reason (shutting down), informers synced", status: http.StatusInternalServerError,
			body: "[+]ping ok\n[+]informer-sync ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		{name: "no such check listed", status: http.StatusOK, body: "[+]ping ok\nreadyz check passed\n", wantErr: "no informer-sync check listed"},
		{name: "refused", status: http.StatusForbidden, body: "", wantErr: "GET /readyz"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz" || r.URL.Query().Get("verbose") == "" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			k, err := newKubeClient(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			err = k.authorizerReady(context.Background())
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("not ready: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, c.wantErr)
			case apierrors.IsForbidden(err):
				// The publish would read it as the driver lacking the right to review access.
				t.Fatalf("the error reads as the API server's refusal: %v", err)
			}
		})
	}
}
