package main

// What a volume needs from the API server: the share (from an informer over the two share CRDs,
// which are few and small) and the one Secret or ConfigMap it points at (a GET on demand, through
// a bounded LRU). There is deliberately no informer over Secrets or ConfigMaps: the driver's memory
// must not grow with the number of Secrets in the cluster.

import (
	"context"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// shareSpec is the part of a SharedSecret/SharedConfigMap the driver uses.
type shareSpec struct {
	Kind            shareKind
	Name            string
	SourceNamespace string
	SourceName      string
}

// sourceKey names the share's source object.
func (s shareSpec) sourceKey() sourceKey {
	return sourceKey{Kind: s.Kind, Namespace: s.SourceNamespace, Name: s.SourceName}
}

// shareFromObject reads spec.secretRef / spec.configMapRef; a share without a usable ref is an error.
func shareFromObject(k shareKind, u *unstructured.Unstructured) (shareSpec, error) {
	refField := shareRefField(k)
	ns, _, _ := unstructured.NestedString(u.Object, "spec", refField, "namespace")
	name, _, _ := unstructured.NestedString(u.Object, "spec", refField, "name")
	s := shareSpec{Kind: k, Name: u.GetName(), SourceNamespace: ns, SourceName: name}
	if !validLabel(ns) || !validName(name) {
		return s, &badShareError{fmt.Sprintf("%s %q has an invalid spec.%s (namespace %q, name %q): fix the share", k.shareTypeName(), s.Name, refField, ns, name)}
	}
	return s, nil
}

// badShareError is a share object that cannot be used as it is; only an admin's edit fixes it.
type badShareError struct{ msg string }

func (e *badShareError) Error() string { return e.msg }

// shareIndex serves shares from the informers' caches.
type shareIndex struct {
	dyn       dynamic.Interface
	informers map[shareKind]cache.SharedIndexInformer
}

// newShareIndex sets up informers on both share kinds. onChange is called with the kind and name
// of every share that is added, changed or deleted, so volumes react at once, not at the next relist.
func newShareIndex(dyn dynamic.Interface, onChange func(shareKind, string)) *shareIndex {
	si := &shareIndex{dyn: dyn, informers: map[shareKind]cache.SharedIndexInformer{}}
	for _, row := range shareKindTable {
		k := row.kind
		shares := dyn.Resource(shareGVR(k))
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return shares.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return shares.Watch(ctx, opts)
			},
		}
		// Shares are cluster-scoped: the store's key is the name, and no index is needed.
		inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{}) // no resync: nothing here acts on a timer
		notify := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok && onChange != nil {
				onChange(k, u.GetName())
			}
		}
		inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			// At start-up every share arrives as an add of the initial list. Those are not an
			// admin's changes: reacting would check every recovered volume at once, and a
			// rollout would have the whole fleet do it in the same moment. The first relist
			// cycle, at a random point within the interval, checks them instead.
			AddFunc: func(obj any, isInInitialList bool) {
				if !isInInitialList {
					notify(obj)
				}
			},
			UpdateFunc: func(oldObj, newObj any) {
				if specChanged(oldObj, newObj) {
					notify(newObj)
				}
			},
			DeleteFunc: notify,
		})
		si.informers[k] = inf
	}
	return si
}

// specChanged says whether an informer update changed a share's spec. Only status changed
// when the generation stayed (most likely the driver's own status write): nothing a volume or
// a share's Ready condition depends on.
func specChanged(oldObj, newObj any) bool {
	o, _ := oldObj.(*unstructured.Unstructured)
	n, _ := newObj.(*unstructured.Unstructured)
	return o == nil || n == nil || o.GetGeneration() != n.GetGeneration() || o.GetGeneration() == 0
}

// start runs the informers until ctx ends.
func (si *shareIndex) start(ctx context.Context) {
	for _, inf := range si.informers {
		go inf.RunWithContext(ctx)
	}
}

func (si *shareIndex) synced() bool {
	for _, inf := range si.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// get returns the share from the cache, or with one live GET when the cache does not have it
// (a share created a moment ago may not have reached the informer yet). A missing share is
// reported as a NotFound API error.
func (si *shareIndex) get(ctx context.Context, k shareKind, name string) (shareSpec, error) {
	if obj, exists, err := si.informers[k].GetStore().GetByKey(name); err == nil && exists {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return shareFromObject(k, u)
		}
	}
	u, err := si.dyn.Resource(shareGVR(k)).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return shareSpec{}, err
	}
	return shareFromObject(k, u)
}

// sourceKey names a Secret or ConfigMap.
type sourceKey struct {
	Kind      shareKind
	Namespace string
	Name      string
}

func (k sourceKey) String() string { return fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name) }

// sourceData is a source object's files. It is shared between callers and never modified.
type sourceData struct {
	Files           map[string][]byte
	ResourceVersion string
	Size            int64
}

type cachedSource struct {
	data      *sourceData
	fetchedAt time.Time
}

// sourceCache GETs sources on demand and keeps the most recently used ones, bounded both in
// entries and in total bytes, for a short TTL: long enough that a burst of publishes costs one
// GET, short enough that a publish after a change sees the change.
type sourceCache struct {
	client   sourceGetter
	ttl      time.Duration
	maxBytes int64
	now      func() time.Time
	group    singleflight.Group

	mu    sync.Mutex
	lru   *lru.Cache[sourceKey, cachedSource]
	bytes int64
	stats cacheStats
}

type cacheStats struct{ Hits, Misses, Evictions int64 }

func newSourceCache(client sourceGetter, maxEntries int, maxBytes int64, ttl time.Duration) (*sourceCache, error) {
	c := &sourceCache{client: client, ttl: ttl, maxBytes: maxBytes, now: time.Now}
	l, err := lru.NewWithEvict(maxEntries, func(_ sourceKey, v cachedSource) {
		// Called with c.mu held (from Add/Remove/RemoveOldest below).
		c.bytes -= v.data.Size
		c.stats.Evictions++
	})
	if err != nil {
		return nil, err
	}
	c.lru = l
	return c, nil
}

// get returns the source, from the cache when fresh.
func (c *sourceCache) get(ctx context.Context, key sourceKey) (*sourceData, error) {
	c.mu.Lock()
	if e, ok := c.lru.Get(key); ok && c.now().Sub(e.fetchedAt) < c.ttl {
		c.stats.Hits++
		c.mu.Unlock()
		return e.data, nil
	}
	c.stats.Misses++
	c.mu.Unlock()
	return c.fetch(ctx, key, false)
}

// fetch GETs the source and caches it. fromWatchCache asks the API server to answer from its
// watch cache (resourceVersion "0"): no quorum read of etcd, possibly a moment stale, which is
// right for periodic refresh and wrong for a publish.
func (c *sourceCache) fetch(ctx context.Context, key sourceKey, fromWatchCache bool) (*sourceData, error) {
	v, err, _ := c.group.Do(fmt.Sprintf("%s|%t", key, fromWatchCache), func() (any, error) {
		opts := metav1.GetOptions{}
		if fromWatchCache {
			opts.ResourceVersion = "0"
		}
		d, err := c.getObject(ctx, key, opts)
		if err != nil {
			// Gone, or no longer readable by the driver: new publishes must not be served the
			// cached copy either.
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				c.mu.Lock()
				c.lru.Remove(key)
				c.mu.Unlock()
			}
			return nil, err
		}
		c.store(key, d)
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*sourceData), nil
}

func (c *sourceCache) getObject(ctx context.Context, key sourceKey, opts metav1.GetOptions) (*sourceData, error) {
	kind, ok := key.Kind.info()
	if !ok {
		return nil, fmt.Errorf("unknown kind %q", key.Kind)
	}
	d, err := kind.read(ctx, c.client, key.Namespace, key.Name, opts)
	if err != nil {
		return nil, err
	}
	for k, v := range d.Files {
		d.Size += int64(len(k) + len(v))
	}
	return d, nil
}

func (c *sourceCache) store(key sourceKey, d *sourceData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key)
	if d.Size > c.maxBytes {
		return // larger than the whole cache: serve it, don't keep it
	}
	c.lru.Add(key, cachedSource{data: d, fetchedAt: c.now()})
	c.bytes += d.Size
	for c.bytes > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}

// snapshot reports the cache's size and counters.
func (c *sourceCache) snapshot() (entries int, bytes int64, stats cacheStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes, c.stats
}
