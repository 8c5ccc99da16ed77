package main

// Taking a volume off the node: NodeUnpublishVolume, the same teardown for a volume whose pod is
// gone (reconcile.go, recover.go), and the cleaning of a volume dir with no usable record. Every
// step acts only on what the driver made: its own bind (checked by device and inode), its own
// target dir, its own tmpfs. csi.go has validated the request and holds the volume's lock.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

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

func (d *driver) podDirExists(podUID string) bool {
	return dirExists(filepath.Join(d.kubeletRoot, "pods", podUID))
}

func dirExists(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
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
