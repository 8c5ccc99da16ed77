package main

// Specification of the authorizer (authz.go): it caches grants but not denials or errors, asks
// as the pod's service account would be asked, and believes a denial only from an API server that
// is ready. A fake clientset stands in for the API server; the end-to-end tests and the soak's
// API server restarts prove the behaviour against a real one.

import (
	"context"
	"errors"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestAuthorizerCachesGrantsNotDenialsNorErrors(t *testing.T) {
	answer, answerErr := true, error(nil)
	client, sars := fakeSARClient(func() (bool, error) { return answer, answerErr })
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), apiAlwaysReady, time.Minute)
	key := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: kindSecret, Share: "corp-ca"}
	for i := 0; i < 1000; i++ {
		d, err := a.check(context.Background(), key)
		if err != nil || !d.Allowed {
			t.Fatalf("check: %v %v", d, err)
		}
	}
	if sars.Load() != 1 {
		t.Errorf("%d SARs for 1000 checks, want 1", sars.Load())
	}
	// A fresh check (the relist) always asks, and a denial replaces the cached grant. (A denial
	// from a ready API server is asked twice: TestAuthorizerBelievesADenialOnlyFromAReadyAPIServer.)
	answer = false
	if d, _ := a.recheck(context.Background(), key); d.Allowed || sars.Load() != 3 {
		t.Fatalf("fresh check: %v after %d SARs, want a denial from SARs 2 and 3", d, sars.Load())
	}
	// A denial is not cached: the next check asks again.
	if d, _ := a.check(context.Background(), key); d.Allowed || sars.Load() != 5 {
		t.Fatalf("check after a denial: %v after %d SARs, want a denial from SARs 4 and 5", d, sars.Load())
	}
	// An error is never a grant, and is not cached: once the API answers again, so is the check.
	answerErr = errors.New("apiserver down")
	if d, err := a.check(context.Background(), key); err == nil || d.Allowed {
		t.Fatalf("error case: %v %v", d, err)
	}
	answer, answerErr = true, nil
	if d, err := a.check(context.Background(), key); err != nil || !d.Allowed || sars.Load() != 7 {
		t.Fatalf("check after the error: %v %v after %d SARs, want a grant from a seventh SAR", d, err, sars.Load())
	}
}

// A starting kube-apiserver answers before its RBAC caches are loaded, and then denies what RBAC
// grants; its /readyz fails until they are. Such a denial is an error (which revokes nothing and
// is retried), never a denial; from a ready API server the review is asked again, and that second
// answer stands, whichever it is (the first may have come just before the caches were loaded).
func TestAuthorizerBelievesADenialOnlyFromAReadyAPIServer(t *testing.T) {
	key := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: kindSecret, Share: "corp-ca"}
	notReady := errors.New("readyz check failed: informer-sync")
	for _, c := range []struct {
		name        string
		answers     []bool // the SARs' answers, in order
		ready       error  // what /readyz says
		wantErr     bool
		wantAllowed bool
		wantSARs    int64
		wantReadyz  int
	}{
		{name: "granted: no readiness asked", answers: []bool{true}, wantAllowed: true, wantSARs: 1},
		{name: "denied by a starting API server: an error", answers: []bool{false}, ready: notReady, wantErr: true, wantSARs: 1, wantReadyz: 1},
		{name: "denied by a ready API server, twice: denied", answers: []bool{false, false}, wantSARs: 2, wantReadyz: 1},
		{name: "denied, then ready and granted: granted", answers: []bool{false, true}, wantAllowed: true, wantSARs: 2, wantReadyz: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			answers := c.answers
			client, sars := fakeSARClient(func() (bool, error) {
				if len(answers) == 0 {
					return false, errors.New("more SARs than the test expects")
				}
				a := answers[0]
				answers = answers[1:]
				return a, nil
			})
			readyz := 0
			a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), func(context.Context) error {
				readyz++
				return c.ready
			}, time.Minute)
			d, err := a.recheck(context.Background(), key)
			if (err != nil) != c.wantErr || d.Allowed != c.wantAllowed || sars.Load() != c.wantSARs || readyz != c.wantReadyz {
				t.Fatalf("decision %+v, error %v, after %d SARs and %d readiness checks; want error %v, allowed %v, %d SARs, %d readiness checks",
					d, err, sars.Load(), readyz, c.wantErr, c.wantAllowed, c.wantSARs, c.wantReadyz)
			}
			if err != nil && !errors.Is(err, notReady) {
				t.Errorf("the error does not say why: %v", err)
			}
		})
	}
}

// apiAlwaysReady is an API server whose /readyz always answers ok.
func apiAlwaysReady(context.Context) error { return nil }

func TestAuthorizerSendsTheServiceAccountIdentity(t *testing.T) {
	client := fake.NewSimpleClientset()
	var got *authorizationv1.SubjectAccessReview
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		got = a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		return true, got, nil
	})
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), apiAlwaysReady, time.Minute)
	if _, err := a.check(context.Background(), accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: kindConfigMap, Share: "cfg"}); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	if s.User != "system:serviceaccount:team-a:app" {
		t.Errorf("user %q", s.User)
	}
	wantGroups := map[string]bool{"system:serviceaccounts": true, "system:serviceaccounts:team-a": true, "system:authenticated": true}
	for _, g := range s.Groups {
		delete(wantGroups, g)
	}
	if len(wantGroups) != 0 {
		t.Errorf("groups %v miss %v", s.Groups, wantGroups)
	}
	ra := s.ResourceAttributes
	if ra.Verb != "use" || ra.Group != shareGroup || ra.Resource != "sharedconfigmaps" || ra.Name != "cfg" || ra.Namespace != "team-a" {
		t.Errorf("resource attributes %+v", ra)
	}
}
