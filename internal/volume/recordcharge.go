package volume

// What a volume is charged in the node's budget of volume memory (Budget, which says why
// there is one): what its record describes costs (RecordedBytes: its record's pages and
// lists, its own entries, its shares' copies, a view kept for readers), and one reconcile's
// account of its bytes until the record naming what it wrote is saved (Rewrite).

import (
	"encoding/json"

	"github.com/shared-resource/csi-driver/internal/share"
)

// Rewrite is one reconcile's account of a volume's bytes, from its start until the record
// naming what it wrote is saved: the room it holds (a new copy beside the old one, which stays
// charged until then; a view kept for readers), what it rewrote, and what the volume's tmpfs
// holds should the view or the record not be written after. The reconcile asks it; it does the
// arithmetic. Not safe for concurrent use: one reconcile, under the volume's lock, holds it.
type Rewrite struct {
	b    *Budget
	room *Reservation
	rec  Record // the record saved when the reconcile started
	// written are the bytes of the copies rewritten (ChargedBytes), replaced those their shares
	// were charged before: what the volume holds that rec does not say, until the next is saved.
	written, replaced int64
	rewrote           bool
	dropped           bool // a share's new copy lacks a file of its old one (PathDropped)
	// previousView is what the view before this reconcile costs if it is kept (Dir.RebuildView): its
	// payload dir, the old copies' charges of the shares rewritten (whose pages only it then
	// holds), and the entries of the other shown shares' files in it (keptViewBytes).
	previousView int64
}

// NewRewrite starts the account of a reconcile of the volume rec; Release it when the
// reconcile ends.
func NewRewrite(b *Budget, rec Record) *Rewrite {
	return &Rewrite{b: b, room: b.Reservation(), rec: rec, previousView: EntryBytes}
}

// Release gives back the room the reconcile held: saved, the record charges what it holds.
func (w *Rewrite) Release() { w.room.Release() }

// KeptViewDropped gives back, until the record is saved, the bytes of the view the last refresh
// kept (rec.KeptBytes), dropped now: the next record says none.
func (w *Rewrite) KeptViewDropped() { _ = w.room.Take(-w.rec.KeptBytes) }

// Fits reserves n bytes for a share's new copy, beside its old one, or refuses with the budget's
// error (Reservation.Take).
func (w *Rewrite) Fits(n int64) error { return w.room.Take(n) }

// Rewritten notes that a share's copy, charged old.Bytes, was rewritten as one of now.Bytes.
func (w *Rewrite) Rewritten(old, now ShareState) {
	w.rewrote = true
	w.written += now.Bytes
	w.replaced += old.Bytes
	w.previousView += old.Bytes
}

// Shown notes a share whose copy, old, was not rewritten, and whose files the view shows: a view
// kept links them.
func (w *Rewrite) Shown(old ShareState) { w.previousView += keptViewBytes(old) }

// AnyRewritten says whether a share's copy was rewritten (the view changes with it).
func (w *Rewrite) AnyRewritten() bool { return w.rewrote }

// KeepsView reserves room to keep the view the reconcile replaces for readers still on it
// (Dir.RebuildView), beside what is in use: the old copies it alone then holds, and its links to the
// other shares' files. False: a share's copy lost a file (PathDropped), or it does not fit, and
// the view is not kept.
func (w *Rewrite) KeepsView() bool {
	return !w.dropped && w.room.Take(w.previousView-w.replaced) == nil
}

// PathDropped notes that a share's new copy lacks a file its old one had: the view it replaces
// is not kept, whether or not another share provides the path (its bytes were this share's).
func (w *Rewrite) PathDropped() { w.dropped = true }

// keptViewCost is what the view the reconcile replaced costs, kept: what the next record says.
func (w *Rewrite) keptViewCost() int64 { return w.previousView }

// unsaved charges the volume what its tmpfs holds once its record no longer describes it: the
// view could not be rebuilt from the new copies, or the record naming them could not be saved.
// held is that, measured (Dir.Measure), not counted from what the reconcile wrote: the
// copies a failed cycle wrote are replaced by the next cycle's, an older copy may stay linked from
// the view alone, and a view kept for readers links whatever the view showed; so a reconcile that
// fails the same way every cycle is charged the same. Should measuring have failed (err), the
// new copies are charged on top of what the volume is charged now: never less than it holds,
// though then more with every cycle that fails so.
func (w *Rewrite) unsaved(held int64, err error) {
	n := held + HeapBytes(w.rec)
	if err != nil {
		n = w.b.Charge(w.rec.VolumeID).Bytes() + w.written
	}
	w.b.ChargeUnsaved(w.rec.VolumeID, n)
}

// keptViewBytes bounds what a share whose copy was not rewritten costs in a view kept after a
// refresh: the kept payload dir's links to its files, by their names. The share is charged its
// pages and two trees, the copy's and the view's (ChargedBytes), so half its charge is at least
// one tree, long names included.
func keptViewBytes(s ShareState) int64 { return (s.Bytes + 1) / 2 }

// OwnEntries are a volume's entries besides its shares' files: the tmpfs's root, record.json,
// shares/, and the view's data/ with its payload dir and ..data link.
const OwnEntries = 6

// RecordedBytes is what the volume rec describes costs: its record in whole pages on its tmpfs, its
// items in the driver's memory (HeapBytes), its own entries, its shares' copies
// (ShareState.Bytes), and the view a refresh kept (KeptBytes).
func RecordedBytes(rec Record) int64 {
	return volumeBytesOnPages(rec, RecordPages(rec))
}

// volumeBytesSized is RecordedBytes for a record just written, whose encoding has size bytes: the
// store charges a saved record this way, without encoding it again.
func volumeBytesSized(rec Record, size int64) int64 {
	return volumeBytesOnPages(rec, Pages(size))
}

func volumeBytesOnPages(rec Record, recordOnDisk int64) int64 {
	n := recordOnDisk + HeapBytes(rec) + OwnEntries*EntryBytes + rec.KeptBytes
	for _, s := range rec.Shares {
		n += s.Bytes
	}
	return n
}

// HeapBytes is what the driver's memory holds of rec's lists of names beside its file:
// the pod's items, and each share's list of the keys it exposes (ShareState.Exposed). A pod
// chooses its items (up to the driver's maximum of keys and paths; a path may have 4096 bytes), kept decoded by
// the store and copied by an operation on the volume while it runs, so each item is charged
// twice (the store's copy and one in flight). A share's list (up to share.MaxItems keys and
// paths of up to 253 bytes, for each of the volume's shares) is the share owner's
// choice, and each volume holds a copy of its own once its record was decoded (at every start)
// or built from an edited share: charged once per volume (an operation in flight shares the
// store's copy, or the share informer's). Each entry is charged its struct and slice slot, and
// its strings rounded up to the allocator's size classes (an eighth more, and 16 bytes, at
// most). What else a record holds is bounded and small, within the driver's own margin
// (DriverMemoryMargin).
func HeapBytes(rec Record) int64 {
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

// ExposureBytes is what a share's list of keys adds to its volume's charge: its copy in the heap
// and its entries in the record's file (`{"key":"…","path":"…"},`; keys and paths need no
// escaping).
func ExposureBytes(e share.Exposure) int64 {
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

// EncodeRecord is rec as the volume store writes it (Store.Save), and so as the
// budget counts it.
func EncodeRecord(rec Record) ([]byte, error) { return json.Marshal(rec) }

// RecordPages is what rec costs on disk, in whole pages.
func RecordPages(rec Record) int64 {
	b, err := EncodeRecord(rec)
	if err != nil {
		return PageSize // cannot happen: a record is plain data
	}
	return Pages(int64(len(b)))
}

// EntryCount is how many files and directories the copies of shares hold, against
// the driver's bound on a volume's entries.
func EntryCount(shares []ShareState) int {
	n := 0
	for _, s := range shares {
		n += s.Entries
	}
	return n
}

// ListGrowth is what a share's list of keys, changed from old to now (an edit of its spec.items),
// adds to its volume's record, in the heap and on disk (ExposureBytes); 0 when it does not grow.
func ListGrowth(old, now share.Exposure) int64 {
	if old.Same(now) {
		return 0
	}
	return max(0, ExposureBytes(now)-ExposureBytes(old))
}
