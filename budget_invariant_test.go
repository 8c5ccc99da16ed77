package main

// Specification of the node's volume budget's bookkeeping (internal/volume), charged by the volume store.
// Whatever happens to the volumes (publish, refresh to a larger or smaller copy, revocation and
// restoration, a save or a view's rebuild that fails, unpublish, a driver restart; a volume of two
// shares, one revoked alone, whose paths come to conflict or whose bytes come to be the same),
// the bytes in use are exactly the sum over the volumes of their saved record's charge, or, for a
// volume whose new copies were written but whose record could not be saved after, the larger of
// that and its unsaved charge (what its tmpfs holds, measured: internal/volume's
// volume.Rewrite.unsaved); zero when no volume is left; and never less than what the volumes'
// tmpfs hold, measured on disk. A property test runs random sequences of those operations on a
// fake node (unitdriver_test.go) and checks the invariant after every step;
// FuzzBudgetFollowsSavedRecords lets the fuzzer pick sequences.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shared-resource/csi-driver/internal/volume"
)

// budgetWorld is a fake node with three volume slots over the SharedSecret "share" (Secret p/src),
// whose data size and whose grant to the pods the test changes. Slot 1 mounts the SharedSecret
// "share2" (Secret p/src2) too, listed first: its key is another at first (a publish refuses two
// shares with the same path), and may become share's (it then wins the path); it is granted and
// revoked on its own.
type budgetWorld struct {
	t       *testing.T
	d       *driver
	client  *fake.Clientset
	allowed bool
	// denied2 revokes share2 alone.
	denied2 bool
	version int
	// broken holds, per volume, the record a failed save must not replace (see breakSave).
	broken map[string][]byte
}

const budgetSlots = 3

func newBudgetWorld(t *testing.T) *budgetWorld {
	w := &budgetWorld{t: t, allowed: true, version: 1, broken: map[string][]byte{}}
	w.client = fake.NewSimpleClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "1"},
			Data: map[string][]byte{"ca.crt": []byte("CA")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src2", ResourceVersion: "1"},
			Data: map[string][]byte{"other.crt": []byte("CA")}})
	w.client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		allowed := w.allowed
		if ra := sar.Spec.ResourceAttributes; ra != nil && ra.Name == "share2" {
			allowed = !w.denied2
		}
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: allowed}}, nil
	})
	w.d = newTestDriver(t, w.client.AuthorizationV1().SubjectAccessReviews(), fakeSources{w.client})
	w.d.budget.Limit = 1 << 30 // counted, never refusing: the invariant is about the count
	addSecretShare(t, w.d, "share", "p", "src")
	addSecretShare(t, w.d, "share2", "p", "src2")
	return w
}

// request is the kubelet's publish of slot k: its own pod volume "v<k>"; slot 1 mounts share2
// and share, in that order; slot 2 does not refresh.
func (w *budgetWorld) request(k int) *csi.NodePublishVolumeRequest {
	req := publishRequest(w.t, w.d, fmt.Sprintf("vol-%d", k))
	req.TargetPath = filepath.Join(filepath.Dir(filepath.Dir(req.TargetPath)), fmt.Sprintf("v%d", k), "mount")
	mkdirParent(w.t, req.TargetPath)
	switch k {
	case 1:
		delete(req.VolumeContext, attrSharedSecret)
		req.VolumeContext[attrShares] = "secret/share2, secret/share"
	case 2:
		req.VolumeContext[attrRefreshResource] = "false"
	}
	return req
}

// setData gives the Secret a new version whose ca.crt is n bytes: larger or smaller copies.
func (w *budgetWorld) setData(n int) { w.setSource("src", "ca.crt", n) }

// setSource gives Secret p/name a new version holding key alone, of n zero bytes: two sources
// set to the same size hold the same bytes.
func (w *budgetWorld) setSource(name, key string, n int) {
	w.version++
	if _, err := w.client.CoreV1().Secrets("p").Update(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: name, ResourceVersion: fmt.Sprint(w.version)},
		Data:       map[string][]byte{key: make([]byte, n)}}, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

// breakSave makes every save of volume id's record fail, as on a full tmpfs: a directory takes the
// record's place, holding the record (its bytes stay on the tmpfs, as a failed save leaves them),
// and nothing can be renamed over it. fixSave puts the record back as it was.
func (w *budgetWorld) breakSave(id string) {
	p := w.d.store.RecordPath(id)
	b, err := os.ReadFile(p)
	if err != nil {
		return // no such volume
	}
	w.broken[id] = b
	if err := os.Remove(p); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "saved"), b, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

func (w *budgetWorld) fixSave(id string) {
	b, ok := w.broken[id]
	if !ok {
		return
	}
	delete(w.broken, id)
	p := w.d.store.RecordPath(id)
	if err := os.RemoveAll(p); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// breakView makes every rebuild of volume id's view fail, as on a full tmpfs: a non-empty
// directory stands where the atomic writer makes its next ..data link. The share's copies are
// still written (each in its own directory). fixView removes it.
func (w *budgetWorld) breakView(id string) {
	rec, ok := w.d.store.Get(id)
	if !ok {
		return
	}
	if err := os.MkdirAll(filepath.Join(w.d.store.DirOf(rec).ViewPath(), "..data_tmp", "full"), 0o700); err != nil {
		w.t.Fatal(err)
	}
}

func (w *budgetWorld) fixView(id string) {
	if rec, ok := w.d.store.Get(id); ok {
		if err := os.RemoveAll(filepath.Join(w.d.store.DirOf(rec).ViewPath(), "..data_tmp")); err != nil {
			w.t.Fatal(err)
		}
	}
}

// refreshBroken gives the Secret a new version of n bytes and runs two relists between breaking
// and fixing something (a volume's record, or its view): the first fails, and so does the next,
// which must not charge it twice.
func (w *budgetWorld) refreshBroken(n int, breakIt, fix func()) {
	breakIt()
	w.setData(n)
	w.d.relistCycle(context.Background(), 0)
	w.d.relistCycle(context.Background(), 0)
	fix()
}

// restart is a new driver process over the same node: a fresh store and budget, recovering.
func (w *budgetWorld) restart() {
	n := *w.d
	n.budget = &volume.Budget{Limit: w.d.budget.Limit}
	n.store = volume.NewStore(filepath.Dir(w.d.store.Path()), n.budget)
	n.locks = newVolumeLocks()
	w.d = &n
	if err := w.d.recoverVolumes(); err != nil {
		w.t.Fatal(err)
	}
}

// step runs operation op (with argument arg) and returns what it did, for the failure message.
func (w *budgetWorld) step(op, arg byte) string {
	ctx := context.Background()
	ns := &nodeServer{d: w.d}
	k := int(arg) % budgetSlots
	id := fmt.Sprintf("vol-%d", k)
	switch op % 12 {
	case 0:
		_, err := ns.NodePublishVolume(ctx, w.request(k))
		return fmt.Sprintf("publish %s: %v", id, err)
	case 1:
		_, err := ns.NodeUnpublishVolume(ctx, unpublishRequest(w.request(k)))
		return fmt.Sprintf("unpublish %s: %v", id, err)
	case 2:
		n := int(arg) * 97 // 0 to 24 KiB: copies grow and shrink by pages
		w.setData(n)
		w.d.relistCycle(ctx, 0)
		return fmt.Sprintf("refresh to %d bytes", n)
	case 3:
		w.allowed = false
		w.d.relistCycle(ctx, 0)
		return "revoke (share; share2 keeps its grant)"
	case 4:
		w.allowed = true
		w.d.relistCycle(ctx, 0)
		return "grant"
	case 5:
		n := int(arg) * 211
		w.refreshBroken(n, func() { w.breakSave(id) }, func() { w.fixSave(id) })
		return fmt.Sprintf("refresh to %d bytes, %s's record unsavable", n, id)
	case 6:
		w.restart()
		return "restart"
	case 7:
		n := int(arg) * 173
		w.refreshBroken(n, func() { w.breakView(id) }, func() { w.fixView(id) })
		return fmt.Sprintf("refresh to %d bytes, %s's view unwritable", n, id)
	case 9:
		// share2's source: share's key (it wins the path in slot 1) or another; 0 to 24 KiB.
		key := "ca.crt"
		if arg%2 == 1 {
			key = "other.crt"
		}
		n := int(arg/2) * 193
		w.setSource("src2", key, n)
		w.d.relistCycle(ctx, 0)
		return fmt.Sprintf("share2's source to %s of %d bytes", key, n)
	case 10:
		w.denied2 = arg%2 == 1
		w.d.relistCycle(ctx, 0)
		return fmt.Sprintf("share2 revoked: %v", w.denied2)
	case 11:
		// Both sources to the same bytes under the same key: slot 1's view links one copy.
		n := int(arg) * 89
		w.setSource("src", "ca.crt", n)
		w.setSource("src2", "ca.crt", n)
		w.d.relistCycle(ctx, 0)
		return fmt.Sprintf("both sources to the same %d bytes", n)
	default:
		w.d.relistCycle(ctx, 0)
		return "relist"
	}
}

// chargedBytes is the sum of the charges of the records saved (or loaded at start, their copies
// measured again), each of which must be on disk, or of a volume's unsaved charge where it is
// larger.
func (w *budgetWorld) chargedBytes() int64 {
	var sum int64
	for _, rec := range w.d.store.List() {
		if _, err := w.d.store.ReadRecord(rec.VolumeID); err != nil {
			w.t.Fatalf("volume %s is in the store but its record cannot be read: %v", rec.VolumeID, err)
		}
		unsaved := w.d.budget.Charge(rec.VolumeID).Unsaved
		sum += max(volume.RecordedBytes(rec), unsaved)
	}
	return sum
}

// onDiskBytes is what the volumes' tmpfs hold, measured on disk whatever the records say: every
// entry under each volume's directory (the copies, the view's links to them, an older copy only
// the view still links, a view kept for readers, the record), names and link targets by their
// length, the pages of each file once however many links it has; and each record's items in the
// driver's memory. The budget must never count less: that memory is real.
func (w *budgetWorld) onDiskBytes() int64 {
	var sum int64
	for _, rec := range w.d.store.List() {
		saved, err := w.d.store.ReadRecord(rec.VolumeID)
		if err != nil {
			w.t.Fatalf("volume %s: %v", rec.VolumeID, err)
		}
		sum += volume.HeapBytes(saved)
		root := w.d.store.MountPoint(rec.VolumeID)
		inodes := map[uint64]bool{}
		err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			sum += volume.EntryBytes
			if p != root {
				sum += volume.EntryNameBytes(fi.Name())
			}
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				sum += volume.LinkTargetBytes(target)
			case fi.Mode().IsRegular():
				if ino := fi.Sys().(*syscall.Stat_t).Ino; !inodes[ino] {
					inodes[ino] = true
					sum += volume.Pages(fi.Size())
				}
			}
			return nil
		})
		if err != nil {
			w.t.Fatalf("volume %s: %v", rec.VolumeID, err)
		}
	}
	return sum
}

// runBudgetSequence runs ops (pairs of operation and argument) and checks the invariant after each.
func runBudgetSequence(t *testing.T, ops []byte) {
	w := newBudgetWorld(t)
	var done []string
	for i := 0; i+1 < len(ops); i += 2 {
		done = append(done, w.step(ops[i], ops[i+1]))
		if used, charged := w.d.budget.InUse(), w.chargedBytes(); used != charged {
			t.Fatalf("budget in use %d bytes, but the saved records (and unsaved charges) sum to %d (%d volumes), after:\n%s",
				used, charged, w.d.store.Count(), joinLines(done))
		}
		if used, held := w.d.budget.InUse(), w.onDiskBytes(); used < held {
			t.Fatalf("budget in use %d bytes, but the volumes' tmpfs hold %d (%d uncounted), after:\n%s",
				used, held, held-used, joinLines(done))
		}
	}
}

func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		out += fmt.Sprintf("  %2d. %s\n", i+1, l)
	}
	return out
}

// The invariant over random sequences, each seed its own.
func TestBudgetInUseIsTheSumOfTheSavedRecords(t *testing.T) {
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 26))
		ops := make([]byte, 2*40)
		for i := range ops {
			ops[i] = byte(r.UintN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runBudgetSequence(t, ops) })
	}
}

func FuzzBudgetFollowsSavedRecords(f *testing.F) {
	// A volume whose record cannot be saved, refreshed cycle after cycle, then unpublished.
	f.Add([]byte{0, 0, 5, 42, 5, 45, 5, 48, 1, 0})
	// A copy that shrinks while its record cannot be saved, then a restart.
	f.Add([]byte{0, 1, 2, 200, 5, 1, 6, 0, 1, 1})
	// Revoked and restored around a failed save, on a volume that does not refresh.
	f.Add([]byte{0, 2, 3, 0, 5, 2, 4, 0, 6, 0, 1, 2})
	// A failed save, then a view that cannot be rebuilt, then a restart.
	f.Add([]byte{0, 0, 5, 30, 7, 60, 7, 3, 6, 0, 1, 0})
	// A view that could not be rebuilt to a version, whose share then came back to the bytes it
	// shows: its files must be linked from the copy again, not kept as a second copy of them.
	f.Add([]byte{0, 0, 2, 115, 7, 48, 2, 115})
	// Two shares with the same bytes at the same path, the first revoked: the view's file, linked
	// from the revoked share's copy (emptied), must be linked from the other share's.
	f.Add([]byte{0, 1, 11, 50, 10, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 80 {
			ops = ops[:80]
		}
		runBudgetSequence(t, ops)
	})
}

// A refresh whose record cannot be saved, repeated every relist, must not
// move the budget cycle after cycle (it used to: +4 MiB a cycle), nor leave uncounted the new
// copy it wrote and swapped in (it did, once the charge was the saved record's alone: 60 KiB of a
// 64 KiB copy uncounted here); and no byte stays counted once the volume is gone.
func TestFailedSaveChargesWhatIsOnDiskOnce(t *testing.T) {
	w := newBudgetWorld(t)
	ctx := context.Background()
	req := w.request(0)
	if _, err := (&nodeServer{d: w.d}).NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	w.setData(64 << 10)
	w.breakSave("vol-0")
	// The first relist swaps in the new copy and keeps the view it replaced (internal/volume); the
	// next, a change again (the record still names the old version), drops that view before it
	// writes: from then on the budget must not move.
	w.d.relistCycle(ctx, 0)
	w.d.relistCycle(ctx, 0)
	first := w.d.budget.InUse()
	for range 4 {
		w.d.relistCycle(ctx, 0)
	}
	drift := w.d.budget.InUse() - first
	w.fixSave("vol-0") // the old record back, the new copy on disk: measurable
	used, held := w.d.budget.InUse(), w.onDiskBytes()
	t.Logf("in use %d bytes, the tmpfs holds %d; %d bytes moved over 4 more relists", used, held, drift)
	if drift != 0 || used < held {
		t.Fatalf("4 more relists of a volume whose record cannot be saved moved the budget by %d bytes; it counts %d bytes, "+
			"the tmpfs holds %d (%d uncounted); want 0 moved and none uncounted", drift, used, held, max(0, held-used))
	}
	if _, err := (&nodeServer{d: w.d}).NodeUnpublishVolume(ctx, unpublishRequest(req)); err != nil {
		t.Fatal(err)
	}
	if left := w.d.budget.InUse(); left != 0 {
		t.Fatalf("with no volume left %d bytes are still counted; want 0", left)
	}
}

// A view that cannot be rebuilt (a full tmpfs), refresh after refresh: each relist writes the
// share's new copy, replacing the one the last relist wrote, beside the old files the view still
// links. The budget must count that once, not the new copy again every cycle (it did: each
// failed rebuild charged its copy on top of the last one's charge), and nothing once the view is
// rebuilt and the record saved.
func TestFailedViewRebuildChargesWhatIsOnDiskOnce(t *testing.T) {
	w := newBudgetWorld(t)
	ctx := context.Background()
	req := w.request(0)
	if _, err := (&nodeServer{d: w.d}).NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	w.setData(16 << 10)
	w.d.relistCycle(ctx, 0)
	w.d.relistCycle(ctx, 0) // the view the refresh kept for readers is dropped
	saved := w.d.budget.InUse()
	w.breakView("vol-0")
	w.setData(64 << 10)
	w.d.relistCycle(ctx, 0)
	first := w.d.budget.InUse()
	for i := range 4 {
		w.setData(64 << 10) // a new version every cycle, of the same size
		w.d.relistCycle(ctx, 0)
		if i == 1 {
			w.d.relistCycle(ctx, 0) // and one with none
		}
	}
	drift := w.d.budget.InUse() - first
	t.Logf("saved %d bytes; with the view unwritable %d, then %d bytes moved over 5 more relists", saved, first, drift)
	if held := w.onDiskBytes(); first < held {
		t.Fatalf("with a new copy of 64 KiB beside the view's old files, the budget counts %d bytes (%d more than the saved record), the tmpfs holds %d; want at least that", first, first-saved, held)
	}
	if drift != 0 {
		t.Fatalf("5 more relists of a volume whose view cannot be rebuilt moved the budget by %d bytes; want 0", drift)
	}
	w.fixView("vol-0")
	w.d.relistCycle(ctx, 0)
	rec, _ := w.d.store.Get("vol-0")
	if used := w.d.budget.InUse(); used != volume.RecordedBytes(rec) {
		t.Fatalf("once the view is rebuilt and the record saved, the budget counts %d bytes; want the record's %d", used, volume.RecordedBytes(rec))
	}
}
