package main

// Specification of what the share informers keep of a share (shares.go's shareTransform): what
// the driver reads, and nothing of what it does not, whatever its size.

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

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
	transform := shareTransform(kindSecret)
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
	want, err := shareFromObject(kindSecret, share)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := shareFromObject(kindSecret, kept); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the share read from the cache: %+v (%v), want %+v", got, err, want)
	}
	wantConds, _ := shareConditions(share)
	if got, err := shareConditions(kept); err != nil || !reflect.DeepEqual(got, wantConds) {
		t.Errorf("conditions from the cache: %+v (%v), want %+v", got, err, wantConds)
	}
	if kept.GetName() != "corp-ca" || kept.GetResourceVersion() != "7" || kept.GetGeneration() != 3 || kept.GetUID() != "share-1" ||
		kept.GetAPIVersion() != share.GetAPIVersion() || kept.GetKind() != share.GetKind() ||
		!reflect.DeepEqual(exposedNames(kindSecret, kept), exposedNames(kindSecret, share)) {
		t.Errorf("the cache lost what a status write needs: %s", b)
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
	if _, err := shareFromObject(kindSecret, got.(*unstructured.Unstructured)); err == nil {
		t.Error("a share whose spec is not an object reads as valid from the cache")
	}
}
