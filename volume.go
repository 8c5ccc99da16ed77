package main

// The volume on disk, and its one owner. Publish, reconcile, unpublish and recovery call down
// into this file for everything about a volume on the node: making it (createVolume), taking it
// off (teardown), cleaning a dir that holds no usable record (cleanOrphan), measuring one a
// previous run left (countRecovered), and writing its directory (volumeDir). Below it: the
// volume's record in the store (records.go, which charges the node's budget: budget.go), its
// target and bind (target.go), and the mounts (tmpfs.go). Every step acts only on what the
// driver made: its own bind (checked by device and inode), its own target dir, its own tmpfs.
//
// A volume's directory: the tmpfs mounted at <state dir>/volumes/<volume id>, and what it holds.
//
//	record.json   the volume's record (records.go): names and flags, never data
//	shares/<i>/   share i's copy: its files as last fetched, out of the pod's view
//	data/         the pod's view, bind-mounted read-only onto the target
//
// A share's copy is what it shows while it is granted, and what comes back after a revocation.
// The view is composed from the copies of the shares the pod may see (composeFiles: the first
// share listed wins a path), and its files are hard links to the copies' files, so a volume's
// bytes are held in memory once. volumeDir is the only code that writes the copies and the
// only code that builds the view: publish builds it from the copies it has just written, a
// reconcile rebuilds it from the copies on disk, through the same writeView.
//
// Every directory is written by internal/atomicwriter, so a reader (or a crash) sees a whole old
// or a whole new set of files. Writes to one volume are serialized by its lock (volumeLocks).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

const (
	recordFile = "record.json"
	dataDir    = "data"   // the pod's view
	sharesDir  = "shares" // shares/<i>: share i's copy
)

// volumeDir is one volume's directory. Get one from volumeStore.dirOf.
type volumeDir struct {
	dir string // the tmpfs's mount point
	gid int    // the group owning the files written (the pod's fsGroup), or -1 (atomicwriter.Writer.GID)
}

func (l volumeDir) dataDir() string { return filepath.Join(l.dir, dataDir) }
func (l volumeDir) shareDir(i int) string {
	return filepath.Join(l.dir, sharesDir, strconv.Itoa(i))
}

// volumeView is a pod's view composed from the shares' files, not yet written.
type volumeView struct {
	files map[string]atomicwriter.File // path -> file: what data/ will hold
	// conflicts are the paths two shares both provide; the earlier share has each of them.
	conflicts []pathConflict
	// perShare is each share's files (nil for a share not shown): the copies the view's files
	// are linked from.
	perShare []map[string]atomicwriter.File
}

// composeView composes the view of shares (the volume's, in its order) from each one's files;
// perShare[i] is nil for a share that contributes nothing (revoked).
func composeView(shares []shareRef, perShare []map[string]atomicwriter.File) volumeView {
	files, conflicts := composeFiles(shares, perShare)
	return volumeView{files: files, conflicts: conflicts, perShare: perShare}
}

// populate fills a new volume: every share's copy, then the view linked from them. (The writer
// creates shares/ with the first copy.)
func (l volumeDir) populate(v volumeView) error {
	for i, files := range v.perShare {
		if err := l.writeCopy(i, files); err != nil {
			return err
		}
	}
	return l.writeView(v)
}

// writeCopy replaces share i's copy with files; nil empties it.
func (l volumeDir) writeCopy(i int, files map[string]atomicwriter.File) error {
	return atomicwriter.Writer{Dir: l.shareDir(i), GID: l.gid}.Write(files)
}

// writeView makes data/ hold exactly v's files, in one atomic swap. Each file is a hard link to
// the same file in a share's copy (atomicwriter.Writer.Origins): the first share whose copy has
// it with the same mode and bytes (a share that lost the path to an earlier one in composeFiles
// holds other bytes there, or the same ones). The writer writes a file it cannot link.
func (l volumeDir) writeView(v volumeView) error {
	origins := make(map[string]string, len(v.files))
	for p, f := range v.files {
		for i, copied := range v.perShare {
			if c, ok := copied[p]; ok && c.Mode == f.Mode && bytes.Equal(c.Data, f.Data) {
				origins[p] = l.shareDir(i)
				break
			}
		}
	}
	return atomicwriter.Writer{Dir: l.dataDir(), GID: l.gid, Origins: origins}.Write(v.files)
}

// rebuildView composes the view again from the copies on disk of the shares not revoked, and
// writes it. It returns the paths two shares both provide, for the caller to report.
func (l volumeDir) rebuildView(shares []shareState) ([]pathConflict, error) {
	specs := make([]shareRef, len(shares))
	perShare := make([]map[string]atomicwriter.File, len(shares))
	for i, st := range shares {
		specs[i] = st.shareRef
		if st.Revoked {
			continue
		}
		files, err := atomicwriter.ReadFiles(l.shareDir(i))
		if err != nil {
			return nil, err
		}
		perShare[i] = files
	}
	v := composeView(specs, perShare)
	return v.conflicts, l.writeView(v)
}

// dropRevokedCopies empties the copies of the revoked shares of a refreshing volume: a restore
// fetches fresh data anyway, so revoked bytes are not kept. (A refreshResource=false share keeps
// its copy: it is exactly what comes back.) Call it only with a record already saved, so that a
// crash never leaves a granted share with an empty copy.
func (l volumeDir) dropRevokedCopies(rec volumeRecord) {
	if !rec.Refresh {
		return
	}
	for i, st := range rec.Shares {
		if st.Revoked {
			if err := l.writeCopy(i, nil); err != nil {
				klog.ErrorS(err, "Emptying a revoked share's copy failed", "volumeID", rec.VolumeID)
			}
		}
	}
}

// createVolume makes a fetched volume on the node, in these steps:
//
//	(0) room for its bytes, reserved in the node's volume budget (budget.go) until the record,
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
// as before. A crash test kills the driver after each step (crashsteps.go).
func (d *driver) createVolume(rec volumeRecord, view volumeView) error {
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
	room := d.budget.reservation()
	defer room.release()
	if err := room.take(volumeBytes(rec)); err != nil {
		return status.Errorf(codes.ResourceExhausted, "volume %s cannot be published on this node: %v", rec.VolumeID, err)
	}
	vol := d.store.dirOf(rec)
	// (1)
	if err := d.prepareVolumeDir(vol.dir); err != nil {
		return status.Errorf(codes.Internal, "creating volume dir: %v", err)
	}
	undo = append(undo, func() { removeDirLogged(vol.dir) })
	d.crash.reached(stepPublishDir)
	// (2)
	if err := d.mounter.mountTmpfs(vol.dir, d.tmpfsSize, rec.MountContext); err != nil {
		if rec.MountContext != "" {
			return status.Errorf(codes.FailedPrecondition, "mounting tmpfs for volume %s with the SELinux option %s failed (is SELinux enabled on this node?): %v", rec.VolumeID, rec.MountContext, err)
		}
		return status.Errorf(codes.Internal, "mounting tmpfs for volume %s: %v", rec.VolumeID, err)
	}
	undo = append(undo, func() { d.unmountLogged(vol.dir) })
	d.crash.reached(stepPublishTmpfs)
	// (3)
	if err := vol.populate(view); err != nil {
		return writeError(rec.VolumeID, d.tmpfsSize, err)
	}
	d.crash.reached(stepPublishData)
	// (4)
	exists, err := d.checkTarget(rec.TargetPath)
	if err != nil {
		return err
	}
	rec.CreatedTarget = !exists
	if err := d.store.save(rec); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	undo = append(undo, func() { d.store.forget(rec.VolumeID) }) // and its bytes
	d.crash.reached(stepPublishRecord)
	// (5)
	if !exists {
		if err := createTarget(rec.TargetPath); err != nil {
			return err
		}
		undo = append(undo, func() { removeDirLogged(rec.TargetPath) })
	}
	d.crash.reached(stepPublishTarget)
	// (6)
	if err := d.mounter.bindReadOnly(vol.dataDir(), rec.TargetPath); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting volume %s onto %s: %v", rec.VolumeID, rec.TargetPath, err)
	}
	succeeded = true
	d.crash.reached(stepPublishBind)
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
		if err := os.MkdirAll(d.store.dir, 0o700); err != nil {
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
func (d *driver) teardown(rec volumeRecord) error {
	vol := d.store.dirOf(rec)
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
	d.crash.reached(stepUnpublishBind)
	if rec.CreatedTarget {
		if err := os.Remove(rec.TargetPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing target dir: %w", err)
		}
	}
	d.crash.reached(stepUnpublishTarget)
	if err := d.mounter.unmount(vol.dir); err != nil {
		return fmt.Errorf("unmounting tmpfs %s: %w", vol.dir, err)
	}
	d.crash.reached(stepUnpublishTmpfs)
	if err := os.Remove(vol.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", vol.dir, err)
	}
	d.crash.reached(stepUnpublishDir)
	d.store.forget(rec.VolumeID) // and its bytes (none for a volume cleaned at recovery: not yet counted)
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
	if tm, ok := mountAt(mounts, volDir); ok {
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
// written before shares had their bytes recorded, or before entries were charged (budget.go),
// says less than they hold. The store charges the volume as it remembers it, whether it fits or
// not (it exists). A copy that cannot be read keeps what its record says.
func (d *driver) countRecovered(rec *volumeRecord) {
	vol := d.store.dirOf(*rec)
	for i := range rec.Shares {
		if files, err := atomicwriter.ReadFiles(vol.shareDir(i)); err == nil {
			rec.Shares[i].Bytes, rec.Shares[i].Entries = chargedBytes(files), filesEntries(files)
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
