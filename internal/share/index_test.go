package share

// Specification of what the share informers keep of a share (index.go's cacheTransform): what
// the driver reads, and nothing of what it does not, whatever its size.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// The informers' heap with forty shares of 1.4 MiB descriptions each (as a share under
// OpenShift's CRD may have; ours bounds it): what the caches hold grows by what the driver reads
// of them, not by the shares' size. (The real API server and driver process:
// test/e2e/api's TestShareCachesHoldOnlyWhatTheDriverReads.)
func TestShareCachesStayFlatWithLargeShares(t *testing.T) {
	const shares = 40
	si, grew := syncShareCaches(t, shares, func(i int) map[string]any {
		return map[string]any{"description": strings.Repeat(fmt.Sprint(i%10), 1400<<10), "secretRef": map[string]any{"namespace": "p", "name": "src"}}
	}, nil, func(dyn dynamic.Interface) *Index { return NewIndex(dyn, func(Kind, string) {}) })
	ctx := context.Background()
	t.Logf("%d shares of 1.4 MiB descriptions: the caches grew the heap by %.1f MiB", shares, float64(grew)/(1<<20))
	if grew > shares*64<<10 {
		t.Errorf("%d shares of 1.4 MiB descriptions grew the heap by %.1f MiB; want at most 64 KiB a share", shares, float64(grew)/(1<<20))
	}
	if sh, err := si.Get(ctx, KindSecret, "share-7"); err != nil || sh.SourceName != "src" || sh.UID != "uid-7" {
		t.Errorf("share-7 from the cache: %+v, %v", sh, err)
	}
}

func TestShareCacheKeepsOnlyWhatTheDriverReads(t *testing.T) {
	big := strings.Repeat("x", 1400<<10)
	share := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sharedresource.openshift.io/v1alpha1", "kind": "SharedSecret",
		"metadata": map[string]any{"name": "corp-ca", "uid": "share-1", "resourceVersion": "7", "generation": int64(3),
			"annotations":   map[string]any{"example.com/bulk": big},
			"labels":        map[string]any{"example.com/team": big[:63]},
			"managedFields": []any{map[string]any{"manager": "kubectl", "fieldsV1": map[string]any{"f:spec": big}}},
			"finalizers":    []any{"example.com/keep"}},
		"spec": map[string]any{"description": big, "sourceRecreation": "Follow",
			"secretRef": map[string]any{"namespace": "platform", "name": "ca"},
			"items":     []any{map[string]any{"key": "ca.crt", "path": "ca.pem"}}},
		"status": map[string]any{"sourceUID": "src-1", "exposedKeys": []any{"ca.pem"},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "SourceAvailable", "message": "ok",
				"lastTransitionTime": "2026-11-26T06:00:00Z", "observedGeneration": int64(3)}}},
	}}
	transform := cacheTransform(KindSecret, true) // the status writer's, which keeps conditions
	obj, err := transform(share)
	if err != nil {
		t.Fatal(err)
	}
	kept := obj.(*unstructured.Unstructured)
	b, _ := json.Marshal(kept.Object)
	if len(b) > 1024 {
		t.Errorf("the cache keeps %d bytes of a share with a 1.4 MiB description, annotation and managedFields: %s", len(b), b[:200])
	}
	for _, f := range [][]string{{"spec", "description"}, {"metadata", "annotations"}, {"metadata", "labels"}, {"metadata", "managedFields"}} {
		if _, found, _ := unstructured.NestedFieldNoCopy(kept.Object, f...); found {
			t.Errorf("the cache keeps %s", strings.Join(f, "."))
		}
	}
	// What the driver reads is the same from the kept object as from the whole one.
	want, err := FromObject(KindSecret, share)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := FromObject(KindSecret, kept); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the share read from the cache: %+v (%v), want %+v", got, err, want)
	}
	wantConds, _ := Conditions(share)
	if got, err := Conditions(kept); err != nil || !reflect.DeepEqual(got, wantConds) {
		t.Errorf("conditions from the cache: %+v (%v), want %+v", got, err, wantConds)
	}
	if kept.GetName() != "corp-ca" || kept.GetResourceVersion() != "7" || kept.GetGeneration() != 3 || kept.GetUID() != "share-1" ||
		kept.GetAPIVersion() != share.GetAPIVersion() || kept.GetKind() != share.GetKind() ||
		!reflect.DeepEqual(ExposedNames(KindSecret, kept), ExposedNames(KindSecret, share)) {
		t.Errorf("the cache lost what a status write needs: %s", b)
	}
	// The node plugin's caches keep no conditions; the rest is the same.
	nodeKept, err := cacheTransform(KindSecret, false)(share)
	if err != nil {
		t.Fatal(err)
	}
	if conds, err := Conditions(nodeKept.(*unstructured.Unstructured)); err != nil || conds != nil {
		t.Errorf("the node plugin's cache keeps conditions: %+v (%v)", conds, err)
	}
	if got, err := FromObject(KindSecret, nodeKept.(*unstructured.Unstructured)); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the share read from the node plugin's cache: %+v (%v), want %+v", got, err, want)
	}
	// Safe on an object already transformed, and on what is not a share object.
	if again, err := transform(kept); err != nil || !reflect.DeepEqual(again, kept) {
		t.Errorf("transformed twice: %v (%v), want %v", again, err, kept)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "corp-ca", Obj: share}
	if got, err := transform(tomb); err != nil || !reflect.DeepEqual(got, tomb) {
		t.Errorf("a tombstone: %v (%v), want it unchanged", got, err)
	}
	// A ref that is not an object still reads as the invalid share it is.
	bad := share.DeepCopy()
	bad.Object["spec"] = "not an object"
	got, _ := transform(bad)
	if _, err := FromObject(KindSecret, got.(*unstructured.Unstructured)); err == nil {
		t.Error("a share whose spec is not an object reads as valid from the cache")
	}
}

// The node plugin never reads a share's conditions, and its caches keep none: forty-four
// conditions of 32 KiB messages (what the schema once allowed on each share) held on every node
// grew its heap by 1.4 MiB a share. The status writer's caches keep them, to update them in place.
func TestNodeShareCachesHoldNoConditions(t *testing.T) {
	const shares = 20
	node, grew := sharesWithConditionsCached(t, shares, func(dyn dynamic.Interface) *Index {
		return NewIndex(dyn, func(Kind, string) {})
	})
	t.Logf("%d shares of 44 conditions of 32 KiB: the node's caches grew the heap by %.1f MiB", shares, float64(grew)/(1<<20))
	u := cachedShare(t, node, "share-3")
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "conditions"); found {
		t.Error("the node's share cache keeps status.conditions")
	}
	if pin, _, _ := unstructured.NestedString(u.Object, "status", PinField); pin != "src-1" {
		t.Errorf("the node's share cache lost the pin: %v", u.Object["status"])
	}
	if grew > shares*64<<10 {
		t.Errorf("%d shares of 44 conditions of 32 KiB grew the node's heap by %.1f MiB; want at most 64 KiB a share", shares, float64(grew)/(1<<20))
	}
	status, _ := sharesWithConditionsCached(t, 1, NewStatusIndex)
	if conds, err := Conditions(cachedShare(t, status, "share-0")); err != nil || len(conds) != 44 {
		t.Errorf("the status writer's share cache keeps %d conditions (%v), want 44", len(conds), err)
	}
}

// sharesWithConditionsCached syncs the share caches build makes over n shares of 44 conditions
// of 32 KiB messages each, and says how much they grew the heap.
func sharesWithConditionsCached(t *testing.T, n int, build func(dynamic.Interface) *Index) (*Index, int64) {
	return syncShareCaches(t, n, func(int) map[string]any {
		return map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}}
	}, func(int) map[string]any {
		var conds []any
		for c := range 44 {
			conds = append(conds, map[string]any{"type": fmt.Sprintf("Example%d", c), "status": "True", "reason": "Padding",
				"message": strings.Repeat(fmt.Sprint(c%10), 32768), "lastTransitionTime": "2026-11-26T06:00:00Z"})
		}
		return map[string]any{"sourceUID": "src-1", "conditions": conds}
	}, build)
}

// syncShareCaches syncs the share caches build makes over n SharedSecrets share-I (uid-I), whose
// spec and status (nil: none) are spec(I) and status(I), listed anew at each list as an API
// server's answer decodes, and says how much they grew the heap. The fake client sends no
// bookmarks: list, then watch, as against an older API server.
func syncShareCaches(t *testing.T, n int, spec, status func(int) map[string]any, build func(dynamic.Interface) *Index) (*Index, int64) {
	t.Helper()
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	list := func() *unstructured.UnstructuredList {
		l := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "sharedresource.openshift.io/v1alpha1", "kind": "SharedSecretList",
			"metadata": map[string]any{"resourceVersion": "1"}}}
		for i := range n {
			obj := map[string]any{
				"apiVersion": "sharedresource.openshift.io/v1alpha1", "kind": "SharedSecret",
				"metadata": map[string]any{"name": fmt.Sprintf("share-%d", i), "uid": fmt.Sprintf("uid-%d", i), "resourceVersion": "1"},
				"spec":     spec(i),
			}
			if status != nil {
				obj["status"] = status(i)
			}
			l.Items = append(l.Items, unstructured.Unstructured{Object: obj})
		}
		return l
	}
	listKinds := map[schema.GroupVersionResource]string{}
	for _, row := range kinds {
		listKinds[GVR(row.Kind)] = row.TypeName + "List"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), listKinds)
	dyn.PrependReactor("list", kinds[0].Resource, func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, list(), nil
	})
	si := build(dyn)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	si.Start(ctx)
	for deadline := time.Now().Add(30 * time.Second); !si.Synced() || len(si.informers[KindSecret].GetStore().ListKeys()) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the share caches did not sync")
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return si, int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

func cachedShare(t *testing.T, si *Index, name string) *unstructured.Unstructured {
	t.Helper()
	obj, _, _ := si.informers[KindSecret].GetStore().GetByKey(name)
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("%s not cached: %v", name, obj)
	}
	return u
}

// A share whose deletion was asked for is deleted to the driver, though finalizers keep it
// stored: get says NotFound (every caller treats it as a deleted share), and setting the
// deletionTimestamp is a change volumes react to. (The real API server holding a share by a
// finalizer: test/e2e/api's TestShareDeletedActsThroughTheWatchNotTheRelist.)
func TestShareBeingDeletedIsNotFound(t *testing.T) {
	share := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sharedresource.openshift.io/v1alpha1", "kind": "SharedSecret",
		"metadata": map[string]any{"name": "corp-ca", "uid": "share-1", "resourceVersion": "7", "generation": int64(1),
			"finalizers": []any{"example.com/keep"}},
		"spec": map[string]any{"secretRef": map[string]any{"namespace": "platform", "name": "ca"}},
	}}
	deleting := share.DeepCopy()
	deleting.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	if !Changed(KindSecret, share, deleting) {
		t.Error("a share's deletion being asked for is no change to its volumes")
	}
	for name, obj := range map[string]*unstructured.Unstructured{"stored": share, "being deleted": deleting} {
		si := NewIndex(dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme()), func(Kind, string) {})
		transformed, err := cacheTransform(KindSecret, false)(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := si.informers[KindSecret].GetStore().Add(transformed); err != nil {
			t.Fatal(err)
		}
		sh, err := si.Get(context.Background(), KindSecret, "corp-ca")
		switch {
		case name == "stored" && (err != nil || sh.SourceName != "ca"):
			t.Errorf("%s: %+v, %v; want the share", name, sh, err)
		case name == "being deleted" && !apierrors.IsNotFound(err):
			t.Errorf("%s: %+v, %v; want NotFound", name, sh, err)
		case name == "being deleted" && !strings.Contains(err.Error(), "is being deleted"):
			t.Errorf("%s: the error %q does not say why", name, err)
		}
	}
}
