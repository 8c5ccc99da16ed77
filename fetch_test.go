package main

// Specification of the source cache (fetch.go): it serves repeated gets within its TTL, bounds its
// entries and bytes and coalesces concurrent misses. A fake clientset stands in for the API
// server; the end-to-end tests prove the behaviour against a real one.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
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

func (f fakeSources) getSource(ctx context.Context, key share.SourceKey, opts metav1.GetOptions) (*share.SourceData, error) {
	kind, _ := key.Kind.Info()
	var obj share.SourceObject
	var err error
	switch key.Kind {
	case share.KindSecret:
		obj, err = f.c.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name, opts)
	case share.KindConfigMap:
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
	key := share.SourceKey{Kind: share.KindSecret, Namespace: "p", Name: "a"}
	for i := 0; i < 100; i++ {
		if _, err := c.get(context.Background(), key, nil); err != nil {
			t.Fatal(err)
		}
	}
	if gets.Load() != 1 {
		t.Errorf("%d GETs for 100 lookups within the TTL, want 1", gets.Load())
	}
	clock.t = clock.t.Add(time.Minute)
	if _, err := c.get(context.Background(), key, nil); err != nil {
		t.Fatal(err)
	}
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
		if _, err := c.get(context.Background(), share.SourceKey{Kind: share.KindSecret, Namespace: "p", Name: fmt.Sprint(i)}, nil); err != nil {
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
	if err := client.Tracker().Add(secretObj("p", "huge", 1000)); err != nil {
		t.Fatal(err)
	}
	d, err := c.get(context.Background(), share.SourceKey{Kind: share.KindSecret, Namespace: "p", Name: "huge"}, nil)
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
			d, err := c.get(context.Background(), share.SourceKey{Kind: share.KindSecret, Namespace: "p", Name: "a"}, nil)
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

// The cache holds a source as one share's list exposes it: the keys the list leaves out are
// gone before the entry is stored, and a share of the same source with another list (or none)
// gets its own entry, never the other's view.
func TestSourceCacheKeepsOnlyWhatTheShareExposes(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "tls", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA"), "tls.key": []byte("PRIVATE")}})
	gets := countGets(client)
	c, _ := newSourceCache(fakeSources{client}, 10, 1<<20, time.Minute)
	key := share.SourceKey{Kind: share.KindSecret, Namespace: "p", Name: "tls"}
	ca := share.Exposure{{Key: "ca.crt", Path: "ca.pem"}}
	d, err := c.get(context.Background(), key, ca)
	if err != nil || len(d.Files) != 1 || string(d.Files["ca.pem"]) != "CA" || d.Size != int64(len("ca.pem")+2) {
		t.Fatalf("through the list: %+v, %v", d, err)
	}
	for _, k := range c.lru.Keys() {
		e, _ := c.lru.Peek(k)
		for name, v := range e.data.Files {
			if name == "tls.key" || string(v) == "PRIVATE" {
				t.Fatalf("the cache holds the unshared key (entry %v)", k)
			}
		}
	}
	if _, bytes, _ := c.snapshot(); bytes != d.Size {
		t.Errorf("cache bytes %d, want %d", bytes, d.Size)
	}
	all, _ := c.get(context.Background(), key, nil)
	if len(all.Files) != 2 || gets.Load() != 2 {
		t.Errorf("a share without a list: %d files after %d GETs, want 2 and 2", len(all.Files), gets.Load())
	}
	again, _ := c.get(context.Background(), key, share.Exposure{{Key: "ca.crt", Path: "ca.pem"}})
	if again != d || gets.Load() != 2 {
		t.Errorf("the same list again was not served from its entry (%d GETs)", gets.Load())
	}
}

// exposeOnly (fetch.go's step after the decode) recomputes the size from what is kept, so the
// cache's byte bound counts only shared bytes.
func TestExposeOnlyCountsSharedBytes(t *testing.T) {
	d := &share.SourceData{Files: map[string][]byte{"ca.crt": []byte("CERT"), "tls.key": make([]byte, 1000)}, ResourceVersion: "7", UID: "uid-1", Size: 1013}
	got := exposeOnly(d, share.Exposure{{Key: "ca.crt", Path: "ca.crt"}})
	if got.Size != int64(len("ca.crt")+4) || got.ResourceVersion != "7" || len(got.Files) != 1 {
		t.Errorf("got %+v", got)
	}
	// The share's pin checks the UID of what it serves: a list must not lose it (it did, and a
	// share with a list then served a source deleted and created again).
	if got.UID != "uid-1" {
		t.Errorf("UID %q after the filter, want uid-1", got.UID)
	}
	pin := share.Pin{UID: "uid-0"}
	if !pin.Refuses(got.UID) {
		t.Error("a share pinned to another object must refuse the filtered source")
	}
	if exposeOnly(d, nil) != d {
		t.Error("every key: the data itself is kept")
	}
}
