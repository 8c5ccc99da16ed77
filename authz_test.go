package main

// Specification of the authorizer (authz.go): it caches grants but not denials or errors, and asks
// as the pod's service account would be asked. A fake clientset stands in for the API server; the
// end-to-end tests prove the behaviour against a real one.

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
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), time.Minute)
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
	// A fresh check (the relist) always asks, and a denial replaces the cached grant.
	answer = false
	if d, _ := a.recheck(context.Background(), key); d.Allowed || sars.Load() != 2 {
		t.Fatalf("fresh check: %v after %d SARs, want a denial from a second SAR", d, sars.Load())
	}
	// A denial is not cached: the next check asks again.
	if d, _ := a.check(context.Background(), key); d.Allowed || sars.Load() != 3 {
		t.Fatalf("check after a denial: %v after %d SARs, want a denial from a third SAR", d, sars.Load())
	}
	// An error is never a grant, and is not cached: once the API answers again, so is the check.
	answerErr = errors.New("apiserver down")
	if d, err := a.check(context.Background(), key); err == nil || d.Allowed {
		t.Fatalf("error case: %v %v", d, err)
	}
	answer, answerErr = true, nil
	if d, err := a.check(context.Background(), key); err != nil || !d.Allowed || sars.Load() != 5 {
		t.Fatalf("check after the error: %v %v after %d SARs, want a grant from a fifth SAR", d, err, sars.Load())
	}
}

func TestAuthorizerSendsTheServiceAccountIdentity(t *testing.T) {
	client := fake.NewSimpleClientset()
	var got *authorizationv1.SubjectAccessReview
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		got = a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		return true, got, nil
	})
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), time.Minute)
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
