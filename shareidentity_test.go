package main

// Specification of a volume's belonging to the share object it was published from
// (shareidentity.go), on a fake node (unitdriver_test.go) whose share informer the test edits as
// the CRD watch would: a share deleted and created again under its name over another Secret does
// not feed the running volume (its files stay away, the pod is told once what accepts the new
// object); created again over the very Secret the volume was made from, it is adopted and the
// volume resumes; a new publish uses the share as it is now. The same story against the real
// API server and kubelet: TestShareRecreatedOverAnotherSecretDoesNotFeedRunningPods
// (test/e2e/pods/identity_test.go).

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// putSecretShare puts (or replaces) the SharedSecret name, object uid, over Secret ns/secret in
// d's informer cache, as the watch delivers an add.
func putSecretShare(t *testing.T, d *driver, name, uid, ns, secret string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": ns, "name": secret}},
	}}
	u.SetUID(types.UID(uid))
	if err := d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
		t.Fatal(err)
	}
}

// deleteShareFromCache removes the SharedSecret name from d's informer cache, as the watch
// delivers a delete.
func deleteShareFromCache(t *testing.T, d *driver, name string) {
	t.Helper()
	store := d.shares.Informer(share.KindSecret).GetStore()
	obj, ok, err := store.GetByKey(name)
	if err != nil || !ok {
		t.Fatalf("share %s not cached: %v", name, err)
	}
	if err := store.Delete(obj); err != nil {
		t.Fatal(err)
	}
}

// identityWorld is a node with Secret p/src (REAL-CA), the platform's, and Secret t/mine
// (ATTACKER-CA), a tenant's, and the SharedSecret "share" (UID share-1) over p/src.
func identityWorld(t *testing.T) (*driver, chan string) {
	t.Helper()
	client := fake.NewSimpleClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"}, Data: map[string][]byte{"ca.crt": []byte("REAL-CA")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "mine", UID: "mine-1", ResourceVersion: "1"}, Data: map[string][]byte{"ca.crt": []byte("ATTACKER-CA")}})
	d, _ := nodeWorldWith(t, client)
	events := make(chan string, 20)
	d.events = &record.FakeRecorder{Events: events}
	putSecretShare(t, d, "share", "share-1", "p", "src")
	return d, events
}

// viewOf is what the pod sees of ca.crt in volume id ("" for no such file).
func viewOf(t *testing.T, d *driver, id string) string {
	t.Helper()
	files, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint(id), "data"))
	if err != nil {
		t.Fatal(err)
	}
	return string(files["ca.crt"].Data)
}

// The attack of a share re-created over another Secret, step by step as the watch reports it:
// the share deleted, then created again over the tenant's Secret. Measured on the code before volumes knew their
// share's UID: REAL-CA, then empty, then ATTACKER-CA.
func TestShareRecreatedOverAnotherSecretDoesNotFeedRunningVolumes(t *testing.T) {
	for _, refresh := range []string{"true", "false"} {
		t.Run("refreshResource="+refresh, func(t *testing.T) {
			d, events := identityWorld(t)
			ctx := context.Background()
			ns := &nodeServer{d: d}
			req := publishRequest(t, d, "vol-1")
			req.VolumeContext[attrRefreshResource] = refresh
			if _, err := ns.NodePublishVolume(ctx, req); err != nil {
				t.Fatal(err)
			}
			ref := share.Ref{Kind: share.KindSecret, Name: "share"}
			var seen []string
			step := func() string {
				d.reconcileShare(ctx, ref)
				seen = append(seen, viewOf(t, d, "vol-1"))
				return seen[len(seen)-1]
			}
			seen = append(seen, viewOf(t, d, "vol-1"))

			deleteShareFromCache(t, d, "share")
			step()
			putSecretShare(t, d, "share", "share-2", "t", "mine")
			step()
			step() // and again: still nothing, and no second event
			t.Logf("the pod saw: %q", seen)
			if want := []string{"REAL-CA", "", "", ""}; strings.Join(seen, "|") != strings.Join(want, "|") {
				t.Fatalf("the pod saw %q, want %q: a share re-created over another Secret fed the running volume", seen, want)
			}
			replaced := drainEvents(events, reasonShareReplaced)
			if len(replaced) != 1 {
				t.Fatalf("%d %s events, want one: %q", len(replaced), reasonShareReplaced, replaced)
			}
			for _, want := range []string{"Warning", `SharedSecret "share" was deleted and created again (UID share-2, sharing Secret t/mine)`,
				"published from UID share-1, sharing Secret p/src", "kubectl delete pod --namespace=c pod"} {
				if !strings.Contains(replaced[0], want) {
					t.Errorf("the event %q does not say %q", replaced[0], want)
				}
			}
			if rec, _ := d.store.Get("vol-1"); rec.Shares[0].Told != volume.ToldShareReplaced || rec.Shares[0].ShareUID != "share-1" {
				t.Fatalf("record %+v: want the share revoked, replaced, still share-1's", rec.Shares[0])
			}

			// A new pod's publish uses the share as it is now.
			other := publishRequest(t, d, "vol-2")
			other.TargetPath = filepath.Join(filepath.Dir(filepath.Dir(other.TargetPath)), "other", "mount")
			mkdirParent(t, other.TargetPath)
			if _, err := ns.NodePublishVolume(ctx, other); err != nil {
				t.Fatal(err)
			}
			if got := viewOf(t, d, "vol-2"); got != "ATTACKER-CA" {
				t.Fatalf("a new publish shows %q, want the share as it is now", got)
			}

			// The admin re-creates the share over the Secret the volume was made from: adopted,
			// the volume resumes.
			deleteShareFromCache(t, d, "share")
			putSecretShare(t, d, "share", "share-3", "p", "src")
			if got := step(); got != "REAL-CA" {
				t.Fatalf("after the share was created again over p/src the pod sees %q, want REAL-CA", got)
			}
			if rec, _ := d.store.Get("vol-1"); rec.Shares[0].Told != volume.ToldCurrent || rec.Shares[0].ShareUID != "share-3" {
				t.Fatalf("record %+v: want the share back, adopted as share-3", rec.Shares[0])
			}
		})
	}
}

// A share re-created over the same Secret before the driver saw it go (the delete and the add
// between two looks): adopted, the volume never loses its files and no one is warned.
func TestShareRecreatedOverTheSameSecretIsAdopted(t *testing.T) {
	d, events := identityWorld(t)
	ctx := context.Background()
	if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	putSecretShare(t, d, "share", "share-2", "p", "src")
	d.relistCycle(ctx, 0)
	if got := viewOf(t, d, "vol-1"); got != "REAL-CA" {
		t.Fatalf("the pod sees %q, want REAL-CA", got)
	}
	rec, _ := d.store.Get("vol-1")
	if rec.Shares[0].ShareUID != "share-2" || rec.Shares[0].Told.Hidden() {
		t.Fatalf("record %+v: want the new object adopted", rec.Shares[0])
	}
	if n := len(events); n != 0 {
		t.Fatalf("%d events (%q), want none", n, <-events)
	}
}

// A share re-created over another Secret before the driver saw the delete: the files the
// volume still shows leave it at once, with the same event.
func TestShareReplacedUnseenRevokesTheFilesItStillShows(t *testing.T) {
	d, events := identityWorld(t)
	ctx := context.Background()
	if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	putSecretShare(t, d, "share", "share-2", "t", "mine")
	d.relistCycle(ctx, 0)
	if got := viewOf(t, d, "vol-1"); got != "" {
		t.Fatalf("the pod sees %q, want nothing", got)
	}
	if evs := drainEvents(events, reasonShareReplaced); len(evs) != 1 || !strings.Contains(evs[0], "were removed from the volume") {
		t.Fatalf("events %q, want one %s saying the files were removed", evs, reasonShareReplaced)
	}
}

// The share deleted (with its grants) and created again by a tenant over a source the driver
// cannot read: a missing Secret, or one it may not read. The volume's object is known gone (the
// name holds another UID): that is an answer, not an outage, so the files leave and the pod is
// told; the new object is not adopted until its source can be read and is the volume's. (Before,
// the failed GET left the volume as it was, every cycle: the pod kept REAL-CA.)
func TestShareRecreatedOverAnUnreadableSourceIsRevoked(t *testing.T) {
	for _, src := range []string{"does-not-exist", "locked"} {
		t.Run("t/"+src, func(t *testing.T) {
			client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"},
				Data: map[string][]byte{"ca.crt": []byte("REAL-CA")}})
			client.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
				if a.(k8stesting.GetAction).GetName() == "locked" {
					return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "locked", errors.New("no RoleBinding"))
				}
				return false, nil, nil
			})
			d, _ := nodeWorldWith(t, client)
			events := make(chan string, 20)
			d.events = &record.FakeRecorder{Events: events}
			putSecretShare(t, d, "share", "share-1", "p", "src")
			ctx := context.Background()
			if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
				t.Fatal(err)
			}
			putSecretShare(t, d, "share", "share-2", "t", src)
			d.relistCycle(ctx, 0)
			d.relistCycle(ctx, 0)
			got := viewOf(t, d, "vol-1")
			t.Logf("the pod sees %q", got)
			if got != "" {
				t.Fatalf("the pod sees %q, want nothing: the share it was published from is gone", got)
			}
			if evs := drainEvents(events, reasonShareReplaced); len(evs) != 1 {
				t.Fatalf("events %q, want one %s", evs, reasonShareReplaced)
			}
			// The admin creates it again over the volume's own Secret: adopted, restored.
			putSecretShare(t, d, "share", "share-3", "p", "src")
			d.relistCycle(ctx, 0)
			if got := viewOf(t, d, "vol-1"); got != "REAL-CA" {
				t.Fatalf("after the share was created again over p/src the pod sees %q, want REAL-CA", got)
			}
		})
	}
}

// A share re-created over the volume's own Secret, but listing more of it: share-1 shared only
// ca.crt; share-2 has no list (every key, tls.key too). Adopting it would hand running pods a key
// they were never given, so it is replaced (revoked, told once). One listing the same keys, or
// fewer, is adopted. (Before, any object over the same source was adopted: the pod gained tls.key.)
// Nor is one that renames keys, between themselves or not: the pod's ca.crt would hold the bytes
// of tls.key. (Before, a list of the same keys under other names was adopted.)
func TestShareRecreatedExposingMoreIsNotAdopted(t *testing.T) {
	both := list(entry("ca.crt"), entry("tls.key"))
	for _, tc := range []struct {
		name    string
		was     []any // the volume's share's spec.items; nil for none (every key)
		items   []any // the new object's spec.items; nil for none (every key)
		adopted bool
	}{
		{"no list", list(entry("ca.crt")), nil, false},
		{"ca.crt and tls.key", list(entry("ca.crt")), both, false},
		{"ca.crt", list(entry("ca.crt")), list(entry("ca.crt")), true},
		{"ca.crt of every key", nil, list(entry("ca.crt")), true},
		{"ca.crt of two", both, list(entry("ca.crt")), true},
		{"the two renamed between themselves", both, list(entry("ca.crt", "tls.key"), entry("tls.key", "ca.crt")), false},
		{"ca.crt renamed", list(entry("ca.crt")), list(entry("ca.crt", "root.pem")), false},
		{"a key of every key renamed", nil, list(entry("tls.key", "ca.crt")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"},
				Data: map[string][]byte{"ca.crt": []byte("REAL-CA"), "tls.key": []byte("KEY")}})
			d, _ := nodeWorldWith(t, client)
			events := make(chan string, 20)
			d.events = &record.FakeRecorder{Events: events}
			put := func(uid string, items []any) {
				u := &unstructured.Unstructured{Object: map[string]any{
					"metadata": map[string]any{"name": "share"},
					"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}},
				}}
				if items != nil {
					u.Object["spec"].(map[string]any)["items"] = items
				}
				u.SetUID(types.UID(uid))
				if err := d.shares.Informer(share.KindSecret).GetStore().Update(u); err != nil {
					t.Fatal(err)
				}
			}
			put("share-1", tc.was)
			ctx := context.Background()
			if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
				t.Fatal(err)
			}
			put("share-2", tc.items)
			d.relistCycle(ctx, 0)
			files, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint("vol-1"), "data"))
			if err != nil {
				t.Fatal(err)
			}
			seen := slices.Sorted(maps.Keys(files))
			t.Logf("the pod sees %q", seen)
			rec, _ := d.store.Get("vol-1")
			replaced := drainEvents(events, reasonShareReplaced)
			if tc.adopted {
				if !slices.Equal(seen, []string{"ca.crt"}) || rec.Shares[0].ShareUID != "share-2" || len(replaced) != 0 {
					t.Fatalf("the pod sees %q, share UID %s, events %q: want ca.crt alone, share-2 adopted, no event", seen, rec.Shares[0].ShareUID, replaced)
				}
				return
			}
			if len(seen) != 0 || rec.Shares[0].Told != volume.ToldShareReplaced || rec.Shares[0].ShareUID != "share-1" || len(replaced) != 1 {
				t.Fatalf("the pod sees %q, share UID %s (replaced: %v), events %q: want nothing, the share replaced (still share-1's), one event",
					seen, rec.Shares[0].ShareUID, rec.Shares[0].Told, replaced)
			}
		})
	}
}

// A record written before volumes knew their share's UID adopts the share it finds, and saves it.
func TestRecordWithoutShareUIDAdoptsTheShare(t *testing.T) {
	d, _ := identityWorld(t)
	ctx := context.Background()
	if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	rec, _ := d.store.Get("vol-1")
	rec.Shares[0].ShareUID, rec.Shares[0].SourceUID = "", ""
	if err := d.store.Save(rec); err != nil {
		t.Fatal(err)
	}
	d.relistCycle(ctx, 0)
	saved, err := d.store.ReadRecord("vol-1")
	if err != nil || saved.Shares[0].ShareUID != "share-1" || saved.Shares[0].SourceUID != "src-1" {
		t.Fatalf("saved record %+v (%v): want share-1 and its source src-1 adopted", saved.Shares, err)
	}
}

// drainEvents returns the events recorded so far whose text holds reason.
func drainEvents(events chan string, reason string) []string {
	var out []string
	for {
		select {
		case e := <-events:
			if strings.Contains(e, reason) {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}
