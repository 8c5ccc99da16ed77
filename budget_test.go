package main

// Specification of the node's volume budget (internal/volume), on a fake node (unitdriver_test.go): a
// publish that does not fit is refused with ResourceExhausted and a message naming the budget,
// the bytes in use and the flag, and fits once another volume is gone; a refresh that does not
// fit keeps the volume's last files and tells the pod once, and goes through when room is made.
// What the kernel charges, and that the driver is not OOM-killed, is measured on the cluster
// (test/e2e/pods/budget_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// A volume of long names: a pod's items name 300 files of 253 bytes each (one key of
// a byte, under 300 names). On a real tmpfs it held 3,692 KiB of tmpfs pages (its 300 pages of
// data, a page for each top-level link's target, in the copy and the view, and its record) and
// some 1 MiB of slab (a name allocation for each of the 1,200 names), and it was charged 2,504
// KiB. What the kernel holds is counted here from the kernel's rules, apart from internal/volume's: a
// link target of 128 bytes or more takes a page; a name of 32 bytes or more an allocation of its
// own (16 bytes of header, the name and its NUL: 512 bytes of kmalloc for 253); and each entry an
// inode and a dentry (936 bytes). A real tmpfs is measured in tmpfs_root_test.go.
func TestLongNamesAreChargedWhatTheKernelHolds(t *testing.T) {
	const n, nameLen = 300, 253
	rec := volume.Record{VolumeID: "vol-long", Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "s"}}}}
	files := map[string]atomicwriter.File{}
	for i := range n {
		name := fmt.Sprintf("%03d", i) + strings.Repeat("n", nameLen-3)
		files[name] = atomicwriter.File{Data: []byte("x")}
		rec.Items = append(rec.Items, volume.Item{Key: "k", Path: name})
	}
	rec.Shares[0].Bytes = volume.ChargedBytes(files)
	charged := volume.RecordedBytes(rec)
	pagesHeld := int64(n)*volume.PageSize + 2*n*volume.PageSize + volume.RecordPages(rec) // data, link targets, record
	slabHeld := int64(4*n) * (512 + 936)                                                  // the files and links, in the copy and the view
	if held := pagesHeld + slabHeld; charged < held {
		t.Errorf("300 items of 253-byte names charged %d KiB, the kernel holds %d KiB (%d KiB of tmpfs pages, %d KiB of slab)",
			charged>>10, held>>10, pagesHeld>>10, slabHeld>>10)
	}
	t.Logf("300 items of 253-byte names charged %d KiB; the kernel holds at least %d KiB of tmpfs pages and %d KiB of slab", charged>>10, pagesHeld>>10, slabHeld>>10)
}

// A volume's record is kept decoded in the driver's memory, its items a pod's choice (up to
// maxItems names of up to 253 bytes each, here): the volume is charged for it, beyond what its
// tmpfs holds, at least twice what one decoded copy takes of the heap (the store's, and the one
// an operation in progress holds). Measured: records decoded as the store loads them.
func TestRecordsAreChargedWhatTheHeapHolds(t *testing.T) {
	const volumes = 20
	rec := volume.Record{VolumeID: "vol-heap", Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "s"}}}}
	for i := range maxItems {
		rec.Items = append(rec.Items, volume.Item{Key: fmt.Sprintf("%04d", i) + strings.Repeat("k", 249), Path: fmt.Sprintf("%04d", i) + strings.Repeat("p", 249), Mode: 0o440})
	}
	b, err := volume.EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	onTmpfs := volume.RecordPages(rec) + volume.OwnEntries*volume.EntryBytes // what the tmpfs holds for the record and the volume
	charged := volume.RecordedBytes(rec) - onTmpfs
	held := make([]volume.Record, volumes)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range held {
		if err := json.Unmarshal(b, &held[i]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perCopy := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / volumes
	runtime.KeepAlive(held)
	if charged < 2*perCopy {
		t.Errorf("a record of %d items of 253-byte names takes %d KiB of heap decoded; its volume is charged %d KiB for it, want at least twice that",
			maxItems, perCopy>>10, charged>>10)
	}
	t.Logf("a record of %d items of 253-byte names: %d KiB of heap per decoded copy, charged %d KiB beyond its tmpfs", maxItems, perCopy>>10, charged>>10)
}

// A volume costs its record's pages, as saved, and its own six entries, besides its shares.
func TestVolumeBytesCountTheRecordAsSaved(t *testing.T) {
	rec := volume.Record{VolumeID: "vol-1", Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "s"}, Bytes: 10000}}}
	if got, want := volume.RecordedBytes(rec), int64(volume.PageSize+volume.OwnEntries*volume.EntryBytes+10000)+volume.HeapBytes(rec); got != want {
		t.Errorf("RecordedBytes of a small record = %d, want %d", got, want)
	}
	for i := range 200 { // a long list of items makes a record of several pages
		rec.Items = append(rec.Items, volume.Item{Key: fmt.Sprintf("key-%d", i), Path: fmt.Sprintf("some/where/file-%d", i)})
	}
	b, _ := volume.EncodeRecord(rec)
	if got, want := volume.RecordedBytes(rec), volume.Pages(int64(len(b)))+volume.OwnEntries*volume.EntryBytes+10000+volume.HeapBytes(rec); got != want || want < 4*volume.PageSize {
		t.Errorf("RecordedBytes of a record of %d bytes = %d, want %d", len(b), got, want)
	}
}

func TestPublishBeyondTheBudgetIsRefusedUntilThereIsRoom(t *testing.T) {
	d, _ := nodeWorld(t)
	ns := &nodeServer{d: d}
	ctx := context.Background()
	// One volume of the share costs a page for ca.crt and one for its record, and its entries.
	one := int64(volume.PageSize) + volume.ChargedBytes(map[string]atomicwriter.File{"ca.crt": {Data: []byte("CA")}}) + volume.OwnEntries*volume.EntryBytes
	d.budget.Limit = one + one/2
	first := publishRequest(t, d, "vol-1")
	if _, err := ns.NodePublishVolume(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got := d.budget.InUse(); got != one {
		t.Fatalf("in use after one volume: %d, want %d", got, one)
	}
	second := publishRequest(t, d, "vol-2")
	second.TargetPath = filepath.Join(filepath.Dir(filepath.Dir(second.TargetPath)), "other", "mount")
	mkdirParent(t, second.TargetPath)
	_, err := ns.NodePublishVolume(ctx, second)
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--volume-bytes-budget") ||
		!strings.Contains(st.Message(), fmt.Sprintf("already use %d of the driver's budget of %d bytes", one, d.budget.Limit)) {
		t.Fatalf("publish beyond the budget: %v; want ResourceExhausted naming the bytes in use, the budget and the flag", err)
	}
	if d.budget.InUse() != one || exists(d.store.MountPoint("vol-2")) {
		t.Fatalf("the refused publish left %d bytes charged or its volume dir", d.budget.InUse())
	}
	if _, err := ns.NodeUnpublishVolume(ctx, unpublishRequest(first)); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.NodePublishVolume(ctx, second); err != nil || d.budget.InUse() != one {
		t.Fatalf("publish once the first volume is gone: %v, %d bytes in use", err, d.budget.InUse())
	}
}

func TestRefreshBeyondTheBudgetKeepsTheLastFiles(t *testing.T) {
	d, client, events := publishedVolumeOfOneKey(t)
	ctx := context.Background()
	one := d.budget.InUse()
	newCopy := volume.ChargedBytes(map[string]atomicwriter.File{"ca.crt": {Data: make([]byte, 5000)}})
	d.budget.Limit = one + newCopy - 1 // the new copy does not fit beside the old one
	if _, err := client.CoreV1().Secrets("p").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "2"},
		Data: map[string][]byte{"ca.crt": make([]byte, 5000)}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	view := filepath.Join(d.store.MountPoint("vol-1"), "data")
	for range 2 { // told once
		d.relistCycle(ctx, 0)
		files, err := atomicwriter.ReadFiles(view)
		if err != nil || string(files["ca.crt"].Data) != "CA" {
			t.Fatalf("after a refresh beyond the budget the view holds %d bytes (%v), want the last files", len(files["ca.crt"].Data), err)
		}
	}
	if n := len(events); n != 1 {
		t.Fatalf("%d events, want one", n)
	}
	if e := <-events; !strings.Contains(e, reasonRefreshFailed) || !strings.Contains(e, "do not fit on this node") {
		t.Fatalf("event %q, want %s saying the new files do not fit", e, reasonRefreshFailed)
	}
	rec, _ := d.store.Get("vol-1")
	if rec.Shares[0].Told != volume.ToldOverBudget || d.budget.InUse() != one {
		t.Fatalf("record %+v, %d bytes in use; want the share over budget and its old copy counted", rec.Shares[0], d.budget.InUse())
	}
	d.budget.Limit = 0 // room made
	d.relistCycle(ctx, 0)
	files, _ := atomicwriter.ReadFiles(view)
	// The view the refresh replaced is kept for readers still on it, and charged: the old copy's
	// bytes, and its payload dir.
	kept := rec.Shares[0].Bytes + volume.EntryBytes
	if want := one - rec.Shares[0].Bytes + newCopy + kept; len(files["ca.crt"].Data) != 5000 || d.budget.InUse() != want {
		t.Fatalf("after room was made: %d bytes of ca.crt, %d in use; want the new 5000 bytes and %d", len(files["ca.crt"].Data), d.budget.InUse(), want)
	}
}

// emptyKeys is a Secret's data of n keys with empty values: no data pages, n entries.
func emptyKeys(n int) map[string][]byte {
	data := map[string][]byte{}
	for i := range n {
		data[fmt.Sprintf("k%d", i)] = nil
	}
	return data
}

// A share whose source has more keys than a volume holds files and directories is refused,
// however small its data: a Secret of empty values cost kernel memory without limit.
func TestPublishOfMoreFilesThanAVolumeHoldsIsRefused(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "1"},
		Data: emptyKeys(maxVolumeEntries + 1)})
	d, m := nodeWorldWith(t, client)
	_, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), publishRequest(t, d, "vol-1"))
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), fmt.Sprintf("make %d files and directories; a volume holds at most %d", maxVolumeEntries+1, maxVolumeEntries)) ||
		!strings.Contains(st.Message(), attrItems) {
		t.Fatalf("publish of %d empty keys: %v; want ResourceExhausted naming the count, the bound and %s", maxVolumeEntries+1, err, attrItems)
	}
	if m.count() != 0 || d.store.Count() != 0 || d.budget.InUse() != 0 {
		t.Fatalf("the refused publish left %d mounts, %d records, %d bytes charged", m.count(), d.store.Count(), d.budget.InUse())
	}
}

// A refresh that would make the volume hold more files and directories than it may keeps the
// volume's last files and tells the pod once, as one over the budget does.
func TestRefreshToMoreFilesThanAVolumeHoldsKeepsTheLastFiles(t *testing.T) {
	d, client, events := publishedVolumeOfOneKey(t)
	ctx := context.Background()
	before := d.budget.InUse()
	if _, err := client.CoreV1().Secrets("p").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "2"},
		Data: emptyKeys(maxVolumeEntries + 1)}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // told once
		d.relistCycle(ctx, 0)
		files, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint("vol-1"), "data"))
		if err != nil || len(files) != 1 || string(files["ca.crt"].Data) != "CA" {
			t.Fatalf("after a refresh to %d keys the view holds %d files (%v), want the last one", maxVolumeEntries+1, len(files), err)
		}
	}
	if n := len(events); n != 1 {
		t.Fatalf("%d events, want one", n)
	}
	if e := <-events; !strings.Contains(e, reasonRefreshFailed) || !strings.Contains(e, fmt.Sprintf("a volume holds at most %d", maxVolumeEntries)) {
		t.Fatalf("event %q, want %s naming the bound", e, reasonRefreshFailed)
	}
	if d.budget.InUse() != before {
		t.Fatalf("%d bytes in use, want %d as before", d.budget.InUse(), before)
	}
}

// publishedVolumeOfOneKey is a node with volume vol-1 published over Secret p/src (ca.crt = CA,
// resourceVersion 1), the client serving that Secret, and the events the pod is told.
func publishedVolumeOfOneKey(t *testing.T) (*driver, *fake.Clientset, chan string) {
	t.Helper()
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA")}})
	d, _ := nodeWorldWith(t, client)
	events := make(chan string, 10)
	d.events = &record.FakeRecorder{Events: events}
	if _, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	return d, client, events
}
