package main

// NodeUnpublishVolume: the handler validates the request (pure, no I/O: validate.go) and takes
// the volume's lock (volumeLocks, volume.go); the work finds the volume's record, checks the
// target is the one it was published at, and takes the volume off the node (teardown,
// volume.go: the same as for a volume whose pod is gone).

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := validateVolumeID(req.GetVolumeId()); err != nil {
		return nil, toStatus(err)
	}
	if err := validateTargetPath(s.d.kubeletRoot, req.GetTargetPath(), ""); err != nil {
		return nil, toStatus(err)
	}
	unlock, ok := s.d.locks.tryLock(req.GetVolumeId())
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress", req.GetVolumeId())
	}
	defer unlock()
	if err := s.d.unpublish(req.GetVolumeId(), req.GetTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unpublish removes a volume: the bind, the target dir if the driver made it, the tmpfs (and the
// record with it), the volume dir. The caller holds the volume's lock. Unknown volumes succeed.
func (d *driver) unpublish(volumeID, target string) error {
	rec, ok := d.store.Get(volumeID)
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
