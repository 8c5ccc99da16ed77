package volume

// The set of volumes this node serves, and what the driver remembers of each: its record
// (record.go). Each record lives inside the volume's own tmpfs (volumes/<id>/record.json,
// see Dir), so it exists exactly as long as the volume does: it survives a driver restart,
// disappears with the tmpfs on unpublish or reboot (when the pods are gone too), and can never be
// left behind on the host disk.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/share"
)

// Store keeps the published volumes in memory and persists each record in its volume.
// What it charges the node's volume budget for a volume (Budget) is the bytes of the record
// it saved (RecordedBytes), from the save until the volume is forgotten; more when its tmpfs holds
// more than the record says (rewriteUnsaved, Remember), and the files no name leads to on top
// (ChargeUnlinkedFiles).
type Store struct {
	path   string // <state dir>/volumes
	budget *Budget
	mu     sync.Mutex
	vols   map[string]Record
	// unverified are the volumes recovered at start whose pod's view has not been rebuilt
	// since: a crash between a reconcile's swap of the view and its save of the record leaves
	// a view the record does not describe (the record is saved last), and only a rebuild from
	// fresh verdicts puts them back in step. A save that fails after the swap does the same
	// (viewUnsaved).
	unverified map[string]bool
	// counted is, per volume, the disk's state read just before its last walk for files removed
	// but kept open (ChargeUnlinkedFiles; Remember at start); dropped by a save, or a rewrite
	// left unsaved, which change the disk, and by Forget.
	counted map[string]DiskState
}

// NewStore is the store of the volumes under stateDir/volumes, charging budget; empty until
// records are saved or remembered.
func NewStore(stateDir string, budget *Budget) *Store {
	return &Store{path: filepath.Join(stateDir, "volumes"), budget: budget,
		vols: map[string]Record{}, unverified: map[string]bool{}, counted: map[string]DiskState{}}
}

// Path is the directory of the volumes' mount points, <state dir>/volumes.
func (s *Store) Path() string { return s.path }

// MountPoint is where the volume's tmpfs is mounted. id is a ValidID.
func (s *Store) MountPoint(id string) string { return filepath.Join(s.path, id) }

// DirOf is rec's volume directory, writing files with rec's group.
func (s *Store) DirOf(rec Record) Dir {
	return Dir{Path: s.MountPoint(rec.VolumeID), GID: rec.GID}
}

// Clone copies the record with a Shares slice of its own. The store hands out and keeps only
// clones, so its copy changes only by Save, once the disk has: a reconcile builds the next record
// on a clone, and one that fails half-way must be retried whole by the next cycle, not find its
// revocation already "done" in memory while the disk and the pod's view still show the share
// (the next cycle would then never rebuild the view). (Items is never changed after publish.)
func (r Record) Clone() Record {
	r.Shares = slices.Clone(r.Shares)
	return r
}

// Get is volume id's record, and whether the store has one.
func (s *Store) Get(id string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.vols[id]
	return r.Clone(), ok
}

// List returns the records sorted by volume id, so cycles process volumes in a stable order.
func (s *Store) List() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.vols))
	for _, r := range s.vols {
		out = append(out, r.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out
}

// Count is how many volumes the store holds.
func (s *Store) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.vols)
}

// Save persists rec atomically (temp file, rename) and then updates memory and the budget's
// charge for the volume, so neither claims a state the disk does not have: a save that fails
// changes nothing.
func (s *Store) Save(rec Record) error {
	size, err := s.writeRecord(rec)
	if err != nil {
		return err
	}
	s.keepCharging(rec, volumeBytesSized(rec, size))
	return nil
}

// keepCharging puts rec in memory, charged n bytes in place of the volume's previous charge (its
// previous record's, or an unsaved charge: rec describes the disk now).
func (s *Store) keepCharging(rec Record, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vols[rec.VolumeID] = rec.Clone()
	delete(s.counted, rec.VolumeID) // a save changed the disk: the next count walks it again
	s.budget.ChargeSaved(rec.VolumeID, n, HeapBytes(rec))
}

// Commit writes a reconciled volume's next state to disk, its new copies already written (the
// package comment's steps): the pod's view rebuilt from the copies as view says, then the record
// saved, last, so a crash leaves the old record with a view the next reconcile rebuilds. A
// failure leaves the volume charged what its tmpfs holds and its view marked as one the record
// may not describe (rewriteUnsaved). It returns the paths two shares both provide, for the caller
// to report. The caller holds the volume's lock.
func (s *Store) Commit(next Record, view ViewChange, rw *Rewrite, crash crashpoint.Points) ([]Conflict, error) {
	var conflicts []Conflict
	if view != ViewUnchanged {
		// The crash points are a change's steps (test/e2e/api/crash_test.go); a rebuild that
		// changes nothing has none.
		if view.ChangesFiles() {
			crashpoint.Reached(crash, crashpoint.ReconcileCopies)
		}
		var kept bool
		var err error
		if conflicts, kept, err = s.DirOf(next).RebuildView(next.Shown(), view == ViewReplacedKept); err != nil { // (1)
			s.rewriteUnsaved(next, rw) // the old view still links the old copies' files, beside the new copies
			return nil, err
		}
		if view.ChangesFiles() {
			crashpoint.Reached(crash, crashpoint.ReconcileData)
		}
		// (2) The view replaced is kept for readers still on it, or gone (with any kept before).
		next.KeptBytes = 0
		if kept {
			next.KeptBytes = rw.keptViewCost()
		}
	}
	if err := s.saveRewritten(next, view, rw); err != nil { // (3)
		return nil, err
	}
	return conflicts, nil
}

// saveRewritten saves a reconciled volume's record, next, and keeps the store's account of its
// disk in step either way: view is what the reconcile did to the pod's view, rw what it wrote.
// Saved: a rebuilt view is verified (viewVerified). Not saved: rewriteUnsaved.
func (s *Store) saveRewritten(next Record, view ViewChange, rw *Rewrite) error {
	if err := s.Save(next); err != nil {
		s.rewriteUnsaved(next, rw)
		return err
	}
	if view != ViewUnchanged {
		s.viewVerified(next.VolumeID)
	}
	return nil
}

// rewriteUnsaved notes a reconcile that wrote the volume's next state, next, to its tmpfs but
// could not save the record naming it: its view could not be rebuilt from the new copies, or the
// record could not be saved after. The volume is charged what its tmpfs holds, measured
// (rw.unsaved). Its view is one the saved record may not describe (a rebuilt view shows next; a
// failed rebuild may have swapped ..data before failing), so the next reconcile rebuilds it even
// if its verdict is "as it is", and keeps no view for readers until then (viewUnsaved).
func (s *Store) rewriteUnsaved(next Record, rw *Rewrite) {
	m, err := s.DirOf(next).Measure()
	if err != nil {
		klog.ErrorS(err, "Measuring a volume's tmpfs failed; it is charged its new copies on top of its last charge", "volumeID", next.VolumeID)
	}
	rw.unsaved(m.Held, err)
	s.viewUnsaved(next.VolumeID)
	s.mu.Lock()
	delete(s.counted, next.VolumeID) // the disk changed without a save: the next count walks it
	s.mu.Unlock()
}

// ChargeUnlinkedFiles charges volume rec, on top of its record, what its tmpfs holds of files
// removed while a reader keeps them open, until the next count: no record names them, and their
// pages stay until the reader closes them (Dir.CountUnlinked counts them). The count skips
// its walk while the disk is as the last walk found it (DiskState), and no record was saved, nor
// a rewrite left unsaved, since. Where the kernel cannot say (not a tmpfs), or the walk fails
// (logged), the charge stays as it is.
func (s *Store) ChargeUnlinkedFiles(rec Record) {
	s.mu.Lock()
	last := s.counted[rec.VolumeID]
	s.mu.Unlock()
	now, unlinked, counted, err := s.DirOf(rec).CountUnlinked(len(rec.Shares), last)
	if err != nil {
		klog.ErrorS(err, "Measuring a volume's tmpfs failed; files removed while kept open are charged as last counted", "volumeID", rec.VolumeID)
		return
	}
	if counted {
		s.chargeUnlinked(rec.VolumeID, now, unlinked)
	}
}

// chargeUnlinked charges volume id unlinked bytes (Usage.Beyond), counted on the disk in
// state now, and remembers that state as walked.
func (s *Store) chargeUnlinked(id string, now DiskState, unlinked int64) {
	s.mu.Lock()
	s.counted[id] = now
	s.mu.Unlock()
	s.budget.ChargeUnlinked(id, unlinked)
}

// ViewChange is what a reconcile does to the pod's view.
type ViewChange int

const (
	// ViewUnchanged means no file changed, and the view is the record's; it stays.
	ViewUnchanged ViewChange = iota
	// ViewRebuilt means no file changed, but the view was not verified since the volume was
	// recovered (ViewUnverified); it is rebuilt from the copies, changing nothing the record says.
	ViewRebuilt
	// ViewReplaced means files changed; the view is rebuilt, and the one it replaces dropped.
	ViewReplaced
	// ViewReplacedKept means files changed by refreshes alone; the view is rebuilt, and the one it
	// replaces kept for readers still on it (Dir.RebuildView), charged in the record.
	ViewReplacedKept
)

// ChangesFiles says whether the files the pod sees change (a change's steps: crash points).
func (v ViewChange) ChangesFiles() bool { return v >= ViewReplaced }

// Forget drops a volume from memory and frees its bytes; its record goes away with its tmpfs.
// An unknown volume: nothing.
func (s *Store) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget.ChargeSaved(id, 0, 0)
	delete(s.vols, id)
	delete(s.unverified, id)
	delete(s.counted, id)
}

// Remember puts a record loaded at start into memory, charged whether it fits or not (the
// volume exists); its view is unverified until a reconcile rebuilds it (viewVerified). It is
// charged what its tmpfs holds, measured, when that is more than the record says, until the next
// save: earlier versions wrote records indented (larger), and a reconcile that failed before this
// start (or a crash in one) may have left copies or a view the record does not name.
func (s *Store) Remember(rec Record) {
	n := RecordedBytes(rec)
	if fi, err := os.Stat(s.RecordPath(rec.VolumeID)); err == nil {
		n += max(0, Pages(fi.Size())-RecordPages(rec))
	}
	s.keepCharging(rec, n)
	vol := s.DirOf(rec)
	disk, counted := vol.State(len(rec.Shares))
	if m, err := vol.Measure(); err != nil {
		klog.ErrorS(err, "Measuring a volume's tmpfs failed; it is charged what its record says", "volumeID", rec.VolumeID)
	} else {
		s.budget.ChargeUnsaved(rec.VolumeID, m.Held+HeapBytes(rec))
		// Files a reader kept open across the restart are still held: charged now, before the
		// first relist reaches the volume and before any publish is admitted.
		if counted {
			s.chargeUnlinked(rec.VolumeID, disk, disk.Usage.Beyond(m.Seen))
		}
	}
	s.mu.Lock()
	s.unverified[rec.VolumeID] = true
	s.mu.Unlock()
}

// ViewUnverified says whether the volume's view has not been rebuilt since it was recovered.
func (s *Store) ViewUnverified(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unverified[id]
}

// viewUnsaved records that the volume's view was swapped but its record could not be saved: as
// after a crash, the record no longer describes the view until a reconcile rebuilds it.
func (s *Store) viewUnsaved(id string) {
	s.mu.Lock()
	s.unverified[id] = true
	s.mu.Unlock()
}

// viewVerified records that the volume's view was rebuilt from its saved record.
func (s *Store) viewVerified(id string) {
	s.mu.Lock()
	delete(s.unverified, id)
	s.mu.Unlock()
}

// ReadRecord reads and checks one volume's record.
func (s *Store) ReadRecord(id string) (Record, error) {
	var rec Record
	b, err := os.ReadFile(s.RecordPath(id))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("corrupt record: %w", err)
	}
	if rec.VolumeID != id {
		return rec, fmt.Errorf("corrupt record: it names volume %q", rec.VolumeID)
	}
	if len(rec.Shares) == 0 || rec.TargetPath == "" || rec.PodUID == "" {
		return rec, errors.New("corrupt record: missing fields")
	}
	for _, sh := range rec.Shares {
		if !sh.Kind.Known() || !share.ValidName(sh.Name) {
			return rec, errors.New("corrupt record: invalid share")
		}
	}
	return rec, nil
}

// VolumeIDsOnDisk lists the entries of the volumes dir that are valid volume ids; anything else
// there was not made by this driver and is left alone.
func (s *Store) VolumeIDsOnDisk() ([]string, error) {
	entries, err := os.ReadDir(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// RecordPath is where volume id's record lives: inside its tmpfs.
func (s *Store) RecordPath(id string) string {
	return filepath.Join(s.MountPoint(id), RecordFile)
}

// writeRecord replaces rec's record.json atomically: a crash leaves the old record or the new one.
// It returns the record's size, for the budget (volumeBytesSized), which would otherwise encode
// the record again to learn it. The caller holds the volume's lock, or runs before the driver
// serves (recovery): one save at a time per volume (Dir.WriteRecord).
func (s *Store) writeRecord(rec Record) (size int64, err error) {
	b, err := EncodeRecord(rec)
	if err != nil {
		return 0, err
	}
	if err := s.DirOf(rec).WriteRecord(b); err != nil {
		return 0, fmt.Errorf("saving record of volume %s: %w", rec.VolumeID, err)
	}
	return int64(len(b)), nil
}

// idPattern is what a volume id may be made of. The kubelet's ids for inline volumes look like
// "csi-<sha256 hex>".
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidID says whether id is a single, harmless path segment, as a volume id must be: it names
// the volume's directory under the store's, and "..", "/" or a leading dot would let a caller
// escape or collide with the store's own files.
func ValidID(id string) bool {
	return id != "" && len(id) <= 128 && idPattern.MatchString(id) && !strings.Contains(id, "..")
}
