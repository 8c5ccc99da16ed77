package main

// The sources: the one Secret or ConfigMap a share points at, fetched with a GET on demand (by
// its kind's resource, internal/share/kinds.go; decoded by sourcedecode.go) and kept in a bounded LRU.
// There is deliberately no informer over Secrets or ConfigMaps: the driver's memory must not
// grow with the number of Secrets in the cluster. (The shares themselves: internal/share/index.go.)
//
// What is cached is a source as one share exposes it (internal/share/exposure.go): the keys outside the
// share's list are dropped right after the decode of the GET, before the object enters the cache,
// so the cache is keyed by the source and the list.

import (
	"context"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/shared-resource/csi-driver/internal/share"
	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cacheKey is a source seen through one share's list (exposure.fingerprint; "" for every key).
type cacheKey struct {
	share.SourceKey
	exposed string
}

type cachedSource struct {
	data      *share.SourceData
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
	lru   *lru.Cache[cacheKey, cachedSource]
	bytes int64
	stats cacheStats
}

type cacheStats struct{ Hits, Misses, Evictions int64 }

func newSourceCache(client sourceGetter, maxEntries int, maxBytes int64, ttl time.Duration) (*sourceCache, error) {
	c := &sourceCache{client: client, ttl: ttl, maxBytes: maxBytes, now: time.Now}
	l, err := lru.NewWithEvict(maxEntries, func(_ cacheKey, v cachedSource) {
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

// get returns the source as shared exposes it, from the cache when fresh.
func (c *sourceCache) get(ctx context.Context, key share.SourceKey, shared share.Exposure) (*share.SourceData, error) {
	c.mu.Lock()
	if e, ok := c.lru.Get(cacheKey{key, shared.Fingerprint()}); ok && c.now().Sub(e.fetchedAt) < c.ttl {
		c.stats.Hits++
		c.mu.Unlock()
		return e.data, nil
	}
	c.stats.Misses++
	c.mu.Unlock()
	return c.fetch(ctx, key, shared, metav1.GetOptions{})
}

// refresh GETs the source for the relist, from the API server's watch cache (resourceVersion
// "0"): no quorum read of etcd, possibly a moment stale, which is right for periodic refresh and
// wrong for a publish. The answer refreshes the cache.
func (c *sourceCache) refresh(ctx context.Context, key share.SourceKey, shared share.Exposure) (*share.SourceData, error) {
	return c.fetch(ctx, key, shared, metav1.GetOptions{ResourceVersion: "0"})
}

// fetch GETs the source with opts, keeps what shared exposes and caches that. Concurrent calls
// alike share one request.
func (c *sourceCache) fetch(ctx context.Context, key share.SourceKey, shared share.Exposure, opts metav1.GetOptions) (*share.SourceData, error) {
	ck := cacheKey{key, shared.Fingerprint()}
	v, err, _ := c.group.Do(key.String()+"|"+ck.exposed+"|"+opts.ResourceVersion, func() (any, error) {
		d, err := c.client.getSource(ctx, key, opts)
		if err != nil {
			// Gone, or no longer readable by the driver: new publishes must not be served a
			// cached copy either, through any share's list.
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				c.forget(key)
			}
			return nil, err
		}
		// Here, right after the decode, and before anything keeps it: the keys the share does
		// not expose go.
		d = exposeOnly(d, shared)
		c.store(ck, d)
		return d, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*share.SourceData), nil
}

// exposeOnly is d as shared exposes it: a new share.SourceData holding only the shared keys.
func exposeOnly(d *share.SourceData, shared share.Exposure) *share.SourceData {
	if shared.All() {
		return d
	}
	// A copy of d, so that what says which object this is (its UID, which the share's pin
	// checks, and its resourceVersion) comes along; only the files and their size change.
	out := *d
	out.Files, out.Missing = shared.Filter(d.Files)
	out.Size = 0
	for k, v := range out.Files {
		out.Size += int64(len(k) + len(v))
	}
	return &out
}

// forget drops every cached view of the source.
func (c *sourceCache) forget(key share.SourceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.lru.Keys() {
		if k.SourceKey == key {
			c.lru.Remove(k)
		}
	}
}

func (c *sourceCache) store(key cacheKey, d *share.SourceData) {
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

// sourceGetter GETs source objects.
type sourceGetter interface {
	getSource(ctx context.Context, key share.SourceKey, opts metav1.GetOptions) (*share.SourceData, error)
}

var _ sourceGetter = (*kubeClient)(nil)

// getSource GETs the object key names, by its kind's resource, and returns its files.
func (k *kubeClient) getSource(ctx context.Context, key share.SourceKey, opts metav1.GetOptions) (*share.SourceData, error) {
	kind, ok := key.Kind.Info()
	if !ok {
		return nil, fmt.Errorf("unknown kind %q", key.Kind)
	}
	obj := kind.NewSource()
	req := k.Core.Get().Namespace(key.Namespace).Resource(kind.Source.Resource).Name(key.Name).
		VersionedParams(&opts, metav1.ParameterCodec)
	if err := k.getInto(ctx, req, string(key.Kind), obj); err != nil {
		return nil, err
	}
	return newSourceData(kind, obj), nil
}

// newSourceData is the files of obj, a decoded source of kind.
func newSourceData(kind share.KindInfo, obj share.SourceObject) *share.SourceData {
	d := &share.SourceData{Files: kind.Files(obj), ResourceVersion: obj.GetResourceVersion(), UID: string(obj.GetUID()), Created: obj.GetCreationTimestamp().Time}
	for k, v := range d.Files {
		d.Size += int64(len(k) + len(v))
	}
	return d
}
