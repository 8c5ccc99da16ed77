package main

// Specification of the authorizer (authz.go): it caches grants but not denials or errors, asks
// as the pod's service account would be asked, and believes a denial only from an API server that
// is ready. A fake clientset stands in for the API server; the end-to-end tests and the soak's
// API server restarts prove the behaviour against a real one.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestAuthorizerCachesGrantsNotDenialsNorErrors(t *testing.T) {
	answer, answerErr := true, error(nil)
	client, sars := fakeSARClient(func() (bool, error) { return answer, answerErr })
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), notLoading, time.Minute, time.Minute)
	key := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: share.KindSecret, Share: "corp-ca"}
	for i := 0; i < 1000; i++ {
		d, err := a.check(context.Background(), key)
		if err != nil || !d.Allowed {
			t.Fatalf("check: %v %v", d, err)
		}
	}
	if sars.Load() != 1 {
		t.Errorf("%d SARs for 1000 checks, want 1", sars.Load())
	}
	// A fresh check (the relist) always asks, and a denial replaces the cached grant. (The relist
	// asks a denial twice: TestRelistBelievesADenialOnlyOnceRBACIsLoaded.)
	answer = false
	if d, _ := a.recheck(context.Background(), key); d.Allowed || sars.Load() != 3 {
		t.Fatalf("fresh check: %v after %d SARs, want a denial from SARs 2 and 3", d, sars.Load())
	}
	// A denial is not cached: the next check asks again.
	if d, _ := a.check(context.Background(), key); d.Allowed || sars.Load() != 4 {
		t.Fatalf("check after a denial: %v after %d SARs, want a denial from a fourth SAR", d, sars.Load())
	}
	// An error is never a grant, and is not cached: once the API answers again, so is the check.
	answerErr = errors.New("apiserver down")
	if d, err := a.check(context.Background(), key); err == nil || d.Allowed {
		t.Fatalf("error case: %v %v", d, err)
	}
	answer, answerErr = true, nil
	if d, err := a.check(context.Background(), key); err != nil || !d.Allowed || sars.Load() != 6 {
		t.Fatalf("check after the error: %v %v after %d SARs, want a grant from a sixth SAR", d, err, sars.Load())
	}
}

// A starting kube-apiserver answers before its RBAC caches are loaded, and then denies what RBAC
// grants; its readiness check informer-sync fails until they are. The relist holds such a denial
// back as an error (which revokes nothing, and is asked again next cycle), for loadingGrace at
// most; from an API server that does not say it is loading, it asks again, and that second
// answer stands, whichever it is (the first may have come just before the caches were loaded).
// A publish's denial is believed as it comes: it revokes nothing.
func TestRelistBelievesADenialOnlyOnceRBACIsLoaded(t *testing.T) {
	key := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: share.KindSecret, Share: "corp-ca"}
	for _, c := range []struct {
		name        string
		publish     bool          // check (a publish) instead of recheck (the relist)
		answers     []bool        // the SARs' answers, in order
		loading     bool          // whether the API server's readiness checks say it loads RBAC
		heldFor     time.Duration // how long the relist has held the key's denials back already
		wantErr     bool
		wantAllowed bool
		wantSARs    int64
		wantLooks   int
	}{
		{name: "granted: no readiness looked at", answers: []bool{true}, wantAllowed: true, wantSARs: 1},
		{name: "denied while RBAC loads: held back", answers: []bool{false}, loading: true, wantErr: true, wantSARs: 1, wantLooks: 1},
		{name: "denied while RBAC loads, past the grace: denied", answers: []bool{false}, loading: true, heldFor: loadingGrace,
			wantSARs: 1, wantLooks: 1},
		{name: "denied, RBAC not said to load, denied again: denied", answers: []bool{false, false}, wantSARs: 2, wantLooks: 1},
		{name: "denied, RBAC not said to load, then granted: granted", answers: []bool{false, true}, wantAllowed: true, wantSARs: 2, wantLooks: 1},
		{name: "a publish: denied as it comes", publish: true, answers: []bool{false}, loading: true, wantSARs: 1},
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
			looks := 0
			a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), func(context.Context) bool {
				looks++
				return c.loading
			}, time.Minute, time.Minute)
			now := time.Now()
			a.now = func() time.Time { return now }
			if c.heldFor > 0 {
				a.held[key] = hold{since: now.Add(-c.heldFor), seen: now.Add(-time.Minute)}
			}
			ask := a.recheck
			if c.publish {
				ask = a.check
			}
			d, err := ask(context.Background(), key)
			if (err != nil) != c.wantErr || d.Allowed != c.wantAllowed || sars.Load() != c.wantSARs || looks != c.wantLooks {
				t.Fatalf("decision %+v, error %v, after %d SARs and %d looks at readiness; want error %v, allowed %v, %d SARs, %d looks",
					d, err, sars.Load(), looks, c.wantErr, c.wantAllowed, c.wantSARs, c.wantLooks)
			}
			// The relist keeps a hold while the API server says it is loading, spent or not.
			if _, held := a.held[key]; held != (c.loading && !c.publish) {
				t.Errorf("held: %v, want %v", held, !held)
			}
		})
	}
}

// A key's denials are held back for the grace from the first look that held one back, however
// other keys fare, and stand after it; an answer asked while the API server does not say it is
// loading ends the hold, and a hold not looked at for holdForgotten graces is forgotten, so a key held once (its volume since gone, or an API server restarted
// long after) gets its whole grace again. The grace is two relist intervals when that is longer.
func TestRelistHoldsAKeysDenialsBackForTheGraceOnly(t *testing.T) {
	loading := true
	client, _ := fakeSARClient(func() (bool, error) { return false, nil })
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), func(context.Context) bool { return loading }, time.Minute, time.Minute)
	now := time.Now()
	a.now = func() time.Time { return now }
	keyA := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: share.KindSecret, Share: "corp-ca"}
	keyB := accessKey{Namespace: "team-b", ServiceAccount: "app", Kind: share.KindSecret, Share: "corp-ca"}
	t0 := now
	for step, c := range []struct {
		at      time.Duration // since the first look
		key     accessKey
		loading bool
		held    bool
	}{
		{0, keyA, true, true},
		{time.Minute, keyB, true, true}, // B's own hold
		{loadingGrace - time.Second, keyA, true, true},
		{loadingGrace, keyA, true, false},                  // A's grace is spent: its denial stands
		{loadingGrace, keyB, true, true},                   // B's is not
		{loadingGrace + time.Minute, keyB, true, false},    // now it is
		{loadingGrace + 2*time.Minute, keyA, true, false},  // A's hold stays spent: its denials stand
		{loadingGrace + 3*time.Minute, keyA, false, false}, // not said to load: asked again, denied; the hold ends
		{loadingGrace + 4*time.Minute, keyA, true, true},
		{loadingGrace + 4*time.Minute + holdForgotten*loadingGrace + time.Second, keyA, true, true}, // forgotten: a new grace
	} {
		now = t0.Add(c.at)
		loading = c.loading
		d, err := a.recheck(context.Background(), c.key)
		if err == nil && d.Allowed {
			t.Fatalf("step %d: a denial became a grant: %+v", step, d)
		}
		if held := err != nil; held != c.held {
			t.Fatalf("step %d (%v after the first look): held back %v, want %v", step, c.at, held, c.held)
		}
	}
	long := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), func(context.Context) bool { return true }, time.Minute, 5*time.Minute)
	long.now = func() time.Time { return now }
	if _, err := long.recheck(context.Background(), keyA); err == nil {
		t.Fatal("not held back at first")
	}
	now = now.Add(9 * time.Minute)
	if _, err := long.recheck(context.Background(), keyA); err == nil {
		t.Fatal("with a 5 min relist interval, the grace is two intervals: still held back after 9 min")
	}
	now = now.Add(time.Minute)
	if _, err := long.recheck(context.Background(), keyA); err != nil {
		t.Fatalf("with a 5 min relist interval, held back after 10 min: %v", err)
	}
}

// A grant asked before a denial came is not cached: a publish's review in flight when the relist
// found access revoked must not let publishes in from the cache for a TTL. The publish's review
// is held until the relist's reviews have answered.
func TestAGrantAskedBeforeADenialIsNotCached(t *testing.T) {
	const wait = 10 * time.Second // a regression fails the test, not hangs it
	publishAsked, publishAnswers := make(chan struct{}), make(chan struct{})
	var answerOnce sync.Once
	answer := func() { answerOnce.Do(func() { close(publishAnswers) }) }
	t.Cleanup(answer)
	var sars atomic.Int64
	a := newAuthorizer(sarFunc(func() bool {
		switch sars.Add(1) {
		case 1: // the publish's review: granted, once the relist has its denial
			close(publishAsked)
			<-publishAnswers
			return true
		case 2, 3: // the relist's review, and the one it asks again
			return false
		}
		return true
	}), notLoading, time.Minute, time.Minute)
	key := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: share.KindSecret, Share: "corp-ca"}
	type answered struct {
		d   decision
		err error
	}
	published, rechecked := make(chan answered, 1), make(chan answered, 1)
	go func() {
		d, err := a.check(context.Background(), key)
		published <- answered{d, err}
	}()
	select {
	case <-publishAsked:
	case <-time.After(wait):
		t.Fatal("the publish sent no review")
	}
	go func() {
		d, err := a.recheck(context.Background(), key)
		rechecked <- answered{d, err}
	}()
	select {
	case r := <-rechecked:
		if r.err != nil || r.d.Allowed {
			t.Fatalf("the relist's recheck: %v %v, want a denial", r.d, r.err)
		}
	case <-time.After(wait):
		t.Fatal("the relist's recheck waited for the publish's review")
	}
	answer()
	select {
	case r := <-published:
		if r.err != nil || !r.d.Allowed {
			t.Fatalf("the publish's review: %v %v, want its grant", r.d, r.err)
		}
	case <-time.After(wait):
		t.Fatal("the publish's review did not return")
	}
	if a.cachedGrant(key) {
		t.Fatal("a grant asked before a denial was cached")
	}
	if d, err := a.check(context.Background(), key); err != nil || !d.Allowed || sars.Load() != 4 || !a.cachedGrant(key) {
		t.Fatalf("a grant asked after: %v %v after %d SARs, cached %v; want it cached", d, err, sars.Load(), a.cachedGrant(key))
	}
}

// Any denial drops the cached grant, even one the relist holds back: publishes then ask again.
func TestADenialHeldBackStillDropsTheCachedGrant(t *testing.T) {
	answer := true
	client, sars := fakeSARClient(func() (bool, error) { return answer, nil })
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), func(context.Context) bool { return true }, time.Minute, time.Minute)
	key := accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: share.KindSecret, Share: "corp-ca"}
	if d, err := a.check(context.Background(), key); err != nil || !d.Allowed {
		t.Fatalf("grant: %v %v", d, err)
	}
	answer = false
	if _, err := a.recheck(context.Background(), key); err == nil {
		t.Fatal("a denial while RBAC loads was believed by the relist")
	}
	if d, err := a.check(context.Background(), key); err != nil || d.Allowed || sars.Load() != 3 {
		t.Fatalf("publish after the held-back denial: %v %v after %d SARs, want a denial from a third SAR", d, err, sars.Load())
	}
}

// notLoading is an API server that does not say it is loading its RBAC caches.
func notLoading(context.Context) bool { return false }

// sarFunc answers each review with allowed(), without the fake clientset, which holds a lock
// while a reaction runs, so that one review can wait for others.
type sarFunc func() (allowed bool)

func (f sarFunc) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	res := sar.DeepCopy()
	res.Status.Allowed = f()
	return res, nil
}

func TestAuthorizerSendsTheServiceAccountIdentity(t *testing.T) {
	client := fake.NewSimpleClientset()
	var got *authorizationv1.SubjectAccessReview
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		got = a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		return true, got, nil
	})
	a := newAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), notLoading, time.Minute, time.Minute)
	if _, err := a.check(context.Background(), accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: share.KindConfigMap, Share: "cfg"}); err != nil {
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
	if ra.Verb != "use" || ra.Group != share.Group || ra.Resource != "sharedconfigmaps" || ra.Name != "cfg" || ra.Namespace != "team-a" {
		t.Errorf("resource attributes %+v", ra)
	}
}
