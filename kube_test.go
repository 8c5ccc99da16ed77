package main

// Specification of kubeClient.rbacCaches: what the API server's /readyz?verbose says of
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
		name   string
		status int
		body   string
		caches rbacCaches
	}{
		{name: "ready", status: http.StatusOK, body: "[+]ping ok\n[+]etcd ok\n[+]informer-sync ok\n[+]poststarthook/rbac/bootstrap-roles ok\nreadyz check passed\n", caches: rbacLoaded},
		{name: "starting: informers not synced", status: http.StatusInternalServerError,
			body: "[+]ping ok\n[-]informer-sync failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n", caches: rbacLoading},
		{name: "unready for another reason (shutting down), informers synced", status: http.StatusInternalServerError,
			body: "[+]ping ok\n[+]informer-sync ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n", caches: rbacLoaded},
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
			if got := k.rbacCaches(context.Background()); got != c.caches {
				t.Fatalf("said %v, want %v", got, c.caches)
			}
		})
	}
	// An API server that does not answer says nothing.
	k, err := newKubeClient(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.rbacCaches(context.Background()); got != rbacUnknown {
		t.Fatalf("said %v, from an API server that does not answer", got)
	}
}
