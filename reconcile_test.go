package main

// Specification of a reconcile (reconcile.go: judge, then applyVerdicts) of one published volume
// on a fake node, for the rows of judge.go's tables, as the pod sees it (its view), as
// the driver remembers it (the saved record) and as the pod is told (events, once per change):
//   - revoked when the pod may no longer use the share, restored when it may again: a volume
//     that refreshes comes back with the source as it is now, one that does not with exactly
//     the files it was published with;
//   - refreshed when the source has a new version, and only then;
//   - revoked when the share is deleted, and back when it is created again as it was;
//   - as it is when the source is deleted, or any API request fails: an outage never revokes;
//   - as it is, told once, when the share's pinned source was replaced by another object;
//   - narrowed to what the share's new list still shares, even when nothing else can be judged;
//   - torn down when its pod is gone; retried whole when its record cannot be saved.
// The judge's verdicts alone, share by share: judge_test.go, judge_narrow_test.go,
// shareidentity_test.go; a new copy over the node's budget: budget_test.go.

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// expectEvents fails unless the events recorded since the last look have exactly these reasons.
func expectEvents(t *testing.T, events chan string, step string, want ...string) {
	t.Helper()
	if got := reasons(events); !slices.Equal(got, want) {
		t.Fatalf("%s: events %q, want %q", step, got, want)
	}
}

func TestReconcileRevokesAndRestoresARefreshingVolume(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1")

	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
		t.Fatalf("granted, unchanged: %v, the pod sees %v", err, podView(t, d, "vol-1"))
	}
	expectEvents(t, events, "granted, unchanged")

	c.allowed = false
	for range 2 { // told once
		if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1")) {
			t.Fatalf("denied: %v, the pod sees %v; want nothing", err, podView(t, d, "vol-1"))
		}
	}
	expectEvents(t, events, "denied", reasonRevoked)
	rec := savedRecord(t, d, "vol-1")
	copyLeft, _ := atomicwriter.ReadFiles(d.store.DirOf(rec).CopyPath(0))
	if !rec.Shares[0].Told.Hidden() || len(copyLeft) != 0 || rec.Shares[0].Entries != 0 {
		t.Fatalf("record %+v, copy %v: want the share revoked and its copy dropped (a restore fetches anew)", rec.Shares[0], copyLeft)
	}

	c.setSource(map[string]string{"ca.crt": "CA2"}) // rotated while revoked
	c.allowed = true
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA2") {
		t.Fatalf("granted again: %v, the pod sees %v; want the source as it is now", err, podView(t, d, "vol-1"))
	}
	expectEvents(t, events, "granted again", reasonRestored)
	if rec := savedRecord(t, d, "vol-1"); rec.Shares[0].Told.Hidden() || rec.Shares[0].ResourceVersion != "2" {
		t.Fatalf("record %+v: want the share shown at resourceVersion 2", rec.Shares[0])
	}
}

func TestReconcileOfAVolumeThatDoesNotRefreshKeepsItsFiles(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1", attrRefreshResource, "false")

	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
		t.Fatalf("source changed: %v, the pod sees %v; want the files published", err, podView(t, d, "vol-1"))
	}
	c.allowed = false
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1")) {
		t.Fatalf("denied: %v, the pod sees %v; want nothing", err, podView(t, d, "vol-1"))
	}
	c.allowed = true
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
		t.Fatalf("granted again: %v, the pod sees %v; want exactly the files published, kept while revoked", err, podView(t, d, "vol-1"))
	}
	expectEvents(t, events, "revoked and restored", reasonRevoked, reasonRestored)
}

func TestReconcileRefreshesOnlyANewVersion(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1")
	before, _ := os.ReadFile(d.store.RecordPath("vol-1"))
	viewDir, _ := os.Readlink(filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir, "..data"))

	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(d.store.RecordPath("vol-1"))
	sameView, _ := os.Readlink(filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir, "..data"))
	if string(before) != string(after) || viewDir != sameView {
		t.Fatalf("the version shown: the record or the view was rewritten (%q, then %q)", viewDir, sameView)
	}

	c.setSource(map[string]string{"ca.crt": "CA2", "extra": "X"})
	for range 2 {
		if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA2", "extra", "X") {
			t.Fatalf("new version: %v, the pod sees %v", err, podView(t, d, "vol-1"))
		}
	}
	expectEvents(t, events, "new version", reasonRefreshed)
	if rec := savedRecord(t, d, "vol-1"); rec.Shares[0].ResourceVersion != "2" {
		t.Fatalf("record %+v: want resourceVersion 2", rec.Shares[0])
	}
}

// The share deleted (gone from the informer, and its live GET answers NotFound): revoked, told
// once; created again as it was, the volume resumes.
func TestReconcileRevokesADeletedShare(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1")
	deleteShareFromCache(t, d, "share")
	for range 2 {
		if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1")) {
			t.Fatalf("share deleted: %v, the pod sees %v; want nothing", err, podView(t, d, "vol-1"))
		}
	}
	putSecretShare(t, d, "share", "share-1", "p", "src")
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
		t.Fatalf("share back: %v, the pod sees %v", err, podView(t, d, "vol-1"))
	}
	expectEvents(t, events, "deleted and back", reasonRevoked, reasonRestored)
}

// The source deleted: the last files stay, as the kubelet's own secret volumes keep theirs.
func TestReconcileKeepsTheLastFilesOfADeletedSource(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1")
	c.deleteSource()
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
		t.Fatalf("source deleted: %v, the pod sees %v; want the last files", err, podView(t, d, "vol-1"))
	}
	expectEvents(t, events, "source deleted")
}

// Any API error leaves the volume exactly as it is, even when the pod has lost its access
// meanwhile (an answer the driver could not get) or the source changed: only an answer revokes. The reconcile returns the error (the cycle counts it).
func TestReconcileOnAnAPIErrorLeavesTheVolumeAsItIs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breaks func(c *fakeCluster, d *driver)
	}{
		{"the review fails", func(c *fakeCluster, _ *driver) { c.allowed, c.reviewErr = false, errOutage }},
		{"the source's GET fails", func(c *fakeCluster, _ *driver) { c.sourceErr = errOutage }},
		{"the share is not cached and its GET fails", func(c *fakeCluster, d *driver) {
			deleteShareFromCache(t, d, "share")
			c.allowed, c.shareErr = false, errOutage
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			d, events := c.node()
			publishVolume(t, d, "vol-1")
			before := savedRecord(t, d, "vol-1")
			c.setSource(map[string]string{"ca.crt": "CA2"})
			tc.breaks(c, d)
			if err := reconcileVolume(t, d, "vol-1"); err == nil {
				t.Fatal("the reconcile did not report the error")
			}
			if !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
				t.Fatalf("the pod sees %v; want the files as they were", podView(t, d, "vol-1"))
			}
			if after := savedRecord(t, d, "vol-1"); !reflect.DeepEqual(after.Shares, before.Shares) {
				t.Fatalf("record %+v; want it as it was, %+v", after.Shares, before.Shares)
			}
			expectEvents(t, events, tc.name)
		})
	}
}

// The share's pin (internal/share/pin.go) refuses the source re-created as another object: the volume
// keeps its last files, and the pod is told once what accepts the new object.
func TestReconcileKeepsTheLastFilesOfASourceThePinRefuses(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1")
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "share", "uid": "share-1"},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}},
		"status":   map[string]any{share.PinField: "src-0"}, // made for an object since deleted
	}}
	if err := d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
		t.Fatal(err)
	}
	c.setSource(map[string]string{"ca.crt": "NOT-THE-SAME-OBJECT"})
	for range 2 {
		if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
			t.Fatalf("pin refuses: %v, the pod sees %v; want the last files", err, podView(t, d, "vol-1"))
		}
	}
	expectEvents(t, events, "pin refuses", reasonRefreshFailed)
	if rec := savedRecord(t, d, "vol-1"); rec.Shares[0].Told != volume.ToldSourceReplaced {
		t.Fatalf("record %+v: want SourceReplaced, so the pod is told once", rec.Shares[0])
	}
}

// recreateSource deletes Secret p/src and creates it again as another object (UID uid) holding
// data.
func (c *fakeCluster) recreateSource(uid string, data map[string]string) {
	c.deleteSource()
	c.version++
	b := map[string][]byte{}
	for k, v := range data {
		b[k] = []byte(v)
	}
	if _, err := c.client.CoreV1().Secrets("p").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: types.UID(uid), ResourceVersion: strconv.Itoa(c.version)}, Data: b}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// A share whose status has no pin yet (the status controller down, lagging, or unable to read the
// source): the volume's recorded source is its pin, so a source re-created as another object is
// refused as a pinned share refuses it, not followed. Following it needs the share to say so
// (spec.sourceRecreation: Follow), or its pin moved to the new object (an admin's accept).
func TestReconcileWithoutAPinOnTheShareKeepsTheVolumesSource(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node() // the share has no status.sourceUID
	publishVolume(t, d, "vol-1")
	if rec := savedRecord(t, d, "vol-1"); rec.Shares[0].SourceUID != "src-1" {
		t.Fatalf("record %+v: want the source's UID recorded at publish", rec.Shares[0])
	}
	c.recreateSource("src-2", map[string]string{"ca.crt": "RE-CREATOR-CA"})
	for range 2 {
		if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
			t.Fatalf("no pin on the share, source re-created: %v, the pod sees %v; want the original files", err, podView(t, d, "vol-1"))
		}
	}
	expectEvents(t, events, "source re-created", reasonRefreshFailed)
	if rec := savedRecord(t, d, "vol-1"); rec.Shares[0].Told != volume.ToldSourceReplaced || rec.Shares[0].SourceUID != "src-1" {
		t.Fatalf("record %+v: want SourceReplaced and the original UID kept", rec.Shares[0])
	}

	// An admin accepts the new object: the share's pin moves to it, and the volume follows.
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "share", "uid": "share-1"},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}},
		"status":   map[string]any{share.PinField: "src-2"},
	}}
	if err := d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
		t.Fatal(err)
	}
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "RE-CREATOR-CA") {
		t.Fatalf("pin moved to the new object: %v, the pod sees %v; want its files", err, podView(t, d, "vol-1"))
	}
	if rec := savedRecord(t, d, "vol-1"); rec.Shares[0].Told != volume.ToldCurrent || rec.Shares[0].SourceUID != "src-2" {
		t.Fatalf("record %+v: want the new object's UID, not replaced", rec.Shares[0])
	}
}

// A share that follows re-creations, without a pin in its status, lets a re-created source through.
func TestReconcileOfAShareThatFollowsTakesARecreatedSource(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "share", "uid": "share-1"},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}, share.RecreationField: share.RecreationFollow},
	}}
	if err := d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
		t.Fatal(err)
	}
	c.recreateSource("src-2", map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA2") {
		t.Fatalf("following: %v, the pod sees %v; want the new object's files", err, podView(t, d, "vol-1"))
	}
}

// The share's list narrows while its source cannot be read: what it no longer shares leaves the
// pod's view all the same, in one swap.
func TestReconcileNarrowsTheViewToTheSharesNewList(t *testing.T) {
	c := newFakeCluster(t)
	c.setSource(map[string]string{"ca.crt": "CA", "tls.crt": "LEAF"})
	d, events := c.node()
	publishVolume(t, d, "vol-1")
	setShareItems(t, d, entry("ca.crt"))
	c.sourceErr = errOutage
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") {
		t.Fatalf("narrowed: %v, the pod sees %v; want ca.crt alone", err, podView(t, d, "vol-1"))
	}
	expectEvents(t, events, "narrowed", reasonKeysChanged)
}

// setShareItems gives the share "share" (over p/src) the list of keys items.
func setShareItems(t *testing.T, d *driver, items ...map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "share", "uid": "share-1"},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}, "items": list(items...)},
	}}
	if err := d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
		t.Fatal(err)
	}
}

// A record whose pod's dir is gone belongs to a publish that never completed (the kubelet removes
// the dir only after unmounting): nobody will unpublish it, so the reconcile tears it down.
func TestReconcileTearsDownAVolumeWhosePodIsGone(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	if err := os.RemoveAll(filepath.Join(d.kubeletRoot, "pods", testPodUID)); err != nil {
		t.Fatal(err)
	}
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	if m := d.mounter.(*fakeMounter); m.count() != 0 || exists(d.store.MountPoint("vol-1")) || d.store.Count() != 0 || d.budget.InUse() != 0 {
		t.Fatalf("%d mounts, volume dir there %v, %d records, %d bytes charged; want nothing", m.count(),
			exists(d.store.MountPoint("vol-1")), d.store.Count(), d.budget.InUse())
	}
}

// A revocation whose record cannot be saved (a full tmpfs): the files leave the view, but the
// driver does not remember the share revoked nor tell the pod, so the next reconcile does the
// revocation again, whole, and tells the pod then, once.
func TestReconcileWhoseRecordCannotBeSavedIsRetriedWhole(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	publishVolume(t, d, "vol-1")
	fix := unsavable(t, d, "vol-1")
	c.allowed = false
	if err := reconcileVolume(t, d, "vol-1"); err == nil || !sees(podView(t, d, "vol-1")) {
		t.Fatalf("revoked, record unsavable: %v, the pod sees %v; want an error and no files", err, podView(t, d, "vol-1"))
	}
	if rec, _ := d.store.Get("vol-1"); rec.Shares[0].Told.Hidden() {
		t.Fatal("the store remembers a revocation its record does not say")
	}
	expectEvents(t, events, "record unsavable")

	fix()
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !savedRecord(t, d, "vol-1").Shares[0].Told.Hidden() {
		t.Fatalf("retried: %v; want the revocation saved", err)
	}
	expectEvents(t, events, "retried", reasonRevoked)
}

// unsavable makes every save of volume id's record fail, as on a full tmpfs: nothing can be
// renamed over a non-empty directory. The returned func puts the record back as it was.
func unsavable(t *testing.T, d *driver, id string) (fix func()) {
	t.Helper()
	record := d.store.RecordPath(id)
	saved, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(record); err != nil || os.MkdirAll(filepath.Join(record, "full"), 0o700) != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.RemoveAll(record); err != nil || os.WriteFile(record, saved, 0o600) != nil {
			t.Fatal(err)
		}
	}
}

// A change whose record cannot be saved leaves a view its record does not describe (the view is
// swapped first), and the next reconcile must rebuild it even when its verdict is "as it is":
// when access flips back in between, the pod gets exactly what its record says. Before the fix,
// a pod revoked, then granted again, stayed without its files; and a pod restored, then denied
// again, kept its files while revoked.
func TestReconcileAfterAnUnsavedChangeRebuildsTheView(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first, again bool // the grant during the unsaved reconcile, and at the next one
		want         []string
	}{
		{"revoked unsaved, then granted again", false, true, []string{"ca.crt", "CA"}},
		{"restored unsaved, then denied again", true, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			d, _ := c.node()
			publishVolume(t, d, "vol-1")
			if tc.first { // a restore: the volume starts revoked
				c.allowed = false
				must(t, reconcileVolume(t, d, "vol-1"))
			}
			fix := unsavable(t, d, "vol-1")
			c.allowed = tc.first
			if err := reconcileVolume(t, d, "vol-1"); err == nil {
				t.Fatal("the save did not fail")
			}
			fix()
			c.allowed = tc.again
			if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), tc.want...) {
				t.Fatalf("next reconcile: %v; the pod sees %v, want %q as its record says", err, podView(t, d, "vol-1"), tc.want)
			}
		})
	}
}
