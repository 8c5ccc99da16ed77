package volume

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
// dentry (EntryBytes) whatever its size, so a volume of many empty files or deep directories
// is charged what it holds, not nothing (charge.go). How many entries a volume may have is capped
// by the driver (and by the tmpfs's nr_inodes).
// The driver derives the budget's limit from its container's memory limit, and makes the Go
// runtime's memory limit follow what the volumes hold outside its heap (FollowedBy).

import (
	"fmt"
	"sync"
)

// Budget counts the bytes of the node's volumes against a limit, Limit; zero: no budget. Set
// Limit before the budget is used. It is the one place that knows what each volume is charged and
// what is reserved.
//
// A volume is charged the bytes of its saved record: the Store (store.go) charges them when
// it saves a record, or loads one at start (ChargeSaved), and frees them when the volume is
// forgotten (ChargeSaved with nothing). So the bytes in use are, at every moment no
// operation is in progress, the sum over the records saved, but for two exceptions that keep the
// count from falling below the memory held; a step that fails between a charge and its save (a
// record that cannot be written) cannot leave a charge behind, nor give back bytes twice. First, a
// reconcile that rewrote copies and then could not save the record naming them (or rebuild the
// view) leaves the new copies on disk, so that volume is charged the larger of its saved record's
// bytes and what its tmpfs holds, measured (ChargeUnsaved), the same on every cycle that
// fails so, until the next save or forget. Second, no record names a file a reader keeps open
// after a refresh removed it: its pages stay in the tmpfs until the reader closes it, so every
// reconcile charges the volume, on top, what the kernel counts in its tmpfs beyond what a walk of
// it finds (Charge.Unlinked), until the reconcile after the reader closed it.
// Operations in progress hold reservations: room for a volume before
// its record is saved (publish), for a share's new copy beside its old one, and for a view kept for
// readers, until the record naming them is saved (a reconcile). A Reservation is
// released when its operation ends, whatever happened.
type Budget struct {
	Limit int64

	mu       sync.Mutex
	charges  map[string]Charge // each volume's
	charged  int64             // the sum of charges
	heap     int64             // the part of charged that is in the driver's heap (Charge.Heap)
	reserved int64             // held by operations in progress (Reservation)
	// memory, when set, is told every change (FollowedBy).
	memory MemoryFollower
}

// Charge is what one volume is charged: the larger of what its record says and what a
// reconcile that could not save it measured, and the files no name leads to on top.
type Charge struct {
	Saved   int64 // its saved record's bytes
	Unsaved int64 // what its tmpfs holds that its saved record does not describe; 0: none
	// Unlinked is what its tmpfs holds of files removed while a reader keeps them open, by the
	// kernel's count at the volume's last reconcile or its recovery (Usage.Beyond); 0: none,
	// or none known (not a tmpfs; its last count kept while a walk fails).
	// A save keeps it until the next count: a save frees no page a reader keeps open.
	Unlinked int64
	// Heap is the part of Saved and Unsaved held in the driver's heap, not in tmpfs pages: its
	// record's lists.
	Heap int64
}

// Bytes is what the volume is charged in all.
func (c Charge) Bytes() int64 { return max(c.Saved, c.Unsaved) + c.Unlinked }

// budgetExceeded is a charge the budget refused.
type budgetExceeded struct{ need, used, limit int64 }

func (e *budgetExceeded) Error() string {
	return fmt.Sprintf("it needs %d bytes of memory, and the volumes on this node already use %d of the driver's budget of %d bytes "+
		"(--volume-bytes-budget, the chart's driver.volumeBytesBudget; raise it with the container's memory limit, or run fewer or smaller volumes on this node)",
		e.need, e.used, e.limit)
}

// ChargeSaved charges volume id the n bytes of the record just saved (or, at start, found on
// disk), heap of them in the driver's heap, whether they fit or not, in place of what it was charged before (a previous record's,
// or an unsaved charge: the record describes the disk now; the files no name leads to stay). The
// volume store's own call. Room was reserved for what a save adds. n = 0 (no record
// is): the volume is gone, and forgotten.
func (b *Budget) ChargeSaved(id string, n, heap int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.followed()
	c := b.charges[id]
	next := Charge{Saved: n, Unlinked: c.Unlinked, Heap: heap}
	if n == 0 {
		next = Charge{}
	}
	b.charged += next.Bytes() - c.Bytes()
	b.heap += next.Heap - c.Heap
	switch {
	case next == Charge{}:
		delete(b.charges, id)
	case b.charges == nil:
		b.charges = map[string]Charge{id: next}
	default:
		b.charges[id] = next
	}
}

// ChargeUnsaved keeps volume id charged for n bytes its tmpfs holds though its saved record does
// not describe them: the larger of the two, until the next save or forget. An unknown volume:
// nothing.
func (b *Budget) ChargeUnsaved(id string, n int64) {
	b.amend(id, func(c *Charge) { c.Unsaved = n })
}

// ChargeUnlinked charges volume id, on top, the n bytes its tmpfs holds of files removed while a
// reader keeps them open (Dir.CountUnlinked counts them), until the next count or forget. An
// unknown volume: nothing.
func (b *Budget) ChargeUnlinked(id string, n int64) {
	b.amend(id, func(c *Charge) { c.Unlinked = n })
}

// amend changes volume id's charge with change. An unknown volume: nothing.
func (b *Budget) amend(id string, change func(*Charge)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.charges[id]
	if !ok {
		return
	}
	before := c.Bytes()
	change(&c)
	b.charged += c.Bytes() - before
	b.charges[id] = c
	b.followed()
}

// Charge is what volume id is charged now; nothing for a volume not charged.
func (b *Budget) Charge(id string) Charge {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charges[id]
}

// InUse is the bytes charged now: the volumes', and those reserved.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charged + b.reserved
}

// Reservation is room an operation holds in the budget until it ends. Not safe for concurrent
// use: one operation, under its volume's lock, holds it.
type Reservation struct {
	b *Budget
	n int64
}

// Reservation starts an empty Reservation; Release it when the operation ends.
func (b *Budget) Reservation() *Reservation { return &Reservation{b: b} }

// Reserve starts a Reservation of n bytes, or refuses with a *budgetExceeded when they do not fit
// beside what is in use (the Reservation is then empty). Release it when the operation ends,
// either way.
func (b *Budget) Reserve(n int64) (*Reservation, error) {
	r := b.Reservation()
	return r, r.Take(n)
}

// Take adds n bytes to the Reservation, or refuses with a *budgetExceeded when they do not fit
// beside what is in use. A negative n, a credit, is never refused.
func (r *Reservation) Take(n int64) error {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Limit > 0 && n > 0 && b.charged+b.reserved+n > b.Limit {
		return &budgetExceeded{need: n, used: b.charged + b.reserved, limit: b.Limit}
	}
	b.reserved += n
	r.n += n
	b.followed()
	return nil
}

// Release gives the Reservation's bytes back. Again: nothing.
func (r *Reservation) Release() {
	r.b.mu.Lock()
	r.b.reserved -= r.n
	r.b.followed()
	r.b.mu.Unlock()
	r.n = 0
}

// followed tells the Go runtime's memory limit, if one follows the budget, what the volumes hold
// now outside the heap and in it. Reservations are counted outside: room for what an operation
// writes. Called with b.mu held.
func (b *Budget) followed() {
	if b.memory != nil {
		b.memory.Follow(b.charged+b.reserved-b.heap, b.heap)
	}
}

// MemoryFollower is told what the volumes hold outside the Go heap and in it, on every change of
// the budget: the driver's Go runtime memory limit follows it.
type MemoryFollower interface {
	Follow(outside, heap int64)
}

// FollowedBy makes m follow the budget, from now.
func (b *Budget) FollowedBy(m MemoryFollower) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.memory = m
	b.followed()
}
