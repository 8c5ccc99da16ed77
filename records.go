package main

// The set of volumes this node serves, and what the driver remembers of each: its record
// (volumerecord.go). Each record lives inside the volume's own tmpfs (volumes/<id>/record.json,
// see volume.go), so it exists exactly as long as the volume does: it survives a driver restart,
// disappears with the tmpfs on unpublish or reboot (when the pods are gone too), and can never be
// left behind on the host disk.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// volumeStore keeps the published volumes in memory and persists each record in its volume.
// What it charges the node's volume budget for a volume (budget.go) is the bytes of the record
// it saved (volumeBytes), from the save until the volume is forgotten; more when its tmpfs holds
// more than the record says (rewriteUnsaved, remember), and the files no name leads to on top
// (chargeUnlinkedFiles).
type volumeStore struct {
	dir    string // <state dir>/volumes
	budget *volume.Budget
	mu     sync.Mutex
	vols   map[string]volumeRecord
	// unverified are the volumes recovered at start whose pod's view has not been rebuilt
	// since: a crash between a reconcile's swap of the view and its save of the record leaves
	// a view the record does not describe (the record is saved last), and only a rebuild from
	// fresh verdicts puts them back in step. A save that fails after the swap does the same
	// (viewUnsaved).
	unverified map[string]bool
	// counted is, per volume, the disk's state read just before its last walk for files removed
	// but kept open (chargeUnlinkedFiles; remember at start); dropped by a save, or a rewrite
	// left unsaved, which change the disk, and by forget.
	counted map[string]volume.DiskState
}

func newVolumeStore(stateDir string, budget *volume.Budget) *volumeStore {
	return &volumeStore{dir: filepath.Join(stateDir, "volumes"), budget: budget,
		vols: map[string]volumeRecord{}, unverified: map[string]bool{}, counted: map[string]volume.DiskState{}}
}

// mountPoint is where the volume's tmpfs is mounted. id has passed validateVolumeID.
func (s *volumeStore) mountPoint(id string) string { return filepath.Join(s.dir, id) }

// dirOf is rec's volume directory, writing files with rec's group.
func (s *volumeStore) dirOf(rec volumeRecord) volume.Dir {
	return volume.Dir{Path: s.mountPoint(rec.VolumeID), GID: rec.GID}
}

// clone copies the record with a Shares slice of its own. The store hands out and keeps only
// clones, so its copy changes only by save, once the disk has: a reconcile builds the next record
// on a clone, and one that fails half-way must be retried whole by the next cycle, not find its
// revocation already "done" in memory while the disk and the pod's view still show the share
// (the next cycle would then never rebuild the view). (Items is never changed after publish.)
func (r volumeRecord) clone() volumeRecord {
	r.Shares = slices.Clone(r.Shares)
	return r
}

func (s *volumeStore) get(id string) (volumeRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.vols[id]
	return r.clone(), ok
}

// list returns the records sorted by volume id, so cycles process volumes in a stable order.
func (s *volumeStore) list() []volumeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]volumeRecord, 0, len(s.vols))
	for _, r := range s.vols {
		out = append(out, r.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out
}

func (s *volumeStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.vols)
}

// save persists rec atomically (temp file, rename) and then updates memory and the budget's
// charge for the volume, so neither claims a state the disk does not have: a save that fails
// changes nothing.
func (s *volumeStore) save(rec volumeRecord) error {
	size, err := s.writeRecord(rec)
	if err != nil {
		return err
	}
	s.keepCharging(rec, volumeBytesSized(rec, size))
	return nil
}

// keepCharging puts rec in memory, charged n bytes in place of the volume's previous charge (its
// previous record's, or an unsaved charge: rec describes the disk now).
func (s *volumeStore) keepCharging(rec volumeRecord, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vols[rec.VolumeID] = rec.clone()
	delete(s.counted, rec.VolumeID) // a save changed the disk: the next count walks it again
	s.budget.ChargeSaved(rec.VolumeID, n, recordHeapBytes(rec))
}

// saveRewritten saves a reconciled volume's record, next, and keeps the store's account of its
// disk in step either way: view is what the reconcile did to the pod's view, rw what it wrote.
// Saved: a rebuilt view is verified (viewVerified). Not saved: rewriteUnsaved.
func (s *volumeStore) saveRewritten(next volumeRecord, view viewChange, rw *volumeRewrite) error {
	if err := s.save(next); err != nil {
		s.rewriteUnsaved(next, rw)
		return err
	}
	if view != viewUnchanged {
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
func (s *volumeStore) rewriteUnsaved(next volumeRecord, rw *volumeRewrite) {
	m, err := s.dirOf(next).Measure()
	if err != nil {
		klog.ErrorS(err, "Measuring a volume's tmpfs failed; it is charged its new copies on top of its last charge", "volumeID", next.VolumeID)
	}
	rw.unsaved(m.Held, err)
	s.viewUnsaved(next.VolumeID)
	s.mu.Lock()
	delete(s.counted, next.VolumeID) // the disk changed without a save: the next count walks it
	s.mu.Unlock()
}

// chargeUnlinkedFiles charges volume rec, on top of its record, what its tmpfs holds of files
// removed while a reader keeps them open, until the next count: no record names them, and their
// pages stay until the reader closes them (volume.Dir.CountUnlinked counts them). The count skips
// its walk while the disk is as the last walk found it (volume.DiskState), and no record was saved, nor
// a rewrite left unsaved, since. Where the kernel cannot say (not a tmpfs), or the walk fails
// (logged), the charge stays as it is.
func (s *volumeStore) chargeUnlinkedFiles(rec volumeRecord) {
	s.mu.Lock()
	last := s.counted[rec.VolumeID]
	s.mu.Unlock()
	now, unlinked, counted, err := s.dirOf(rec).CountUnlinked(len(rec.Shares), last)
	if err != nil {
		klog.ErrorS(err, "Measuring a volume's tmpfs failed; files removed while kept open are charged as last counted", "volumeID", rec.VolumeID)
		return
	}
	if counted {
		s.chargeUnlinked(rec.VolumeID, now, unlinked)
	}
}

// chargeUnlinked charges volume id unlinked bytes (volume.Usage.beyond), counted on the disk in
// state now, and remembers that state as walked.
func (s *volumeStore) chargeUnlinked(id string, now volume.DiskState, unlinked int64) {
	s.mu.Lock()
	s.counted[id] = now
	s.mu.Unlock()
	s.budget.ChargeUnlinked(id, unlinked)
}

// viewChange is what a reconcile does to the pod's view.
type viewChange int

const (
	// viewUnchanged: no file changed, and the view is the record's; it stays.
	viewUnchanged viewChange = iota
	// viewRebuilt: no file changed, but the view was not verified since the volume was
	// recovered (viewUnverified); it is rebuilt from the copies, changing nothing the record says.
	viewRebuilt
	// viewReplaced: files changed; the view is rebuilt, and the one it replaces dropped.
	viewReplaced
	// viewReplacedKept: files changed by refreshes alone; the view is rebuilt, and the one it
	// replaces kept for readers still on it (internal/volume), charged in the record.
	viewReplacedKept
)

// changesFiles says whether the files the pod sees change (a change's steps: crash points).
func (v viewChange) changesFiles() bool { return v >= viewReplaced }

// forget drops a volume from memory and frees its bytes; its record goes away with its tmpfs.
// An unknown volume: nothing.
func (s *volumeStore) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget.ChargeSaved(id, 0, 0)
	delete(s.vols, id)
	delete(s.unverified, id)
	delete(s.counted, id)
}

// remember puts a record loaded at start into memory, charged whether it fits or not (the
// volume exists); its view is unverified until a reconcile rebuilds it (viewVerified). It is
// charged what its tmpfs holds, measured, when that is more than the record says, until the next
// save: earlier versions wrote records indented (larger), and a reconcile that failed before this
// start (or a crash in one) may have left copies or a view the record does not name.
func (s *volumeStore) remember(rec volumeRecord) {
	n := volumeBytes(rec)
	if fi, err := os.Stat(s.recordPath(rec.VolumeID)); err == nil {
		n += max(0, volume.Pages(fi.Size())-recordPages(rec))
	}
	s.keepCharging(rec, n)
	vol := s.dirOf(rec)
	disk, counted := vol.State(len(rec.Shares))
	if m, err := vol.Measure(); err != nil {
		klog.ErrorS(err, "Measuring a volume's tmpfs failed; it is charged what its record says", "volumeID", rec.VolumeID)
	} else {
		s.budget.ChargeUnsaved(rec.VolumeID, m.Held+recordHeapBytes(rec))
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

// viewUnverified says whether the volume's view has not been rebuilt since it was recovered.
func (s *volumeStore) viewUnverified(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unverified[id]
}

// viewUnsaved records that the volume's view was swapped but its record could not be saved: as
// after a crash, the record no longer describes the view until a reconcile rebuilds it.
func (s *volumeStore) viewUnsaved(id string) {
	s.mu.Lock()
	s.unverified[id] = true
	s.mu.Unlock()
}

// viewVerified records that the volume's view was rebuilt from its saved record.
func (s *volumeStore) viewVerified(id string) {
	s.mu.Lock()
	delete(s.unverified, id)
	s.mu.Unlock()
}

// readRecord reads and checks one volume's record.
func (s *volumeStore) readRecord(id string) (volumeRecord, error) {
	var rec volumeRecord
	b, err := os.ReadFile(s.recordPath(id))
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

// volumeIDsOnDisk lists the entries of the volumes dir that are valid volume ids; anything else
// there was not made by this driver and is left alone.
func (s *volumeStore) volumeIDsOnDisk() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && validateVolumeID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// recordPath is where volume id's record lives: inside its tmpfs.
func (s *volumeStore) recordPath(id string) string {
	return filepath.Join(s.mountPoint(id), volume.RecordFile)
}

// writeRecord replaces rec's record.json atomically: a crash leaves the old record or the new one.
// It returns the record's size, for the budget (volumeBytesSized), which would otherwise encode
// the record again to learn it. The caller holds the volume's lock, or runs before the driver
// serves (recovery): one save at a time per volume (volume.Dir.WriteRecord).
func (s *volumeStore) writeRecord(rec volumeRecord) (size int64, err error) {
	b, err := encodeRecord(rec)
	if err != nil {
		return 0, err
	}
	if err := s.dirOf(rec).WriteRecord(b); err != nil {
		return 0, fmt.Errorf("saving record of volume %s: %w", rec.VolumeID, err)
	}
	return int64(len(b)), nil
}
