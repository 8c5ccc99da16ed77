package main

// Recovery at start: the volumes a previous run of the driver left on this node are resumed when
// whole and cleaned when not, before any request is served.

import (
	"fmt"

	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/mountinfo"
)

// recoverVolumes loads the volumes left by a previous run: whole ones are resumed, broken ones
// cleaned.
func (d *driver) recoverVolumes() error {
	ids, err := d.store.VolumeIDsOnDisk()
	if err != nil {
		return fmt.Errorf("listing %s: %w", d.store.Path(), err)
	}
	mounts, err := d.mounter.mounts()
	if err != nil {
		return err
	}
	resumed, cleaned := 0, 0
	for _, id := range ids {
		volDir := d.store.MountPoint(id)
		if _, mounted := mountinfo.At(mounts, volDir); !mounted {
			klog.InfoS("Volume dir has no tmpfs; removing it", "volumeID", id)
			removeDirLogged(volDir)
			cleaned++
			continue
		}
		rec, err := d.store.ReadRecord(id)
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
		d.countRecovered(&rec)
		d.store.Remember(rec)
		if err := d.ensureBind(rec); err != nil {
			klog.ErrorS(err, "Re-binding volume failed; the kubelet's retry will try again", "volumeID", id)
		}
		resumed++
	}
	klog.InfoS("Recovered volumes", "resumed", resumed, "cleaned", cleaned)
	return nil
}
