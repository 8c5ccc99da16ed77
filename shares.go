package main

// The shares: SharedSecret and SharedConfigMap objects, served from informers over the two CRDs
// (they are few and small), with a live GET for one the informer has not seen yet.

import (
	"context"
	"fmt"
	"net/http"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// shareSpec is the part of a SharedSecret/SharedConfigMap the driver uses.
type shareSpec struct {
	Kind shareKind
	Name string
	// UID is the share object's metadata.uid: a volume belongs to the object it was published
	// from, not to its name (shareidentity.go).
	UID             string
	SourceNamespace string
	SourceName      string
	// The object the share was made for, and whether it follows a re-created one
	// (sourcepin.go).
	Pin sourcePin
	// Exposed is what the share exposes of its source, its spec.items (sharekeys.go): nil is
	// every key. (The pod's own items attribute is volumeRequest.Items.)
	Exposed exposure
}

// sourceKey names the share's source object.
func (s shareSpec) sourceKey() sourceKey {
	return sourceKey{Kind: s.Kind, Namespace: s.SourceNamespace, Name: s.SourceName}
}

// shareFromObject reads spec.secretRef / spec.configMapRef and spec.items; a share without a
// usable ref, or with a list that cannot be read, is an error (never "every key").
func shareFromObject(k shareKind, u *unstructured.Unstructured) (shareSpec, error) {
	refField := shareRefField(k)
	ns, _, _ := unstructured.NestedString(u.Object, "spec", refField, "namespace")
	name, _, _ := unstructured.NestedString(u.Object, "spec", refField, "name")
	s := shareSpec{Kind: k, Name: u.GetName(), UID: string(u.GetUID()), SourceNamespace: ns, SourceName: name, Pin: pinOf(u)}
	if !validLabel(ns) || !validName(name) {
		return s, &badShareError{fmt.Sprintf("%s %q has an invalid spec.%s (namespace %q, name %q): fix the share", k.shareTypeName(), s.Name, refField, ns, name)}
	}
	raw, present, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", sharedItemsField)
	items, err := parseExposure(raw, present)
	if err != nil {
		return s, &badShareError{fmt.Sprintf("%s %q: %v: fix the share", k.shareTypeName(), s.Name, err)}
	}
	s.Exposed = items
	return s, nil
}

// shareDeletingError is a share whose deletion was asked for (metadata.deletionTimestamp is set)
// but which finalizers still keep stored. To a volume it is deleted: its files leave every volume,
// and no new volume may use it, at once, not when whatever holds the finalizer lets it go. It
// is an API NotFound (apierrors.IsNotFound), so that every caller treats it as a deleted share.
type shareDeletingError struct {
	kind shareKind
	name string
}

func (e *shareDeletingError) Error() string {
	return fmt.Sprintf("%s %q is being deleted (its metadata.finalizers keep it stored until they are removed)", e.kind.shareTypeName(), e.name)
}

// Status makes the error an API NotFound.
func (e *shareDeletingError) Status() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: e.Error()}
}

// badShareError is a share object that cannot be used as it is; only an admin's edit fixes it.
type badShareError struct{ msg string }

func (e *badShareError) Error() string { return e.msg }

// shareIndex serves shares from the informers' caches.
type shareIndex struct {
	dyn       dynamic.Interface
	informers map[shareKind]cache.SharedIndexInformer
}

// newShareIndex sets up informers on both share kinds for the node plugin. onChange is called with
// the kind and name of every share that is added, changed or deleted, so volumes react at once,
// not at the next relist. The caches keep no status.conditions (shareTransform): the node plugin
// never reads them.
func newShareIndex(dyn dynamic.Interface, onChange func(shareKind, string)) *shareIndex {
	return newShareIndexKeeping(dyn, onChange, false)
}

// newStatusShareIndex sets up informers on both share kinds for the status writer, whose caches
// keep status.conditions: it updates them in place, and writes the status back whole.
func newStatusShareIndex(dyn dynamic.Interface) *shareIndex {
	return newShareIndexKeeping(dyn, func(shareKind, string) {}, true)
}

func newShareIndexKeeping(dyn dynamic.Interface, onChange func(shareKind, string), conditions bool) *shareIndex {
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
		if err := inf.SetTransform(shareTransform(k, conditions)); err != nil {
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
				if shareChanged(k, oldObj, newObj) {
					notify(newObj)
				}
			},
			DeleteFunc: notify,
		})
		si.informers[k] = inf
	}
	return si
}

// shareTransform keeps, of each share the informer caches, only what the driver reads: its
// identity and versions, the spec fields of shareFromObject and pinOf, the pin and exposed keys,
// and, for the status writer (conditions), the conditions it writes back (an update of the status
// subresource replaces the status whole: a field not kept here would be cleared). Everything
// else is dropped as the object arrives: a share's description, annotations, labels and
// managedFields are whatever size its writer made them, and so are its conditions (the schema
// bounds their number and each message's length, and a writer other than the driver may add
// conditions of other types): every node plugin would hold every share whole, and the node
// plugin never reads conditions. (An update of the status subresource takes only the status: the
// API server keeps the spec and metadata it has.) The same function is safe on an object it
// already transformed.
func shareTransform(k shareKind, conditions bool) cache.TransformFunc {
	refField := shareRefField(k)
	statusFields := []string{pinField, "exposedKeys"}
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
		keep("spec", refField, sharedItemsField, recreationField)
		keep("status", statusFields...)
		return &unstructured.Unstructured{Object: out}, nil
	}
}

// specChanged says whether an informer update changed a share's spec. Only status changed
// when the generation stayed (most likely the status writer's own write): nothing a share's
// Ready condition depends on.
func specChanged(oldObj, newObj any) bool {
	o, _ := oldObj.(*unstructured.Unstructured)
	n, _ := newObj.(*unstructured.Unstructured)
	return o == nil || n == nil || o.GetGeneration() != n.GetGeneration() || o.GetGeneration() == 0
}

// shareChanged says whether an informer update changed anything a volume uses of a share: what
// the driver reads of it (shareFromObject: its UID, its ref, its list of keys, its pin and
// whether it follows re-creations, or why it cannot be read) and whether it is being deleted,
// compared old with new. A new
// generation is not enough: a description, labels or annotations edited change nothing a volume
// shows, and a stream of such edits would have every node react to each; the status's
// conditions (the status controller's writes) neither. A pin moved in the status (an admin
// accepting a re-created source) does count.
func shareChanged(k shareKind, oldObj, newObj any) bool {
	o, _ := oldObj.(*unstructured.Unstructured)
	n, _ := newObj.(*unstructured.Unstructured)
	if o == nil || n == nil {
		return true
	}
	if (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) {
		return true
	}
	was, wasErr := shareFromObject(k, o)
	now, nowErr := shareFromObject(k, n)
	return !reflect.DeepEqual(was, now) || fmt.Sprint(wasErr) != fmt.Sprint(nowErr)
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
// reported as a NotFound API error, and so is one being deleted (shareDeletingError).
func (si *shareIndex) get(ctx context.Context, k shareKind, name string) (shareSpec, error) {
	u, err := si.object(ctx, k, name)
	if err != nil {
		return shareSpec{}, err
	}
	if u.GetDeletionTimestamp() != nil {
		return shareSpec{}, &shareDeletingError{kind: k, name: name}
	}
	return shareFromObject(k, u)
}

// object is the share object from the cache, or from a live GET.
func (si *shareIndex) object(ctx context.Context, k shareKind, name string) (*unstructured.Unstructured, error) {
	if obj, exists, err := si.informers[k].GetStore().GetByKey(name); err == nil && exists {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			return u, nil
		}
	}
	return si.dyn.Resource(shareGVR(k)).Get(ctx, name, metav1.GetOptions{})
}
