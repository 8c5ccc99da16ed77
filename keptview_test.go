package main

// Specification of the view a refresh keeps (internal/volume): an app that resolved the view's
// ..data just before a refresh swapped it, and then opens the files one after another, finds
// every file of the version it started on; a volume holds at most two versions, the kept one
// charged in the budget; a revocation, a restart's recovery and an unpublish leave none behind.

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// viewPayloads are the payload dirs of volume id's view.
func viewPayloads(t *testing.T, d *driver, id string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.store.MountPoint(id), volume.ViewDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") && e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// An app reads k1, k2, k1 through the view while the source changes: the refresh swaps the view
// between the app's resolution of ..data and its opens (the worst interleaving of a reader racing
// with the swap, made one step at a time).
func TestARefreshNeverMakesAFileMissingForAReaderOnTheOldVersion(t *testing.T) {
	c := newFakeCluster(t)
	c.setSource(map[string]string{"k1": "v0", "k2": "v0"})
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	view := filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir)
	const refreshes = 20
	missing := 0
	for i := 1; i <= refreshes; i++ {
		resolved, err := os.Readlink(filepath.Join(view, "..data"))
		if err != nil {
			t.Fatal(err)
		}
		v := "v" + strconv.Itoa(i)
		c.setSource(map[string]string{"k1": v, "k2": v})
		if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "k1", v, "k2", v) {
			t.Fatalf("refresh %d: %v, the pod sees %v", i, err, podView(t, d, "vol-1"))
		}
		for _, k := range []string{"k1", "k2", "k1"} {
			b, err := os.ReadFile(filepath.Join(view, resolved, k))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing++
			case err != nil:
				t.Fatal(err)
			case string(b) != "v"+strconv.Itoa(i-1):
				t.Fatalf("refresh %d: %s of the version the app resolved holds %q, want v%d", i, k, b, i-1)
			}
		}
		if n := len(viewPayloads(t, d, "vol-1")); n > 2 {
			t.Fatalf("refresh %d: the view holds %d versions, want at most 2", i, n)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d reads across %d refreshes found no file", missing, 3*refreshes, refreshes)
	}
	// The kept version is charged: the budget counts the saved record's bytes, which say so.
	rec := savedRecord(t, d, "vol-1")
	if rec.KeptBytes <= 0 || d.budget.InUse() != volume.RecordedBytes(rec) {
		t.Errorf("kept view charged %d, budget in use %d, the record's bytes %d: want the kept view counted", rec.KeptBytes, d.budget.InUse(), volume.RecordedBytes(rec))
	}
}

// A source's new version with the same bytes (its metadata edited) swaps nothing: no view is
// kept, and none charged.
func TestARefreshOfTheSameBytesKeepsNothing(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	c.setSource(map[string]string{"ca.crt": "CA"}) // a new resourceVersion, the same data
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	rec := savedRecord(t, d, "vol-1")
	if n := len(viewPayloads(t, d, "vol-1")); n != 1 || rec.KeptBytes != 0 || d.budget.InUse() != volume.RecordedBytes(rec) {
		t.Errorf("after a new version of the same bytes: %d versions in the view, %d bytes charged for a kept view; want 1 and none", n, rec.KeptBytes)
	}
}

// A revocation takes the files away at once: no kept version shows them under its hidden name.
func TestARevocationKeepsNoPreviousView(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(viewPayloads(t, d, "vol-1")); n != 2 {
		t.Fatalf("after a refresh: %d versions in the view, want 2 (the new one and the kept one)", n)
	}
	c.allowed = false
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(viewPayloads(t, d, "vol-1")); n != 1 {
		t.Errorf("after a revocation: %d versions in the view, want 1 (the empty one)", n)
	}
	found := 0
	_ = filepath.WalkDir(filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			found++
		}
		return nil
	})
	if rec := savedRecord(t, d, "vol-1"); found != 0 || rec.KeptBytes != 0 || d.budget.InUse() != volume.RecordedBytes(rec) {
		t.Errorf("after a revocation: %d files left in the view, %d bytes charged for a kept view, budget %d for %d; want none", found, rec.KeptBytes, d.budget.InUse(), volume.RecordedBytes(rec))
	}
}

// A restart's recovery rebuilds the view and drops the kept one; an unpublish leaves nothing.
func TestRecoveryAndUnpublishLeaveNoKeptView(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	req := publishVolume(t, d, "vol-1")
	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(viewPayloads(t, d, "vol-1")); n != 2 {
		t.Fatalf("after a refresh: %d versions in the view, want 2", n)
	}
	n, _ := c.restart(d)
	if err := reconcileVolume(t, n, "vol-1"); err != nil {
		t.Fatal(err)
	}
	rec := savedRecord(t, n, "vol-1")
	if got := len(viewPayloads(t, n, "vol-1")); got != 1 || rec.KeptBytes != 0 || n.budget.InUse() != volume.RecordedBytes(rec) {
		t.Errorf("after a restart's first reconcile: %d versions, %d bytes charged for a kept view, budget %d for %d; want 1 and nothing kept",
			got, rec.KeptBytes, n.budget.InUse(), volume.RecordedBytes(rec))
	}
	c.setSource(map[string]string{"ca.crt": "CA3"})
	if err := reconcileVolume(t, n, "vol-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := (&nodeServer{d: n}).NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(n.store.MountPoint("vol-1")); !errors.Is(err, fs.ErrNotExist) || n.budget.InUse() != 0 {
		t.Errorf("after unpublish: the volume's dir %v, budget %d; want gone and 0", err, n.budget.InUse())
	}
}

// filesNamed counts the regular files named name anywhere in volume id's view, kept versions
// included.
func filesNamed(t *testing.T, d *driver, id, name string) (found int) {
	t.Helper()
	_ = filepath.WalkDir(filepath.Join(d.store.MountPoint(id), volume.ViewDir), func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && e.Name() == name {
			found++
		}
		return nil
	})
	return found
}

// A key the source no longer has goes at once, though the share's change is a refresh: a kept
// version would still show it under its hidden name.
func TestAKeyTheSourceDroppedIsNotKeptInAView(t *testing.T) {
	c := newFakeCluster(t)
	c.setSource(map[string]string{"ca.crt": "CA", "tls.key": "KEY"})
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA2") {
		t.Fatalf("refresh: %v, the pod sees %v", err, podView(t, d, "vol-1"))
	}
	rec := savedRecord(t, d, "vol-1")
	if n, left := len(viewPayloads(t, d, "vol-1")), filesNamed(t, d, "vol-1", "tls.key"); n != 1 || left != 0 || rec.KeptBytes != 0 {
		t.Errorf("after the source dropped tls.key: %d versions in the view, tls.key in %d of them, %d bytes charged for a kept view; want 1, none, none", n, left, rec.KeptBytes)
	}
}

// A kept version lives until the volume's next reconcile, change or not: the readers it was kept
// for were on it for an instant, and an old value does not stay readable.
func TestAKeptViewGoesAtTheNextReconcile(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(viewPayloads(t, d, "vol-1")); n != 2 {
		t.Fatalf("after a refresh: %d versions in the view, want 2", n)
	}
	if err := reconcileVolume(t, d, "vol-1"); err != nil {
		t.Fatal(err)
	}
	rec := savedRecord(t, d, "vol-1")
	if n := len(viewPayloads(t, d, "vol-1")); n != 1 || rec.KeptBytes != 0 || d.budget.InUse() != volume.RecordedBytes(rec) {
		t.Errorf("after the next reconcile: %d versions in the view, %d bytes charged for a kept view, budget %d for %d; want 1 and none", n, rec.KeptBytes, d.budget.InUse(), volume.RecordedBytes(rec))
	}
}

// A kept version is admitted by the budget like any bytes: with room for the new copy but not for
// the kept version beside it, the refresh happens and nothing is kept.
func TestAKeptViewFitsTheBudgetOrIsNotKept(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	publishVolume(t, d, "vol-1")
	newCopy := volume.ChargedBytes(map[string]atomicwriter.File{"ca.crt": {Data: []byte("CA2")}})
	d.budget.Limit = d.budget.InUse() + newCopy + volume.EntryBytes/2
	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA2") {
		t.Fatalf("refresh: %v, the pod sees %v", err, podView(t, d, "vol-1"))
	}
	rec := savedRecord(t, d, "vol-1")
	if used := d.budget.InUse(); used > d.budget.Limit || rec.KeptBytes != 0 || len(viewPayloads(t, d, "vol-1")) != 1 {
		t.Errorf("budget %d in use of %d, %d bytes charged for a kept view, %d versions; want within the limit, nothing kept",
			used, d.budget.Limit, rec.KeptBytes, len(viewPayloads(t, d, "vol-1")))
	}
}

// A key one share's source dropped is not kept in a view though another share of the volume
// provides the same path: the kept version would still show the dropped key's bytes under its
// hidden name.
func TestAKeyTheSourceDroppedIsNotKeptWhereAnotherShareHasItsPath(t *testing.T) {
	c := newFakeCluster(t)
	c.setSource(map[string]string{"ca.crt": "CA", "tls.key": "DROPPED"})
	if _, err := c.client.CoreV1().Secrets("p").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src2", UID: "src2-1", ResourceVersion: "1"},
		Data:       map[string][]byte{"other.crt": []byte("OTHER")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, _ := c.node()
	addSecretShare(t, d, "share2", "p", "src2")
	req := publishRequest(t, d, "vol-1")
	delete(req.VolumeContext, attrSharedSecret)
	req.VolumeContext[attrShares] = "secret/share, secret/share2" // share first: it wins a path both provide
	if _, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// share2's source gains tls.key: share keeps the path.
	if _, err := c.client.CoreV1().Secrets("p").Update(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src2", UID: "src2-1", ResourceVersion: "2"},
		Data:       map[string][]byte{"other.crt": []byte("OTHER"), "tls.key": []byte("SHARE2")}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA", "tls.key", "DROPPED", "other.crt", "OTHER") {
		t.Fatalf("share2 gains tls.key: %v, the pod sees %v", err, podView(t, d, "vol-1"))
	}
	// share's source drops tls.key: share2's is shown, and share's bytes are nowhere.
	c.setSource(map[string]string{"ca.crt": "CA2"})
	if err := reconcileVolume(t, d, "vol-1"); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA2", "tls.key", "SHARE2", "other.crt", "OTHER") {
		t.Fatalf("share's source drops tls.key: %v, the pod sees %v", err, podView(t, d, "vol-1"))
	}
	var left []string
	_ = filepath.WalkDir(filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir), func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if b, _ := os.ReadFile(p); string(b) == "DROPPED" {
				left = append(left, p)
			}
		}
		return nil
	})
	if rec := savedRecord(t, d, "vol-1"); len(left) != 0 || rec.KeptBytes != 0 {
		t.Errorf("the dropped key's bytes are still in the view at %v (%d bytes charged for a kept view); want gone", left, rec.KeptBytes)
	}
}
