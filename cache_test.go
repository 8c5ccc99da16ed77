package main

// Specification of the caches' logic: the source cache (fetch.go) serves repeated gets within its
// TTL, bounds its entries and bytes and coalesces concurrent misses; the authorizer (authz.go)
// caches grants but not denials or errors and asks as the pod's service account; stripSecrets
// (csi.go) keeps secrets and tokens out of logged requests. A fake clientset stands in for the API
// server; the end-to-end tests prove the behaviour against a real one.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func secretObj(ns, name string, size int) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"},
		Data: map[string][]byte{"k": make([]byte, size)}}
}

// fakeSources reads Secrets and ConfigMaps from a fake clientset.
type fakeSources struct{ c *fake.Clientset }

func (f fakeSources) getSource(ctx context.Context, key sourceKey, opts metav1.GetOptions) (*sourceData, error) {
	kind, _ := key.Kind.info()
	var obj sourceObject
	var err error
	switch key.Kind {
	case kindSecret:
		obj, err = f.c.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name, opts)
	case kindConfigMap:
		obj, err = f.c.CoreV1().ConfigMaps(key.Namespace).Get(ctx, key.Name, opts)
	}
	if err != nil {
		return nil, err
	}
	return newSourceData(kind, obj), nil
}

func countGets(client *fake.Clientset) *atomic.Int64 {
	var n atomic.Int64
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return false, nil, nil
	})
	return &n
}

func TestSourceCacheServesRepeatedGetsWithinTTL(t *testing.T) {
	client := fake.NewSimpleClientset(secretObj("p", "a", 10))
	gets := countGets(client)
	c, _ := newSourceCache(fakeSources{client}, 10, 1<<20, time.Minute)
	clock := &fakeClock{t: time.Unix(0, 0)}
	c.now = clock.now
	key := sourceKey{Kind: kindSecret, Namespace: "p", Name: "a"}
	for i := 0; i < 100; i++ {
		if _, err := c.get(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	if gets.Load() != 1 {
		t.Errorf("%d GETs for 100 lookups within the TTL, want 1", gets.Load())
	}
	clock.t = clock.t.Add(time.Minute)
	c.get(context.Background(), key)
	if gets.Load() != 2 {
		t.Errorf("after the TTL: %d GETs, want 2", gets.Load())
	}
}

func TestSourceCacheBoundsEntriesAndBytes(t *testing.T) {
	var objs []runtime.Object
	for i := 0; i < 10; i++ {
		objs = append(objs, secretObj("p", fmt.Sprint(i), 100))
	}
	client := fake.NewSimpleClientset(objs...)
	// At most 4 entries, at most 350 bytes (three 101-byte entries).
	c, _ := newSourceCache(fakeSources{client}, 4, 350, time.Minute)
	for i := 0; i < 10; i++ {
		if _, err := c.get(context.Background(), sourceKey{Kind: kindSecret, Namespace: "p", Name: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		entries, bytes, _ := c.snapshot()
		if entries > 4 || bytes > 350 {
			t.Fatalf("cache grew to %d entries, %d bytes", entries, bytes)
		}
	}
	entries, bytes, stats := c.snapshot()
	if entries != 3 || bytes != 303 {
		t.Errorf("got %d entries / %d bytes, want 3 / 303", entries, bytes)
	}
	if stats.Evictions == 0 {
		t.Error("no evictions counted")
	}
	// An object larger than the whole cache is served but not kept.
	client.Tracker().Add(secretObj("p", "huge", 1000))
	d, err := c.get(context.Background(), sourceKey{Kind: kindSecret, Namespace: "p", Name: "huge"})
	if err != nil || len(d.Files["k"]) != 1000 {
		t.Fatalf("huge object: %v", err)
	}
	if _, bytes, _ := c.snapshot(); bytes > 350 {
		t.Errorf("huge object kept: %d bytes", bytes)
	}
}

func TestSourceCacheCoalescesConcurrentMisses(t *testing.T) {
	client := fake.NewSimpleClientset(secretObj("p", "a", 10))
	release := make(chan struct{})
	var gets atomic.Int64
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		<-release
		return false, nil, nil
	})
	c, _ := newSourceCache(fakeSources{client}, 10, 1<<20, time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.get(context.Background(), sourceKey{Kind: kindSecret, Namespace: "p", Name: "a"})
			if err == nil && (d.ResourceVersion != "1" || len(d.Files["k"]) != 10) {
				err = fmt.Errorf("got %+v", d)
			}
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a caller sharing the GET: %v", err)
		}
	}
	if gets.Load() != 1 {
		t.Errorf("%d GETs for 20 concurrent misses, want 1", gets.Load())
	}
}

func fakeSARClient(allowed func() (bool, error)) (*fake.Clientset, *atomic.Int64) {
	client := fake.NewSimpleClientset()
	var n atomic.Int64
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		ok, err := allowed()
		if err != nil {
			return true, nil, err
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = ok
		return true, sar, nil
	})
	return client, &n
}

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
	a.check(context.Background(), accessKey{Namespace: "team-a", ServiceAccount: "app", Kind: kindConfigMap, Share: "cfg"})
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

func TestStripSecretsRemovesSecretsAndTokens(t *testing.T) {
	req := goodPublishRequest()
	req.Secrets = map[string]string{"password": "hunter2-secret"}
	req.VolumeContext[ctxServiceAccountTok] = `{"aud":{"token":"eyJhbGciOi-secret-token"}}`
	out := prototext.Format(stripSecrets(req))
	for _, leak := range []string{"hunter2-secret", "eyJhbGciOi-secret-token"} {
		if strings.Contains(out, leak) {
			t.Errorf("sanitized request still contains %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "corp-ca") || !strings.Contains(out, strippedValue) {
		t.Errorf("sanitized request lost non-secret fields:\n%s", out)
	}
	// The original is untouched.
	if req.Secrets["password"] != "hunter2-secret" {
		t.Error("stripSecrets modified the request")
	}
}
