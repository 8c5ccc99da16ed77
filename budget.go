package main

// What a volume is charged in the node's budget of volume memory (internal/volume's Budget, which
// says why there is one): what its record describes costs (volumeBytes: its record's pages and
// lists, its own entries, its shares' copies, a view kept for readers), and one reconcile's
// account of its bytes until the record naming what it wrote is saved (volumeRewrite).

import (
	"encoding/json"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// volumeRewrite is one reconcile's account of a volume's bytes, from its start until the record
// naming what it wrote is saved: the room it holds (a new copy beside the old one, which stays
// charged until then; a view kept for readers), what it rewrote, and what the volume's tmpfs
// holds should the view or the record not be written after. The reconcile asks it; it does the
// arithmetic. Not safe for concurrent use: one reconcile, under the volume's lock, holds it.
type volumeRewrite struct {
	b    *volume.Budget
	room *volume.Reservation
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
func newVolumeRewrite(b *volume.Budget, rec volumeRecord) *volumeRewrite {
	return &volumeRewrite{b: b, room: b.Reservation(), rec: rec, previousView: volume.EntryBytes}
}

// release gives back the room the reconcile held: saved, the record charges what it holds.
func (w *volumeRewrite) release() { w.room.Release() }

// keptViewDropped gives back, until the record is saved, the bytes of the view the last refresh
// kept (rec.KeptBytes), dropped now: the next record says none.
func (w *volumeRewrite) keptViewDropped() { _ = w.room.Take(-w.rec.KeptBytes) }

// fits reserves n bytes for a share's new copy, beside its old one, or refuses with the budget's
// error (volume.Reservation.Take).
func (w *volumeRewrite) fits(n int64) error { return w.room.Take(n) }

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
	return !w.dropped && w.room.Take(w.previousView-w.replaced) == nil
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
		n = w.b.Charge(w.rec.VolumeID).Bytes() + w.written
	}
	w.b.ChargeUnsaved(w.rec.VolumeID, n)
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
// twice (the store's copy and one in flight). A share's list (up to share.MaxItems keys and
// paths of up to 253 bytes, for each of up to maxShares shares) is the share owner's
// choice, and each volume holds a copy of its own once its record was decoded (at every start)
// or built from an edited share: charged once per volume (an operation in flight shares the
// store's copy, or the share informer's). Each entry is charged its struct and slice slot, and
// its strings rounded up to the allocator's size classes (an eighth more, and 16 bytes, at
// most). What else a record holds is bounded and small, within the driver's own margin
// (volume.DriverMemoryMargin).
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
func exposureHeapBytes(e share.Exposure) int64 {
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
func exposureBytes(e share.Exposure) int64 {
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

// listGrowth is what a share's list of keys, changed from old to now (an edit of its spec.items),
// adds to its volume's record, in the heap and on disk (exposureBytes); 0 when it does not grow.
func listGrowth(old, now share.Exposure) int64 {
	if old.Same(now) {
		return 0
	}
	return max(0, exposureBytes(now)-exposureBytes(old))
}
