package main

// Specification of "keys that stopped being shared never stay" (judge.go) on the paths where a
// share cannot be judged whole: the review of the pod's access fails, or the share's source was
// re-created and its pin refuses the new object. (A share re-created over a source that cannot
// be read is revoked whole: shareidentity_test.go.) On each, a share whose list
// (spec.items) narrowed keeps only the files the new list still shares, for a volume that
// refreshes and one that does not; nothing else about it changes. A new copy that cannot be
// written (over the budget, or on a full tmpfs) still drops them. (Before these paths narrowed,
// the review and pin paths left the dropped key in the pod's view: 2 files where 1 is shared.)

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// narrowWorld is a fake API server with Secret p/tls (UID tls-1: ca.crt, tls.crt) and the
// SharedSecret "ca" (UID share-1), whose list the test narrows to ca.crt alone, under a volume
// that shows both keys; the review fails when the test says so.
type narrowWorld struct {
	d         *driver
	reviewErr error
	pin       string // the share's status.sourceUID; "" for none
}

func newNarrowWorld(t *testing.T) *narrowWorld {
	w := &narrowWorld{}
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "tls", UID: "tls-1", ResourceVersion: "9"},
		Data: map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("LEAF")}})
	client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		if w.reviewErr != nil {
			return true, nil, w.reviewErr
		}
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}, nil
	})
	w.d = newTestDriver(t, client.AuthorizationV1().SubjectAccessReviews(), fakeSources{client})
	w.d.store = volume.NewStore(t.TempDir(), w.d.budget)
	return w
}

// judge puts the share, narrowed to ca.crt, in the informer and judges a volume (refreshing or
// not) that shows ca.crt and tls.crt through the share's old list.
func (w *narrowWorld) judge(t *testing.T, refresh bool) shareVerdict {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "ca"},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "tls"}, "items": list(entry("ca.crt"))},
	}}
	u.SetUID("share-1")
	if w.pin != "" {
		u.Object["status"] = map[string]any{share.PinField: w.pin}
	}
	if err := w.d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
		t.Fatal(err)
	}
	rec := volume.Record{VolumeID: "v", PodNamespace: "team", PodName: "app", ServiceAccount: "app", Refresh: refresh, GID: -1, DefaultMode: 0o644,
		Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "ca"}, SourceNamespace: "p", SourceName: "tls", ResourceVersion: "9",
			ShareUID: "share-1", SourceUID: "tls-1",
			Exposed: share.Exposure{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}}}}}
	if err := w.d.store.DirOf(rec).WriteCopy(0, map[string]atomicwriter.File{
		"ca.crt": {Data: []byte("CA"), Mode: 0o644}, "tls.crt": {Data: []byte("LEAF"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	return w.d.judgeShare(context.Background(), rec, 0, w.d.newCycleMemo())
}

func TestKeysNoLongerSharedLeaveOnEveryPath(t *testing.T) {
	for _, path := range []struct {
		name  string
		set   func(w *narrowWorld)
		want  changeKind // the change reported besides the narrowing ("" for keysChanged alone)
		state func(st volume.ShareState) bool
	}{
		{"the review fails", func(w *narrowWorld) { w.reviewErr = errors.New("connection refused") }, changeKeys,
			func(st volume.ShareState) bool { return st.Told == volume.ToldCurrent }},
		{"the pin refuses a re-created source", func(w *narrowWorld) { w.pin = "tls-0" }, changeRefreshFailed,
			func(st volume.ShareState) bool { return st.Told == volume.ToldSourceReplaced }},
	} {
		for _, refresh := range []bool{true, false} {
			if path.want == changeRefreshFailed && !refresh {
				continue // a volume that does not refresh never reads its source: no pin to refuse
			}
			t.Run(path.name+map[bool]string{true: "", false: ", refreshResource=false"}[refresh], func(t *testing.T) {
				w := newNarrowWorld(t)
				path.set(w)
				v := w.judge(t, refresh)
				if v.err != nil {
					t.Fatalf("verdict: %v; want the share narrowed, the failure logged", v.err)
				}
				kept := slices.Sorted(maps.Keys(v.files))
				t.Logf("files kept: %q", kept)
				if v.files == nil || !slices.Equal(kept, []string{"ca.crt"}) {
					t.Fatalf("the copy keeps %q (nil: unchanged, both keys), want only ca.crt", kept)
				}
				if v.change == nil || v.change.kind != path.want {
					t.Fatalf("change %+v, want %s", v.change, path.want)
				}
				if !v.state.Exposed.Same(share.Exposure{{Key: "ca.crt", Path: "ca.crt"}}) || !path.state(v.state) {
					t.Fatalf("state %+v: want the new list noted and nothing else changed", v.state)
				}
			})
		}
	}
}

// The list narrows while the source grows, and the new copy does not fit in the node's budget:
// the share keeps its last files, but only those the new list still shares, and the bytes of
// those it dropped are given back.
func TestKeysNoLongerSharedLeaveWhenTheNewCopyDoesNotFit(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("LEAF")}})
	d, setItems := publishedThroughTheList(t, client, entry("ca.crt"), entry("tls.crt"))
	ctx := context.Background()
	before := d.budget.InUse()
	old, _ := d.store.Get("vol-1")
	d.budget.Limit = before // nothing more fits
	setItems(entry("ca.crt"))
	if _, err := client.CoreV1().Secrets("p").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "2"},
		Data: map[string][]byte{"ca.crt": make([]byte, 5000), "tls.crt": []byte("LEAF")}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.relistCycle(ctx, 0)
	files, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint("vol-1"), "data"))
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(files))
	t.Logf("the pod sees %q; %d bytes in use, %d before", got, d.budget.InUse(), before)
	if !slices.Equal(got, []string{"ca.crt"}) || string(files["ca.crt"].Data) != "CA" {
		t.Fatalf("the pod sees %q, want only the last ca.crt", got)
	}
	// The copy is charged what it holds now (internal/volume: pages and entries), and the budget is the
	// saved records' sum: tls.crt's page and entries are given back, and its entry of the list the
	// record holds in the heap.
	rec, _ := d.store.Get("vol-1")
	if want := volume.ChargedBytes(files); rec.Shares[0].Bytes != want || rec.Shares[0].Bytes >= old.Shares[0].Bytes ||
		d.budget.InUse() != before-(old.Shares[0].Bytes-want)-(volume.HeapBytes(old)-volume.HeapBytes(rec)) {
		t.Fatalf("%d bytes in use (%d before), the share counts %d (%d before): want %d, tls.crt's page and entries given back",
			d.budget.InUse(), before, rec.Shares[0].Bytes, old.Shares[0].Bytes, want)
	}
}

// The list changes (tls.crt dropped, extra.crt added) and the new copy cannot be written (its
// tmpfs is full: ENOSPC, or out of inodes; here a name in the way, a file that is not the
// writer's where extra.crt's link goes, makes the writer refuse): the share keeps its last files,
// but only those the new list still shares.
func TestKeysNoLongerSharedLeaveWhenTheNewCopyCannotBeWritten(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("LEAF"), "extra.crt": []byte("EXTRA")}})
	d, setItems := publishedThroughTheList(t, client, entry("ca.crt"), entry("tls.crt"))
	ctx := context.Background()
	rec, _ := d.store.Get("vol-1")
	if err := os.WriteFile(filepath.Join(d.store.DirOf(rec).CopyPath(0), "extra.crt"), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	setItems(entry("ca.crt"), entry("extra.crt"))
	d.relistCycle(ctx, 0)
	files, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint("vol-1"), "data"))
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(files))
	t.Logf("the pod sees %q", got)
	if !slices.Equal(got, []string{"ca.crt"}) || string(files["ca.crt"].Data) != "CA" {
		t.Fatalf("the pod sees %q, want only the last ca.crt (tls.crt is no longer shared)", got)
	}
}

// publishedThroughTheList is a node with volume vol-1 published through the share "share" over
// Secret p/src (which client serves) listing items, and the function that changes that list.
func publishedThroughTheList(t *testing.T, client *fake.Clientset, items ...map[string]any) (*driver, func(...map[string]any)) {
	t.Helper()
	d, _ := nodeWorldWith(t, client)
	setItems := func(items ...map[string]any) {
		if err := d.shares.Informer(share.KindSecret).GetStore().Update(&unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "share"},
			"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}, "items": list(items...)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	setItems(items...)
	if _, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	return d, setItems
}

// A refreshResource=false share whose access is denied in the cycle its list narrows, on a node
// whose volume budget is full: the revocation stands at once (the pod sees none of its files and
// is told revoked), and the copy kept for when access comes back is narrowed all the same, which
// needs no room. (Before, the refused room for the narrowed copy undid the revocation for a cycle:
// the pod kept the narrowed files, told they did not fit.)
func TestRevocationStandsWhenTheNodeIsFull(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("LEAF")}})
	allowed := true
	d, _ := nodeWorldWith(t, client)
	client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: allowed}}, nil
	})
	setItems := func(items ...map[string]any) {
		u := map[string]any{
			"metadata": map[string]any{"name": "share"},
			"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}, "items": list(items...)},
		}
		if err := d.shares.Informer(share.KindSecret).GetStore().Update(&unstructured.Unstructured{Object: u}); err != nil {
			t.Fatal(err)
		}
	}
	setItems(entry("ca.crt"), entry("tls.crt"))
	req := publishRequest(t, d, "vol-1")
	req.VolumeContext[attrRefreshResource] = "false"
	if _, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	d.budget.Limit = d.budget.InUse() // the node is full (other pods' volumes)
	allowed = false
	setItems(entry("ca.crt"))
	d.relistCycle(context.Background(), 0)
	seen, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint("vol-1"), "data"))
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := d.store.Get("vol-1")
	if len(seen) != 0 || rec.Shares[0].Told != volume.ToldRevoked {
		t.Errorf("after the denial the pod sees %q, told %q; want nothing, told %q", slices.Sorted(maps.Keys(seen)), rec.Shares[0].Told, volume.ToldRevoked)
	}
	kept, err := atomicwriter.ReadFiles(d.store.DirOf(rec).CopyPath(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(kept)); !slices.Equal(got, []string{"ca.crt"}) {
		t.Errorf("the copy kept for when access comes back holds %q; want only what the share still lists, [ca.crt]", got)
	}
}

func entry(key string, path ...string) map[string]any {
	m := map[string]any{"key": key}
	if len(path) > 0 {
		m["path"] = path[0]
	}
	return m
}

func list(entries ...map[string]any) []any {
	out := make([]any, len(entries))
	for i, e := range entries {
		out[i] = e
	}
	return out
}
