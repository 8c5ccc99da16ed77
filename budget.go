package main

// The node's budget of volume memory. The driver writes every volume's files, so the kernel
// charges their tmpfs pages to the driver's own memory cgroup: each volume's tmpfs is capped
// (--tmpfs-size), but without a cap on all of them together, enough in-line volumes on one node
// (legitimately, or from pods pinned there on purpose) would push the driver past its container's
// memory limit: OOM-killed, and after a restart perhaps again while it resumes them, with
// mounts, revocation and refresh stopped for every pod of the node. So the bytes of all volumes
// are counted against a budget: a publish that would exceed it fails with ResourceExhausted, a
// refresh that would keeps the volume's last files, and a driver restarted over more than its
// budget resumes every volume (they exist) but admits no new one until volumes go.
//
// What is counted is what the kernel charges for the files: each file's bytes rounded up to
// whole pages, each share's copy once (the pod's view hard-links it), the record's pages, and
// every entry: each file, directory and link of a copy and of the view costs an inode and a
// dentry (volume.EntryBytes) whatever its size, so a volume of many empty files or deep directories
// is charged what it holds, not nothing. How many entries a volume may have is capped
// (maxVolumeEntries, and the tmpfs's nr_inodes: tmpfs.go).
// By default the budget is derived from the container's memory limit (its cgroup), less the
// source cache's bound and a margin for the driver itself (memorylimit.go: defaultVolumeBudget),
// and the Go runtime's memory limit follows what the volumes hold outside its heap
// (runtimeMemory).

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/shared-resource/csi-driver/internal/volume"
)

// volumeBudget counts the bytes of the node's volumes against a limit. Zero limit: no budget.
// It is the one place that knows what each volume is charged and what is reserved.
//
// A volume is charged the bytes of its saved record (volumeBytes): the volume store (records.go)
// charges them when it saves a record, or loads one at start (chargeSaved), and frees them when the
// volume is forgotten (chargeSaved with nothing). So the bytes in use are, at every moment no
// operation is in progress, the sum over the records saved, but for two exceptions that keep the
// count from falling below the memory held; a step that fails between a charge and its save (a
// record that cannot be written) cannot leave a charge behind, nor give back bytes twice. First, a
// reconcile that rewrote copies and then could not save the record naming them (or rebuild the
// view) leaves the new copies on disk, so that volume is charged the larger of its saved record's
// bytes and what its tmpfs holds, measured (volumeRewrite's unsaved), the same on every cycle that
// fails so, until the next save or forget. Second, no record names a file a reader keeps open
// after a refresh removed it: its pages stay in the tmpfs until the reader closes it, so every
// reconcile charges the volume, on top, what the kernel counts in its tmpfs beyond what a walk of
// it finds (unlinked, below), until the reconcile after the reader closed it.
// Operations in progress hold reservations: room for a volume before
// its record is saved (publish), for a share's new copy beside its old one, and for a view kept for
// readers, until the record naming them is saved (a reconcile's volumeRewrite). A reservation is
// released when its operation ends, whatever happened.
type volumeBudget struct {
	limit int64

	mu       sync.Mutex
	charges  map[string]volumeCharge // each volume's
	charged  int64                   // the sum of charges
	heap     int64                   // the part of charged that is in the driver's heap (volumeCharge.heap)
	reserved int64                   // held by operations in progress (reservation)
	// memory, when set, is told every change: the Go runtime's memory limit follows what the
	// volumes hold outside its heap (memorylimit.go).
	memory *runtimeMemory
}

// volumeCharge is what one volume is charged: the larger of what its record says and what a
// reconcile that could not save it measured, and the files no name leads to on top.
type volumeCharge struct {
	saved   int64 // its saved record's bytes
	unsaved int64 // what its tmpfs holds that its saved record does not describe; 0: none
	// unlinked is what its tmpfs holds of files removed while a reader keeps them open, by the
	// kernel's count at the volume's last reconcile or its recovery (volume.Usage.beyond); 0: none,
	// or none known (not a tmpfs; its last count kept while a walk fails).
	// A save keeps it until the next count: a save frees no page a reader keeps open.
	unlinked int64
	// heap is the part of saved and unsaved held in the driver's heap, not in tmpfs pages: its
	// record's lists (recordHeapBytes).
	heap int64
}

func (c volumeCharge) bytes() int64 { return max(c.saved, c.unsaved) + c.unlinked }

// budgetExceeded is a charge the budget refused.
type budgetExceeded struct{ need, used, limit int64 }

func (e *budgetExceeded) Error() string {
	return fmt.Sprintf("it needs %d bytes of memory, and the volumes on this node already use %d of the driver's budget of %d bytes "+
		"(--volume-bytes-budget, the chart's driver.volumeBytesBudget; raise it with the container's memory limit, or run fewer or smaller volumes on this node)",
		e.need, e.used, e.limit)
}

// chargeSaved charges volume id the n bytes of the record just saved (or, at start, found on
// disk), heap of them in the driver's heap, whether they fit or not, in place of what it was charged before (a previous record's,
// or an unsaved charge: the record describes the disk now; the files no name leads to stay). The
// volume store's own call (records.go). Room was reserved for what a save adds. n = 0 (no record
// is): the volume is gone, and forgotten.
func (b *volumeBudget) chargeSaved(id string, n, heap int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.followed()
	c := b.charges[id]
	next := volumeCharge{saved: n, unlinked: c.unlinked, heap: heap}
	if n == 0 {
		next = volumeCharge{}
	}
	b.charged += next.bytes() - c.bytes()
	b.heap += next.heap - c.heap
	switch {
	case next == volumeCharge{}:
		delete(b.charges, id)
	case b.charges == nil:
		b.charges = map[string]volumeCharge{id: next}
	default:
		b.charges[id] = next
	}
}

// chargeUnsaved keeps volume id charged for n bytes its tmpfs holds though its saved record does
// not describe them: the larger of the two, until the next save or forget. An unknown volume:
// nothing.
func (b *volumeBudget) chargeUnsaved(id string, n int64) {
	b.amend(id, func(c *volumeCharge) { c.unsaved = n })
}

// chargeUnlinked charges volume id, on top, the n bytes its tmpfs holds of files removed while a
// reader keeps them open (volumeStore.chargeUnlinkedFiles), until the next count or forget. An
// unknown volume: nothing.
func (b *volumeBudget) chargeUnlinked(id string, n int64) {
	b.amend(id, func(c *volumeCharge) { c.unlinked = n })
}

// amend changes volume id's charge with change. An unknown volume: nothing.
func (b *volumeBudget) amend(id string, change func(*volumeCharge)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.charges[id]
	if !ok {
		return
	}
	before := c.bytes()
	change(&c)
	b.charged += c.bytes() - before
	b.charges[id] = c
	b.followed()
}

// chargedFor is what volume id is charged now.
func (b *volumeBudget) chargedFor(id string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charges[id].bytes()
}

// inUse is the bytes charged now: the volumes', and those reserved.
func (b *volumeBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charged + b.reserved
}

// reservation is room an operation holds in the budget until it ends. Not safe for concurrent
// use: one operation, under its volume's lock, holds it.
type reservation struct {
	b *volumeBudget
	n int64
}

// reservation starts an empty reservation; release it when the operation ends.
func (b *volumeBudget) reservation() *reservation { return &reservation{b: b} }

// reserve starts a reservation of n bytes, or refuses with a *budgetExceeded when they do not fit
// beside what is in use (the reservation is then empty). Release it when the operation ends,
// either way.
func (b *volumeBudget) reserve(n int64) (*reservation, error) {
	r := b.reservation()
	return r, r.take(n)
}

// take adds n bytes to the reservation, or refuses with a *budgetExceeded when they do not fit
// beside what is in use. A negative n, a credit, is never refused.
func (r *reservation) take(n int64) error {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && n > 0 && b.charged+b.reserved+n > b.limit {
		return &budgetExceeded{need: n, used: b.charged + b.reserved, limit: b.limit}
	}
	b.reserved += n
	r.n += n
	b.followed()
	return nil
}

// release gives the reservation's bytes back. Again: nothing.
func (r *reservation) release() {
	r.b.mu.Lock()
	r.b.reserved -= r.n
	r.b.followed()
	r.b.mu.Unlock()
	r.n = 0
}

// volumeRewrite is one reconcile's account of a volume's bytes, from its start until the record
// naming what it wrote is saved: the room it holds (a new copy beside the old one, which stays
// charged until then; a view kept for readers), what it rewrote, and what the volume's tmpfs
// holds should the view or the record not be written after. The reconcile asks it; it does the
// arithmetic. Not safe for concurrent use: one reconcile, under the volume's lock, holds it.
type volumeRewrite struct {
	b    *volumeBudget
	room *reservation
	rec  volumeRecord // the record saved when the reconcile started
	// written are the bytes of the copies rewritten (volume.ChargedBytes), replaced those their shares
	// were charged before: what the volume holds that rec does not say, until the next is saved.
	written, replaced int64
	rewrote           bool
	dropped           bool // a share's new copy lacks a file of its old one (pathDropped)
	// previousView is what the view before this reconcile costs if it is kept (internal/volume): its
	// payload dir, the old copies' charges of the shares rewritten (whose pages only it then
	// holds), and the entries of the other shown shares' files in it (keptViewBytes).
	previousView int64
}

// newVolumeRewrite starts the account of a reconcile of the volume rec; release it when the
// reconcile ends.
func newVolumeRewrite(b *volumeBudget, rec volumeRecord) *volumeRewrite {
	return &volumeRewrite{b: b, room: b.reservation(), rec: rec, previousView: volume.EntryBytes}
}

// release gives back the room the reconcile held: saved, the record charges what it holds.
func (w *volumeRewrite) release() { w.room.release() }

// keptViewDropped gives back, until the record is saved, the bytes of the view the last refresh
// kept (rec.KeptBytes), dropped now: the next record says none.
func (w *volumeRewrite) keptViewDropped() { _ = w.room.take(-w.rec.KeptBytes) }

// fits reserves n bytes for a share's new copy, beside its old one, or refuses with a
// *budgetExceeded.
func (w *volumeRewrite) fits(n int64) error { return w.room.take(n) }

// rewritten notes that a share's copy, charged old.Bytes, was rewritten as one of now.Bytes.
func (w *volumeRewrite) rewritten(old, now shareState) {
	w.rewrote = true
	w.written += now.Bytes
	w.replaced += old.Bytes
	w.previousView += old.Bytes
}

// shown notes a share whose copy, old, was not rewritten, and whose files the view shows: a view
// kept links them.
func (w *volumeRewrite) shown(old shareState) { w.previousView += keptViewBytes(old) }

// anyRewritten says whether a share's copy was rewritten (the view changes with it).
func (w *volumeRewrite) anyRewritten() bool { return w.rewrote }

// keepsView reserves room to keep the view the reconcile replaces for readers still on it
// (internal/volume), beside what is in use: the old copies it alone then holds, and its links to the
// other shares' files. False: a share's copy lost a file (pathDropped), or it does not fit, and
// the view is not kept.
func (w *volumeRewrite) keepsView() bool {
	return !w.dropped && w.room.take(w.previousView-w.replaced) == nil
}

// pathDropped notes that a share's new copy lacks a file its old one had: the view it replaces
// is not kept, whether or not another share provides the path (its bytes were this share's).
func (w *volumeRewrite) pathDropped() { w.dropped = true }

// keptViewCost is what the view the reconcile replaced costs, kept: what the next record says.
func (w *volumeRewrite) keptViewCost() int64 { return w.previousView }

// unsaved charges the volume what its tmpfs holds once its record no longer describes it: the
// view could not be rebuilt from the new copies, or the record naming them could not be saved.
// held is that, measured (volume.Dir.Measure), not counted from what the reconcile wrote: the
// copies a failed cycle wrote are replaced by the next cycle's, an older copy may stay linked from
// the view alone, and a view kept for readers links whatever the view showed; so a reconcile that
// fails the same way every cycle is charged the same. Should measuring have failed (err), the
// new copies are charged on top of what the volume is charged now: never less than it holds,
// though then more with every cycle that fails so.
func (w *volumeRewrite) unsaved(held int64, err error) {
	n := held + recordHeapBytes(w.rec)
	if err != nil {
		n = w.b.chargedFor(w.rec.VolumeID) + w.written
	}
	w.b.chargeUnsaved(w.rec.VolumeID, n)
}

// keptViewBytes bounds what a share whose copy was not rewritten costs in a view kept after a
// refresh: the kept payload dir's links to its files, by their names. The share is charged its
// pages and two trees, the copy's and the view's (volume.ChargedBytes), so half its charge is at least
// one tree, long names included.
func keptViewBytes(s shareState) int64 { return (s.Bytes + 1) / 2 }

// volumeEntries are a volume's entries besides its shares' files: the tmpfs's root, record.json,
// shares/, and the view's data/ with its payload dir and ..data link.
const volumeEntries = 6

// volumeBytes is what the volume rec describes costs: its record in whole pages on its tmpfs, its
// items in the driver's memory (recordHeapBytes), its own entries, its shares' copies
// (shareState.Bytes), and the view a refresh kept (KeptBytes).
func volumeBytes(rec volumeRecord) int64 {
	return volumeBytesOnPages(rec, recordPages(rec))
}

// volumeBytesSized is volumeBytes for a record just written, whose encoding has size bytes: the
// store charges a saved record this way, without encoding it again.
func volumeBytesSized(rec volumeRecord, size int64) int64 {
	return volumeBytesOnPages(rec, volume.Pages(size))
}

func volumeBytesOnPages(rec volumeRecord, recordOnDisk int64) int64 {
	n := recordOnDisk + recordHeapBytes(rec) + volumeEntries*volume.EntryBytes + rec.KeptBytes
	for _, s := range rec.Shares {
		n += s.Bytes
	}
	return n
}

// recordHeapBytes is what the driver's memory holds of rec's lists of names beside its file:
// the pod's items, and each share's list of the keys it exposes (shareState.Exposed). A pod
// chooses its items (up to maxItems keys and paths; a path may have 4096 bytes), kept decoded by
// the store and copied by an operation on the volume while it runs, so each item is charged
// twice (the store's copy and one in flight). A share's list (up to maxSharedItems keys and
// paths of up to 253 bytes, for each of up to maxShares shares) is the share owner's
// choice, and each volume holds a copy of its own once its record was decoded (at every start)
// or built from an edited share: charged once per volume (an operation in flight shares the
// store's copy, or the share informer's). Each entry is charged its struct and slice slot, and
// its strings rounded up to the allocator's size classes (an eighth more, and 16 bytes, at
// most). What else a record holds is bounded and small, within the driver's own margin
// (driverMemoryMargin).
func recordHeapBytes(rec volumeRecord) int64 {
	var items int64
	for _, it := range rec.Items {
		items += itemSlotBytes + heapStringBytes(it.Key) + heapStringBytes(it.Path)
	}
	var lists int64
	for _, s := range rec.Shares {
		lists += exposureHeapBytes(s.Exposed)
	}
	return 2*items + lists
}

// exposureHeapBytes is what a share's list of keys costs in a record decoded in the heap.
func exposureHeapBytes(e exposure) int64 {
	var n int64
	for _, k := range e {
		n += exposedKeySlotBytes + heapStringBytes(k.Key) + heapStringBytes(k.Path)
	}
	return n
}

// heapStringBytes is what a string of the heap costs, rounded up to the allocator's size classes.
func heapStringBytes(s string) int64 {
	if s == "" {
		return 0
	}
	return int64(len(s)) + int64(len(s))/8 + 16
}

// exposureBytes is what a share's list of keys adds to its volume's charge: its copy in the heap
// and its entries in the record's file (`{"key":"…","path":"…"},`; keys and paths need no
// escaping).
func exposureBytes(e exposure) int64 {
	n := exposureHeapBytes(e)
	for _, k := range e {
		n += int64(len(`{"key":"","path":""},`) + len(k.Key) + len(k.Path))
	}
	return n
}

// exposedKeySlotBytes is an exposed key's struct (two string headers) in its slice, doubled:
// a list decoded grows its slice by doubling.
const exposedKeySlotBytes = 64

// itemSlotBytes is an item's struct (an int, two string headers, a mode), rounded up.
const itemSlotBytes = 64

// encodeRecord is rec as the volume store writes it (records.go's writeRecord), and so as the
// budget counts it.
func encodeRecord(rec volumeRecord) ([]byte, error) { return json.Marshal(rec) }

// recordPages is what rec costs on disk, in whole pages.
func recordPages(rec volumeRecord) int64 {
	b, err := encodeRecord(rec)
	if err != nil {
		return volume.PageSize // cannot happen: a record is plain data
	}
	return volume.Pages(int64(len(b)))
}

// volumeEntryCount is how many files and directories the copies of shares hold, against
// maxVolumeEntries.
func volumeEntryCount(shares []shareState) int {
	n := 0
	for _, s := range shares {
		n += s.Entries
	}
	return n
}
