package main

// The life of a volume on the node: publish, unpublish, and recovery at start. csi.go validates
// requests and takes the per-volume lock; this file does the steps in order and undoes exactly
// the steps that ran when one fails.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// reservedBytes is tmpfs room kept for the record and directory entries.
const reservedBytes = 64 << 10

// volumeLocks lets one operation at a time work on a volume. Callers that find the lock held
// get Aborted (the kubelet retries), rather than queueing behind a slow operation.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]struct{}
}

func newVolumeLocks() *volumeLocks { return &volumeLocks{held: map[string]struct{}{}} }

func (l *volumeLocks) tryLock(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[id]; busy {
		return false
	}
	l.held[id] = struct{}{}
	return true
}

func (l *volumeLocks) unlock(id string) {
	l.mu.Lock()
	delete(l.held, id)
	l.mu.Unlock()
}

// publish makes v's data visible, read-only, at its target path. The caller holds v's lock.
func (d *driver) publish(ctx context.Context, v *volumeRequest) error {
	if rec, ok := d.store.get(v.VolumeID); ok {
		if !rec.sameRequest(v) {
			return status.Errorf(codes.AlreadyExists, "volume %s is already published with other arguments (%s for pod %s/%s at %s)",
				v.VolumeID, rec.describe(), rec.PodNamespace, rec.PodName, rec.TargetPath)
		}
		return d.ensureBind(rec)
	}

	// The target's path is checked (no symlink, parents present) before any API call or mount;
	// again below, just before the driver creates it.
	if _, err := d.checkTarget(v.TargetPath); err != nil {
		return err
	}
	rec := volumeRecord{
		VolumeID: v.VolumeID, Refresh: v.Refresh,
		PodNamespace: v.PodNamespace, PodName: v.PodName, PodUID: v.PodUID, ServiceAccount: v.ServiceAccount,
		TargetPath:  v.TargetPath,
		DefaultMode: v.DefaultMode, Items: v.Items, GID: v.GID, MountContext: v.MountContext,
	}
	// Every share is checked and fetched before anything is written: a volume is published
	// whole or not at all.
	perShare := make([]map[string]atomicwriter.File, len(v.Shares))
	var size int64
	for i, spec := range v.Shares {
		sh, src, err := d.fetchShare(ctx, v, spec)
		if err != nil {
			return err
		}
		rec.Shares = append(rec.Shares, shareState{shareSpec: spec,
			SourceNamespace: sh.SourceNamespace, SourceName: sh.SourceName, ResourceVersion: src.ResourceVersion})
		if perShare[i], err = rec.project(i, src.Files); err != nil {
			return status.Errorf(codes.FailedPrecondition, "%s %s/%s cannot be shared with this volume: %v", spec.Kind, sh.SourceNamespace, sh.SourceName, err)
		}
		size += src.Size
	}
	files, conflicts := composeFiles(v.Shares, perShare)
	if len(conflicts) > 0 {
		c := conflicts[0]
		return status.Errorf(codes.FailedPrecondition, "%s and %s both provide the file %q: select and rename keys with the volumeAttribute %s",
			c.Kept, c.Dropped, c.Path, attrItems)
	}
	// Twice: each share's copy, and during an update the new copy beside the old one, which the
	// pod's view still shows until it is swapped. The view itself costs nothing: its files are
	// hard links to the copies' (atomicwriter.Writer.Origins). Should linking ever fail, the files are
	// written, and an update that then runs out of room fails and leaves the volume as it was.
	if need := 2*size + reservedBytes; need > d.tmpfsSize {
		return status.Errorf(codes.ResourceExhausted, "the shares of volume %s hold %d bytes; a volume needs twice that plus %d bytes, more than the tmpfs size limit of %d bytes (raise --tmpfs-size)",
			v.VolumeID, size, reservedBytes, d.tmpfsSize)
	}

	// Side effects start here. Each step registers its undo; on failure they run in reverse.
	var undo []func()
	succeeded := false
	defer func() {
		if !succeeded {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	volDir := d.store.volumeDir(v.VolumeID)
	if err := d.prepareVolumeDir(volDir); err != nil {
		return status.Errorf(codes.Internal, "creating volume dir: %v", err)
	}
	undo = append(undo, func() { removeDirLogged(volDir) })
	d.crash.reached(stepPublishDir)
	if err := mountTmpfs(volDir, d.tmpfsSize, v.MountContext); err != nil {
		if v.MountContext != "" {
			return status.Errorf(codes.FailedPrecondition, "mounting tmpfs for volume %s with the SELinux option %s failed (is SELinux enabled on this node?): %v", v.VolumeID, v.MountContext, err)
		}
		return status.Errorf(codes.Internal, "mounting tmpfs for volume %s: %v", v.VolumeID, err)
	}
	undo = append(undo, func() { unmountLogged(volDir) })
	d.crash.reached(stepPublishTmpfs)
	if err := d.writeShareCopies(rec, perShare); err != nil {
		return writeError(v.VolumeID, d.tmpfsSize, err)
	}
	if err := (atomicwriter.Writer{Dir: d.store.dataDir(v.VolumeID), GID: v.GID, Origins: d.shareCopyOrigins(v.VolumeID, files, perShare)}).Write(files); err != nil {
		return writeError(v.VolumeID, d.tmpfsSize, err)
	}
	d.crash.reached(stepPublishData)
	exists, err := d.checkTarget(v.TargetPath)
	if err != nil {
		return err
	}
	// The record says the driver creates the target before it does, so that a crash between
	// the two still leaves a record that owns the directory.
	rec.CreatedTarget = !exists
	if err := d.store.save(rec); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	undo = append(undo, func() { d.store.forget(v.VolumeID) })
	d.crash.reached(stepPublishRecord)
	if !exists {
		if err := createTarget(v.TargetPath); err != nil {
			return err
		}
		undo = append(undo, func() { removeDirLogged(v.TargetPath) })
	}
	d.crash.reached(stepPublishTarget)
	if err := bindReadOnly(d.store.dataDir(v.VolumeID), v.TargetPath); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting volume %s onto %s: %v", v.VolumeID, v.TargetPath, err)
	}
	succeeded = true
	d.crash.reached(stepPublishBind)
	klog.V(2).InfoS("Published volume", "volumeID", v.VolumeID, "shares", rec.describe(),
		"pod", klog.KRef(v.PodNamespace, v.PodName), "files", len(files))
	return nil
}

// fetchShare looks up one share of a publish, checks the pod may use it and GETs its source.
func (d *driver) fetchShare(ctx context.Context, v *volumeRequest, spec shareSpec) (share, *sourceData, error) {
	sh, err := d.shares.get(ctx, spec.Kind, spec.Name)
	switch {
	case apierrors.IsNotFound(err):
		return sh, nil, status.Errorf(codes.NotFound, "%s %q does not exist: a cluster admin must create it (cluster-scoped, group %s)", spec.Kind.shareTypeName(), spec.Name, shareGroup)
	case errors.As(err, new(*badShareError)):
		return sh, nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	case err != nil:
		return sh, nil, status.Errorf(codes.Unavailable, "reading %s %q, will retry: %v", spec.Kind.shareTypeName(), spec.Name, err)
	}
	key := accessKey{Namespace: v.PodNamespace, ServiceAccount: v.ServiceAccount, Kind: spec.Kind, Share: spec.Name}
	// The review and the GET of the source go out together: a cold publish then waits for the
	// slower of the two instead of their sum. The source is only handed out, and its errors
	// only reported, once access is granted: a denied pod learns nothing about it, not even
	// whether it exists. (The GET itself reveals nothing to anybody: the driver may read every
	// shared source, and what it caches stays in its memory.)
	type fetched struct {
		src *sourceData
		err error
	}
	got := make(chan fetched, 1)
	go func() {
		src, err := d.sources.get(ctx, sh.sourceKey())
		got <- fetched{src, err}
	}()
	dec, err := d.authz.check(ctx, key, false)
	f := <-got
	if apierrors.IsForbidden(err) {
		// The driver's own RBAC is wrong, not the pod's: say what the admin must fix. Still
		// never a grant; Unavailable so that the kubelet's retry succeeds once it is fixed.
		return sh, nil, status.Errorf(codes.Unavailable, "cannot check access: the driver's service account may not create "+
			"subjectaccessreviews.authorization.k8s.io; its ClusterRole (shared-resource-csi-driver in deploy.yaml) must allow it; will retry: %v", err)
	}
	if err != nil {
		// An error is never a grant.
		return sh, nil, status.Errorf(codes.Unavailable, "cannot check access, will retry: %v", err)
	}
	if !dec.Allowed {
		return sh, nil, status.Error(codes.PermissionDenied, deniedMessage(key, dec.Reason))
	}
	if f.err != nil {
		return sh, nil, sourceError(sh, f.err, d.account)
	}
	return sh, f.src, nil
}

// writeShareCopies keeps each share's files beside the data dir, out of the pod's view: they are
// what the share shows while the share is granted, and what comes back after a revocation. (The
// writer creates shares/ with the first copy.)
func (d *driver) writeShareCopies(rec volumeRecord, perShare []map[string]atomicwriter.File) error {
	for i, files := range perShare {
		if err := (atomicwriter.Writer{Dir: d.store.shareDir(rec.VolumeID, i), GID: rec.GID}).Write(files); err != nil {
			return err
		}
	}
	return nil
}

// shareCopyOrigins says, for each file of the pod's view, which share's copy holds the same file:
// the view's files are then hard links to the copies' (atomicwriter.Writer.Origins), not second copies.
// The first share whose copy has the file with the same mode and bytes is named (a share that
// lost the path to an earlier one in composeFiles holds other bytes there, or the same ones).
func (d *driver) shareCopyOrigins(volumeID string, files map[string]atomicwriter.File, perShare []map[string]atomicwriter.File) map[string]string {
	origins := make(map[string]string, len(files))
	for p, f := range files {
		for i, copied := range perShare {
			if c, ok := copied[p]; ok && c.Mode == f.Mode && bytes.Equal(c.Data, f.Data) {
				origins[p] = d.store.shareDir(volumeID, i)
				break
			}
		}
	}
	return origins
}

func writeError(volumeID string, limit int64, err error) error {
	if errors.Is(err, unix.ENOSPC) {
		return status.Errorf(codes.ResourceExhausted, "writing volume %s: the tmpfs size limit of %d bytes is too small (raise --tmpfs-size): %v", volumeID, limit, err)
	}
	return status.Errorf(codes.Internal, "writing volume %s: %v", volumeID, err)
}

// sourceError maps a failed GET of a share's source to the code the kubelet should see.
func sourceError(sh share, err error, account driverAccount) error {
	what := fmt.Sprintf("%s %s/%s (referenced by %s %q)", sh.Kind, sh.SourceNamespace, sh.SourceName, sh.Kind.shareTypeName(), sh.Name)
	switch {
	case apierrors.IsNotFound(err):
		return status.Errorf(codes.FailedPrecondition, "%s does not exist: create it, or point the share at an existing object", what)
	case apierrors.IsForbidden(err):
		// The driver's own read access, granted per source namespace by an admin, is missing:
		// the kubelet retries, and the mount succeeds once the admin ran what the message says.
		return status.Errorf(codes.FailedPrecondition, "the driver may not read %s; %s",
			what, account.grantReadHint(sh.sourceKey()))
	default:
		return status.Errorf(codes.Unavailable, "reading %s: %v", what, err)
	}
}

// prepareVolumeDir creates the volume's directory. A directory left by an earlier crash holds no
// live volume (every live volume is in the store), so it is cleaned first.
func (d *driver) prepareVolumeDir(volDir string) error {
	if err := os.MkdirAll(d.store.dir, 0o700); err != nil {
		return err
	}
	err := os.Mkdir(volDir, 0o700)
	if errors.Is(err, os.ErrExist) {
		klog.InfoS("Removing leftover volume dir", "dir", volDir)
		d.cleanOrphan(volDir)
		err = os.Mkdir(volDir, 0o700)
	}
	return err
}

// checkTarget says whether the target directory exists, and refuses symlinks anywhere below the
// kubelet root: the driver must mount onto exactly the path it was given, not wherever a link
// points. The kubelet creates the target's parent; CSI makes the plugin create the target.
func (d *driver) checkTarget(target string) (exists bool, err error) {
	rel, err := filepath.Rel(d.kubeletRoot, target)
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "target_path %q: %v", target, err)
	}
	p := d.kubeletRoot
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		p = filepath.Join(p, s)
		fi, err := os.Lstat(p)
		last := i == len(segs)-1
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return false, status.Errorf(codes.InvalidArgument, "target_path %q: %s is a symlink; refusing to follow it", target, p)
		case err == nil && !fi.IsDir():
			return false, status.Errorf(codes.InvalidArgument, "target_path %q: %s is not a directory", target, p)
		case err == nil:
			continue
		case errors.Is(err, os.ErrNotExist) && last:
			return false, nil
		case errors.Is(err, os.ErrNotExist):
			return false, status.Errorf(codes.FailedPrecondition, "target_path %q: parent %s does not exist (the kubelet creates it)", target, p)
		default:
			return false, status.Errorf(codes.Internal, "target_path %q: %v", target, err)
		}
	}
	return true, nil
}

func createTarget(target string) error {
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return status.Errorf(codes.Internal, "creating target_path %q: %v", target, err)
	}
	return nil
}

// ensureBind makes a repeated publish succeed: the volume exists; its bind may be missing if the
// driver stopped between saving the record and mounting.
func (d *driver) ensureBind(rec volumeRecord) error {
	mounts, err := readMountInfo()
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if d.isOurBind(mounts, rec.VolumeID, rec.TargetPath) {
		if e, _ := mountAt(mounts, rec.TargetPath); hasOption(e.Options, "ro") {
			return nil
		}
		// A writable bind of ours (made by a version that bound, then remounted read-only: the
		// remount does not propagate out of the driver's container) is replaced.
		klog.InfoS("Replacing a writable bind of the volume with a read-only one", "volumeID", rec.VolumeID)
		if err := unmountExact(rec.TargetPath); err != nil {
			return status.Errorf(codes.Internal, "unmounting the writable bind at %s: %v", rec.TargetPath, err)
		}
		mounts, err = readMountInfo()
		if err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
	}
	if e, ok := mountAt(mounts, rec.TargetPath); ok {
		return status.Errorf(codes.FailedPrecondition, "target_path %q already has another mount (%s %s)", rec.TargetPath, e.FSType, e.Source)
	}
	exists, err := d.checkTarget(rec.TargetPath)
	if err != nil {
		return err
	}
	if !exists {
		if !rec.CreatedTarget {
			rec.CreatedTarget = true
			if err := d.store.save(rec); err != nil {
				return status.Errorf(codes.Internal, "%v", err)
			}
		}
		if err := createTarget(rec.TargetPath); err != nil {
			return err
		}
	}
	if err := bindReadOnly(d.store.dataDir(rec.VolumeID), rec.TargetPath); err != nil {
		return status.Errorf(codes.Internal, "bind-mounting volume %s onto %s: %v", rec.VolumeID, rec.TargetPath, err)
	}
	return nil
}

// isOurBind says whether the topmost mount at target is the read-only bind of this volume's data:
// same file system (device) as the volume's tmpfs, rooted at its data dir.
func (d *driver) isOurBind(mounts []mountEntry, volumeID, target string) bool {
	tm, ok := mountAt(mounts, d.store.volumeDir(volumeID))
	if !ok {
		return false
	}
	b, ok := mountAt(mounts, target)
	return ok && b.MajorMinor == tm.MajorMinor && isDataRoot(b.Root)
}

func hasOption(options, opt string) bool {
	return slices.Contains(strings.Split(options, ","), opt)
}

// bindIsOurs says whether the topmost mount at target is this volume's bind, with two stat(2)
// calls: lstat of a mount point shows the mounted directory, so the target is our bind exactly
// when it is the very inode of the volume's data dir on the same device. Reading the mount table
// instead reads every mount on the node, under a lock the kernel also takes for every mount and
// unmount: with 1000 volumes that made each unpublish cost tens of milliseconds. Only when the
// data dir is gone (a wiped state dir) is the mount table consulted.
func (d *driver) bindIsOurs(volumeID, target string) (bool, error) {
	var data, tgt unix.Stat_t
	if err := unix.Stat(d.store.dataDir(volumeID), &data); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			return false, fmt.Errorf("stat %s: %w", d.store.dataDir(volumeID), err)
		}
		mounts, err := readMountInfo()
		if err != nil {
			return false, err
		}
		return d.isOurBind(mounts, volumeID, target), nil
	}
	if err := unix.Lstat(target, &tgt); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("lstat %s: %w", target, err)
	}
	return tgt.Dev == data.Dev && tgt.Ino == data.Ino, nil
}

// isDataRoot says whether a bind's root in mountinfo is a volume's data dir. The kernel shows
// "/data//deleted" once the directory was removed under the bind (a wiped state dir).
func isDataRoot(root string) bool {
	return root == "/"+dataDir || root == "/"+dataDir+"//deleted"
}

// unpublish removes a volume: the bind, the target dir if the driver made it, the tmpfs (and the
// record with it), the volume dir. The caller holds the volume's lock. Unknown volumes succeed.
func (d *driver) unpublish(volumeID, target string) error {
	rec, ok := d.store.get(volumeID)
	if !ok {
		klog.V(2).InfoS("Unpublish of an unknown volume: nothing to do", "volumeID", volumeID)
		return nil
	}
	if rec.TargetPath != target {
		return status.Errorf(codes.InvalidArgument, "volume %s is published at %q, not at %q; nothing was changed", volumeID, rec.TargetPath, target)
	}
	if err := d.teardown(rec); err != nil {
		return status.Errorf(codes.Internal, "unpublishing volume %s: %v", volumeID, err)
	}
	klog.V(2).InfoS("Unpublished volume", "volumeID", volumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName))
	return nil
}

// teardown undoes a published volume in the reverse order of publish. Each step acts only on
// what the driver made: its own bind (checked by device), its own target dir, its own tmpfs.
func (d *driver) teardown(rec volumeRecord) error {
	for {
		ours, err := d.bindIsOurs(rec.VolumeID, rec.TargetPath)
		if err != nil {
			return err
		}
		if !ours {
			break
		}
		if err := unmountExact(rec.TargetPath); err != nil {
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
	volDir := d.store.volumeDir(rec.VolumeID)
	if err := unmountExact(volDir); err != nil {
		return fmt.Errorf("unmounting tmpfs %s: %w", volDir, err)
	}
	d.crash.reached(stepUnpublishTmpfs)
	if err := os.Remove(volDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", volDir, err)
	}
	d.crash.reached(stepUnpublishDir)
	d.store.forget(rec.VolumeID)
	return nil
}

// cleanOrphan removes a volume dir that has no usable record: any bind of its tmpfs under the
// kubelet's pods dir (recognised by device and root), then the tmpfs, then the empty dir.
func (d *driver) cleanOrphan(volDir string) {
	mounts, err := readMountInfo()
	if err != nil {
		klog.ErrorS(err, "Cannot read mounts; leaving orphan volume dir", "dir", volDir)
		return
	}
	if tm, ok := mountAt(mounts, volDir); ok {
		podsDir := filepath.Join(d.kubeletRoot, "pods") + "/"
		for _, m := range mounts {
			if m.MajorMinor == tm.MajorMinor && isDataRoot(m.Root) && strings.HasPrefix(m.MountPoint, podsDir) &&
				validateTargetPath(d.kubeletRoot, m.MountPoint, "") == nil {
				unmountLogged(m.MountPoint)
				// The directory held the driver's own bind (the driver creates targets; the
				// kubelet only their parents). Remove, not RemoveAll: only if it is empty.
				removeDirLogged(m.MountPoint)
			}
		}
		unmountLogged(volDir)
	}
	// Remove, not RemoveAll: if anything is still in there, it is not ours to delete.
	removeDirLogged(volDir)
}

// recover loads the volumes left by a previous run: whole ones are resumed, broken ones cleaned.
func (d *driver) recover() error {
	ids, err := d.store.volumeIDsOnDisk()
	if err != nil {
		return fmt.Errorf("listing %s: %w", d.store.dir, err)
	}
	mounts, err := readMountInfo()
	if err != nil {
		return err
	}
	resumed, cleaned := 0, 0
	for _, id := range ids {
		volDir := d.store.volumeDir(id)
		if _, mounted := mountAt(mounts, volDir); !mounted {
			klog.InfoS("Volume dir has no tmpfs; removing it", "volumeID", id)
			removeDirLogged(volDir)
			cleaned++
			continue
		}
		rec, err := d.store.readRecord(id)
		if err == nil {
			err = validateTargetPath(d.kubeletRoot, rec.TargetPath, rec.PodUID)
		}
		if err != nil {
			klog.ErrorS(err, "Volume record unusable; cleaning the volume", "volumeID", id)
			d.cleanOrphan(volDir)
			cleaned++
			continue
		}
		if !d.podDirExists(rec.PodUID) || !dirExists(rec.TargetPath) {
			klog.InfoS("Pod or target of volume is gone; cleaning it", "volumeID", id, "pod", klog.KRef(rec.PodNamespace, rec.PodName))
			if err := d.teardown(rec); err != nil {
				klog.ErrorS(err, "Cleaning volume failed", "volumeID", id)
			}
			cleaned++
			continue
		}
		d.store.remember(rec)
		if err := d.ensureBind(rec); err != nil {
			klog.ErrorS(err, "Re-binding volume failed; the kubelet's retry will try again", "volumeID", id)
		}
		resumed++
	}
	klog.InfoS("Recovered volumes", "resumed", resumed, "cleaned", cleaned)
	return nil
}

// countMounts counts the mounts the driver holds: each volume's tmpfs and its binds.
func (d *driver) countMounts() int {
	mounts, err := readMountInfo()
	if err != nil {
		return -1
	}
	devices := map[string]bool{}
	prefix := d.store.dir + "/"
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

func (d *driver) podDirExists(podUID string) bool {
	return dirExists(filepath.Join(d.kubeletRoot, "pods", podUID))
}

func dirExists(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

func unmountLogged(p string) {
	if err := unmountExact(p); err != nil {
		klog.ErrorS(err, "Unmount failed", "path", p)
	}
}

func removeDirLogged(p string) {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Removing dir failed", "path", p)
	}
}
