package main

// NodeUnpublishVolume's work: find the volume's record, check the target is the one it was
// published at, and take the volume off the node (teardown, volume.go: the same as for a volume
// whose pod is gone). csi.go has validated the request and holds the volume's lock.

import (
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
