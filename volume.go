package main

// The volume on disk, and its one owner. Publish, reconcile, unpublish and recovery call down
// into this file for everything about a volume on the node: making it (createVolume), binding it
// again where it was published (ensureBind), taking it off (teardown), cleaning a dir that
// holds no usable record (cleanOrphan), measuring one a previous run left (countRecovered),
// counting the mounts the volumes hold (countMounts), and the lock that lets one operation at a
// time work on a volume (volumeLocks). Below it: the checks of the volume's target and the
// recognition of its bind (target.go); its record in the store, which charges the node's budget,
// its directory's layout, copies and view (internal/volume); and the mounts (tmpfs.go). Every step
// acts only on what the driver made: its own bind (checked by device and inode), its own target
// dir, its own tmpfs.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/mountinfo"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// createVolume makes a fetched volume on the node, in these steps:
//
//	(0) room for its bytes, reserved in the node's volume budget (internal/volume) until the record,
//	    saved, charges them (or the publish is undone);
//	(1) the volume's dir, <state dir>/volumes/<id> (a leftover of a crash is cleaned first);
//	(2) its tmpfs, size-limited;
//	(3) the shares' copies and the pod's view, written into it;
//	(4) the record, saved, saying whether the driver makes the target (before it does, so a crash
//	    between the two leaves a record that owns the directory);
//	(5) the target dir, unless the kubelet made it;
//	(6) the read-only bind of the view onto the target.
//
// Each step registers its undo; if a later step fails, the undos run in reverse and the node is
// as before. A crash test kills the driver after each step (internal/crashpoint).
func (d *driver) createVolume(rec volume.Record, view volume.View) error {
	var undo []func()
	succeeded := false
	defer func() {
		if !succeeded {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	// (0)
	room, err := d.budget.Reserve(volume.RecordedBytes(rec))
	defer room.Release()
	if err != nil {
		return status.Errorf(codes.ResourceExhausted, "volume %s cannot be published on this node: %v", rec.VolumeID, err)
	}
	vol := d.store.DirOf(rec)
	// (1)
	if err := d.prepareVolumeDir(vol.Path); err != nil {
		return status.Errorf(codes.Internal, "creating volume dir: %v", err)
	}
	undo = append(undo, func() { removeDirLogged(vol.Path) })
	crashpoint.Reached(d.crash, crashpoint.PublishDir)
	// (2)
	if err := d.mounter.mountTmpfs(vol.Path, d.tmpfsSize, rec.MountContext); err != nil {
		if rec.MountContext != "" {
			return status.Errorf(codes.FailedPrecondition, "mounting tmpfs for volume %s with the SELinux option %s failed (is SELinux enabled on this node?): %v", rec.VolumeID, rec.MountContext, err)
		}
		return status.Errorf(codes.Internal, "mounting tmpfs for volume %s: %v", rec.VolumeID, err)
	}
	undo = append(undo, func() { d.unmountLogged(vol.Path) })
	crashpoint.Reached(d.crash, crashpoint.PublishTmpfs)
	// (3)
	if err := vol.Populate(view); err != nil {
		return writeError(rec.VolumeID, d.tmpfsSize, err)
	}
	crashpoint.Reached(d.crash, crashpoint.PublishData)
	// (4)
	exists, err := checkTarget(d.kubeletRoot, rec.TargetPath)
	if err != nil {
		return err
	}
	rec.CreatedTarget = !exists
	if err := d.store.Save(rec); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	undo = append(undo, func() { d.store.Forget(rec.VolumeID) }) // and its bytes
	crashpoint.Reached(d.crash, crashpoint.PublishRecord)
	// (5)
	if !exists {
		if err := createTarget(rec.TargetPath); err != nil {
			return err
		}
		undo = append(undo, func() { removeDirLogged(rec.TargetPath) })
	}
	crashpoint.Reached(d.crash, crashpoint.PublishTarget)
	// (6)
	if err := d.mounter.bindReadOnly(vol.ViewPath(), rec.TargetPath); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting volume %s onto %s: %v", rec.VolumeID, rec.TargetPath, err)
	}
	succeeded = true
	crashpoint.Reached(d.crash, crashpoint.PublishBind)
	return nil
}

// ensureBind makes a repeated publish succeed: the volume exists; its bind may be missing if the
// driver stopped between saving the record and mounting.
func (d *driver) ensureBind(rec volume.Record) error {
	mounts, err := d.mounter.mounts()
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	vol := d.store.DirOf(rec)
	if isOurBind(mounts, vol, rec.TargetPath) {
		if e, _ := mountinfo.At(mounts, rec.TargetPath); hasOption(e.Options, "ro") {
			return nil
		}
		// A writable bind of ours (made by a version that bound, then remounted read-only: the
		// remount does not propagate out of the driver's container) is replaced.
		klog.InfoS("Replacing a writable bind of the volume with a read-only one", "volumeID", rec.VolumeID)
		if err := d.mounter.unmount(rec.TargetPath); err != nil {
			return status.Errorf(codes.Internal, "unmounting the writable bind at %s: %v", rec.TargetPath, err)
		}
		mounts, err = d.mounter.mounts()
		if err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
	}
	if e, ok := mountinfo.At(mounts, rec.TargetPath); ok {
		return status.Errorf(codes.FailedPrecondition, "target_path %q already has another mount (%s %s)", rec.TargetPath, e.FSType, e.Source)
	}
	exists, err := checkTarget(d.kubeletRoot, rec.TargetPath)
	if err != nil {
		return err
	}
	if !exists {
		if !rec.CreatedTarget {
			rec.CreatedTarget = true
			if err := d.store.Save(rec); err != nil {
				return status.Errorf(codes.Internal, "%v", err)
			}
		}
		if err := createTarget(rec.TargetPath); err != nil {
			return err
		}
	}
	if err := d.mounter.bindReadOnly(vol.ViewPath(), rec.TargetPath); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting volume %s onto %s: %v", rec.VolumeID, rec.TargetPath, err)
	}
	return nil
}

func writeError(volumeID string, limit int64, err error) error {
	if errors.Is(err, unix.ENOSPC) {
		return status.Errorf(codes.ResourceExhausted, "writing volume %s: the tmpfs size limit of %d bytes is too small (raise --tmpfs-size): %v", volumeID, limit, err)
	}
	return status.Errorf(codes.Internal, "writing volume %s: %v", volumeID, err)
}

// prepareVolumeDir creates the volume's directory. A directory left by an earlier crash holds no
// live volume (every live volume is in the store), so it is cleaned first.
func (d *driver) prepareVolumeDir(volDir string) error {
	err := os.Mkdir(volDir, 0o700)
	if errors.Is(err, os.ErrNotExist) { // the volumes dir itself: made once, not stat'ed per publish
		if err := os.MkdirAll(d.store.Path(), 0o700); err != nil {
			return err
		}
		err = os.Mkdir(volDir, 0o700)
	}
	if errors.Is(err, os.ErrExist) {
		klog.InfoS("Removing leftover volume dir", "dir", volDir)
		d.cleanOrphan(volDir)
		err = os.Mkdir(volDir, 0o700)
	}
	return err
}

// teardown undoes a published volume in the reverse order of publish. Each step acts only on
// what the driver made: its own bind (checked by device), its own target dir, its own tmpfs.
func (d *driver) teardown(rec volume.Record) error {
	vol := d.store.DirOf(rec)
	for {
		ours, err := d.bindIsOurs(vol, rec.TargetPath)
		if err != nil {
			return err
		}
		if !ours {
			break
		}
		if err := d.mounter.unmount(rec.TargetPath); err != nil {
			return fmt.Errorf("unmounting %s: %w", rec.TargetPath, err)
		}
	}
	crashpoint.Reached(d.crash, crashpoint.UnpublishBind)
	if rec.CreatedTarget {
		if err := os.Remove(rec.TargetPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing target dir: %w", err)
		}
	}
	crashpoint.Reached(d.crash, crashpoint.UnpublishTarget)
	if err := d.mounter.unmount(vol.Path); err != nil {
		return fmt.Errorf("unmounting tmpfs %s: %w", vol.Path, err)
	}
	crashpoint.Reached(d.crash, crashpoint.UnpublishTmpfs)
	if err := os.Remove(vol.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", vol.Path, err)
	}
	crashpoint.Reached(d.crash, crashpoint.UnpublishDir)
	d.store.Forget(rec.VolumeID) // and its bytes (none for a volume cleaned at recovery: not yet counted)
	return nil
}

// cleanOrphan removes a volume dir that has no usable record: any bind of its tmpfs under the
// kubelet's pods dir (recognised by device and root), then the tmpfs, then the empty dir.
func (d *driver) cleanOrphan(volDir string) {
	mounts, err := d.mounter.mounts()
	if err != nil {
		klog.ErrorS(err, "Cannot read mounts; leaving orphan volume dir", "dir", volDir)
		return
	}
	if tm, ok := mountinfo.At(mounts, volDir); ok {
		podsDir := filepath.Join(d.kubeletRoot, "pods") + "/"
		for _, m := range mounts {
			if m.MajorMinor == tm.MajorMinor && isDataRoot(m.Root) && strings.HasPrefix(m.MountPoint, podsDir) &&
				validateTargetPath(d.kubeletRoot, m.MountPoint, "") == nil {
				d.unmountLogged(m.MountPoint)
				// The directory held the driver's own bind (the driver creates targets; the
				// kubelet only their parents). Remove, not RemoveAll: only if it is empty.
				removeDirLogged(m.MountPoint)
			}
		}
		d.unmountLogged(volDir)
	}
	// Remove, not RemoveAll: if anything is still in there, it is not ours to delete.
	removeDirLogged(volDir)
}

// countRecovered measures what a resumed volume's shares cost from their copies: a record
// written before shares had their bytes recorded, or before entries were charged (internal/volume),
// says less than they hold. The store charges the volume as it remembers it, whether it fits or
// not (it exists). A copy that cannot be read keeps what its record says.
func (d *driver) countRecovered(rec *volume.Record) {
	vol := d.store.DirOf(*rec)
	for i := range rec.Shares {
		if files, err := atomicwriter.ReadFiles(vol.CopyPath(i)); err == nil {
			rec.Shares[i].Bytes, rec.Shares[i].Entries = volume.ChargedBytes(files), volume.FilesEntries(files)
		}
	}
}

func (d *driver) unmountLogged(p string) {
	if err := d.mounter.unmount(p); err != nil {
		klog.ErrorS(err, "Unmount failed", "path", p)
	}
}

func removeDirLogged(p string) {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Removing dir failed", "path", p)
	}
}

// dropRevokedCopies empties the copies of the revoked shares of a refreshing volume: a restore
// fetches fresh data anyway, so revoked bytes are not kept. (A refreshResource=false share keeps
// its copy: it is exactly what comes back.) Call it only with a record already saved, so that a
// crash never leaves a granted share with an empty copy.
func dropRevokedCopies(vd volume.Dir, rec volume.Record) {
	if !rec.Refresh {
		return
	}
	for i, st := range rec.Shares {
		if st.Told.Hidden() {
			if err := vd.WriteCopy(i, nil); err != nil {
				klog.ErrorS(err, "Emptying a revoked share's copy failed", "volumeID", rec.VolumeID)
			}
		}
	}
}

// volumeLocks lets one operation at a time work on a volume. Callers that find the lock held
// get Aborted (the kubelet retries), rather than queueing behind a slow operation.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]struct{}
}

func newVolumeLocks() *volumeLocks { return &volumeLocks{held: map[string]struct{}{}} }

// tryLock takes id's lock, and returns its release; ok is false (and there is nothing to
// release) when an operation holds it.
func (l *volumeLocks) tryLock(id string) (unlock func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[id]; busy {
		return nil, false
	}
	l.held[id] = struct{}{}
	return func() { l.unlock(id) }, true
}

func (l *volumeLocks) unlock(id string) {
	l.mu.Lock()
	delete(l.held, id)
	l.mu.Unlock()
}

// countMounts counts the mounts the driver holds: each volume's tmpfs and its binds.
func (d *driver) countMounts() int {
	mounts, err := d.mounter.mounts()
	if err != nil {
		return -1
	}
	devices := map[string]bool{}
	prefix := d.store.Path() + "/"
	n := 0
	for _, m := range mounts {
		if strings.HasPrefix(m.MountPoint, prefix) && m.FSType == "tmpfs" {
			devices[m.MajorMinor] = true
			n++
		}
	}
	for _, m := range mounts {
		if devices[m.MajorMinor] && !strings.HasPrefix(m.MountPoint, prefix) {
			n++
		}
	}
	return n
}
