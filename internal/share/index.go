package share

// The shares: SharedSecret and SharedConfigMap objects, served from informers over the two CRDs
// (they are few and small), with a live GET for one the informer has not seen yet.

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// Index serves shares from the informers' caches.
type Index struct {
	dyn       dynamic.Interface // the live GET of a share the cache has not seen yet
	informers map[Kind]cache.SharedIndexInformer
}

// NewIndex sets up informers on both share kinds for the node plugin. onChange is called with
// the kind and name of every share that is added, changed or deleted, so volumes react at once,
// not at the next relist. The caches keep no status.conditions (cacheTransform): the node plugin
// never reads them.
func NewIndex(dyn dynamic.Interface, onChange func(Kind, string)) *Index {
	return newIndexKeeping(dyn, onChange, false)
}

// NewStatusIndex sets up informers on both share kinds for the status writer, whose caches
// keep status.conditions: it updates them in place, and writes the status back whole.
func NewStatusIndex(dyn dynamic.Interface) *Index {
	return newIndexKeeping(dyn, func(Kind, string) {}, true)
}

func newIndexKeeping(dyn dynamic.Interface, onChange func(Kind, string), conditions bool) *Index {
	si := &Index{dyn: dyn, informers: map[Kind]cache.SharedIndexInformer{}}
	for _, row := range kinds {
		k := row.Kind
		shares := dyn.Resource(GVR(k))
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
		if err := inf.SetTransform(cacheTransform(k, conditions)); err != nil {
			panic(err) // cannot happen: the informer has not started
		}
		notify := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				onChange(k, u.GetName())
			}
		}
		// AddEventHandler fails only on an informer that has stopped; this one has not started.
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
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
				if Changed(k, oldObj, newObj) {
					notify(newObj)
				}
			},
			DeleteFunc: notify,
		})
		si.informers[k] = inf
	}
	return si
}

// cacheTransform keeps, of each share the informer caches, only what the driver reads: its
// identity and versions, the spec fields of FromObject and PinOf, the pin and exposed keys,
// and, for the status writer (conditions), the conditions it writes back (an update of the status
// subresource replaces the status whole: a field not kept here would be cleared). Everything
// else is dropped as the object arrives: a share's description, annotations, labels and
// managedFields are whatever size its writer made them, and so are its conditions (the schema
// bounds their number and each message's length, and a writer other than the driver may add
// conditions of other types): every node plugin would hold every share whole, and the node
// plugin never reads conditions. (An update of the status subresource takes only the status: the
// API server keeps the spec and metadata it has.) The same function is safe on an object it
// already transformed.
func cacheTransform(k Kind, conditions bool) cache.TransformFunc {
	refField := RefField(k)
	statusFields := []string{PinField, "exposedKeys"}
	if conditions {
		statusFields = append(statusFields, "conditions")
	}
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone, or a list: nothing cached as is
		}
		meta := map[string]any{}
		if m, ok := u.Object["metadata"].(map[string]any); ok {
			for _, f := range []string{"name", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp"} {
				if v, ok := m[f]; ok {
					meta[f] = v
				}
			}
		}
		out := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": meta}
		keep := func(part string, fields ...string) {
			m, ok := u.Object[part].(map[string]any)
			if !ok {
				if v, present := u.Object[part]; present {
					out[part] = v // not an object: kept, so that reading it fails as it would have
				}
				return
			}
			kept := map[string]any{}
			for _, f := range fields {
				if v, ok := m[f]; ok {
					kept[f] = v
				}
			}
			out[part] = kept
		}
		keep("spec", refField, ItemsField, RecreationField)
		keep("status", statusFields...)
		return &unstructured.Unstructured{Object: out}, nil
	}
}

// SpecChanged says whether an informer update changed a share's spec. Only status changed
// when the generation stayed (most likely the status writer's own write): nothing a share's
// Ready condition depends on.
func SpecChanged(oldObj, newObj any) bool {
	o, _ := oldObj.(*unstructured.Unstructured)
	n, _ := newObj.(*unstructured.Unstructured)
	return o == nil || n == nil || o.GetGeneration() != n.GetGeneration() || o.GetGeneration() == 0
}

// Changed says whether an informer update changed anything a volume uses of a share: what
// the driver reads of it (FromObject: its UID, its ref, its list of keys, its pin and
// whether it follows re-creations, or why it cannot be read) and whether it is being deleted,
// compared old with new. A new
// generation is not enough: a description, labels or annotations edited change nothing a volume
// shows, and a stream of such edits would have every node react to each; the status's
// conditions (the status controller's writes) neither. A pin moved in the status (an admin
// accepting a re-created source) does count.
func Changed(k Kind, oldObj, newObj any) bool {
	o, _ := oldObj.(*unstructured.Unstructured)
	n, _ := newObj.(*unstructured.Unstructured)
	if o == nil || n == nil {
		return true
	}
	if (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) {
		return true
	}
	was, wasErr := FromObject(k, o)
	now, nowErr := FromObject(k, n)
	return !reflect.DeepEqual(was, now) || fmt.Sprint(wasErr) != fmt.Sprint(nowErr)
}

// Start runs the informers until ctx ends.
func (si *Index) Start(ctx context.Context) {
	for _, inf := range si.informers {
		go inf.RunWithContext(ctx)
	}
}

// Informers yields each kind of share with its informer, for a caller that handles the shares'
// events itself (the status writer).
func (si *Index) Informers() iter.Seq2[Kind, cache.SharedIndexInformer] {
	return maps.All(si.informers)
}

// Informer is the informer of kind k's shares; nil for a kind the index has none for.
func (si *Index) Informer(k Kind) cache.SharedIndexInformer { return si.informers[k] }

// Synced says whether every informer has synced its cache.
func (si *Index) Synced() bool {
	for _, inf := range si.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Get returns the share from the cache, or with one live GET when the cache does not have it
// (a share created a moment ago may not have reached the informer yet). A missing share is
// reported as a NotFound API error, and so is one being deleted (DeletingError).
func (si *Index) Get(ctx context.Context, k Kind, name string) (Spec, error) {
	u, err := si.object(ctx, k, name)
	if err != nil {
		return Spec{}, err
	}
	if u.GetDeletionTimestamp() != nil {
		return Spec{}, &DeletingError{kind: k, name: name}
	}
	return FromObject(k, u)
}

// object is the share object from the cache, or from a live GET.
func (si *Index) object(ctx context.Context, k Kind, name string) (*unstructured.Unstructured, error) {
	if obj, exists, err := si.informers[k].GetStore().GetByKey(name); err == nil && exists {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return u, nil
		}
	}
	return si.dyn.Resource(GVR(k)).Get(ctx, name, metav1.GetOptions{})
}
