package main

// Specification of kubeClient.rbacLoading: what the API server's /readyz?verbose says of
// its informer-sync check, whatever its other checks say. An HTTP server stands in for the API
// server's readiness handler (the answers below are its format, apiserver's healthz package).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

func TestRBACCachesFollowTheInformerSyncCheck(t *testing.T) {
	forbidden := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: User \"x\" cannot get path \"/readyz\"","reason":"Forbidden","code":403}`
	for _, c := range []struct {
		name    string
		status  int
		body    string
		loading bool
	}{
		{name: "ready", status: http.StatusOK, body: "[+]ping ok\n[+]etcd ok\n[+]informer-sync ok\n[+]poststarthook/rbac/bootstrap-roles ok\nreadyz check passed\n"},
		{name: "starting: informers not synced", status: http.StatusInternalServerError,
			body: "[+]ping ok\n[-]informer-sync failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n", loading: true},
		{name: "unready for another reason (shutting down), informers synced", status: http.StatusInternalServerError,
			body: "[+]ping ok\n[+]informer-sync ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		{name: "no such check listed", status: http.StatusOK, body: "[+]ping ok\nreadyz check passed\n"},
		{name: "refused", status: http.StatusForbidden, body: forbidden},
		{name: "not found", status: http.StatusNotFound, body: "404 page not found\n"},
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
			if got := k.rbacLoading(context.Background()); got != c.loading {
				t.Fatalf("said loading %v, want %v", got, c.loading)
			}
		})
	}
	// An API server that does not answer does not say it is loading.
	k, err := newKubeClient(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if k.rbacLoading(context.Background()) {
		t.Fatal("said loading, from an API server that does not answer")
	}
}
