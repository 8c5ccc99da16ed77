package main

// NodePublishVolume: the handler validates the request (pure, no I/O: validate.go) and takes the
// volume's lock (volumeLocks, volume.go: a second call for a volume in progress is answered
// Aborted); then the work, in two halves: fetchVolume admits every share (looks it up, checks
// the pod may use it, GETs its source: admitShare) and composes the pod's view without writing
// anything, so a volume is published whole or not at all; createVolume (volume.go, the volume's
// owner) then makes it on the node, step by step, and undoes exactly the steps that ran when one
// fails. A volume published already has its bind checked (ensureBind, volume.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/sourceaccess"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// reservedBytes is tmpfs room kept for the record and directory entries.
const reservedBytes = 64 << 10

func (s *nodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	v, err := parsePublishRequest(req, s.d.kubeletRoot)
	if err != nil {
		return nil, toStatus(err)
	}
	unlock, ok := s.d.locks.tryLock(v.VolumeID)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress", v.VolumeID)
	}
	defer unlock()
	if err := s.d.publish(ctx, v); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publish makes v's data visible, read-only, at its target path: a new volume, made whole or not
// at all; a volume published already with the same arguments has its bind checked (the kubelet
// publishes again after a restart, or when it did not hear the answer). The caller holds v's lock.
func (d *driver) publish(ctx context.Context, v *volumeRequest) error {
	rec, published := d.store.Get(v.VolumeID)
	if !published {
		return d.publishNew(ctx, v)
	}
	if !sameRequest(rec, v) {
		return status.Errorf(codes.AlreadyExists, "volume %s is already published with other arguments (%s for pod %s/%s at %s)",
			v.VolumeID, rec.Describe(), rec.PodNamespace, rec.PodName, rec.TargetPath)
	}
	return d.ensureBind(rec)
}

// publishNew fetches and makes a volume the node does not have.
func (d *driver) publishNew(ctx context.Context, v *volumeRequest) error {
	// The target's path is checked (no symlink, parents present) before any API call or mount;
	// again in createVolume, just before the driver creates it.
	if _, err := checkTarget(d.kubeletRoot, v.TargetPath); err != nil {
		return err
	}
	rec, view, err := d.fetchVolume(ctx, v)
	if err != nil {
		return err
	}
	if err := d.createVolume(rec, view); err != nil {
		return err
	}
	klog.V(2).InfoS("Published volume", "volumeID", v.VolumeID, "shares", rec.Describe(),
		"pod", klog.KRef(v.PodNamespace, v.PodName), "files", view.FileCount())
	return nil
}

// fetchVolume checks and fetches every share of v and composes the pod's view. It writes nothing.
func (d *driver) fetchVolume(ctx context.Context, v *volumeRequest) (volume.Record, volume.View, error) {
	rec := newVolumeRecord(v)
	perShare := make([]map[string]atomicwriter.File, len(v.Shares))
	var size int64
	for i, ref := range v.Shares {
		sh, src, err := d.admitShare(ctx, v, ref)
		if err != nil {
			return volume.Record{}, volume.View{}, err
		}
		rec.Shares = append(rec.Shares, volume.ShareState{Ref: ref,
			SourceNamespace: sh.SourceNamespace, SourceName: sh.SourceName, ResourceVersion: src.ResourceVersion, Exposed: sh.Exposed,
			ShareUID: sh.UID, SourceUID: src.UID})
		if perShare[i], err = sharedFiles(rec, i, sh, src); err != nil {
			if errors.As(err, new(*notSharedError)) {
				return volume.Record{}, volume.View{}, status.Errorf(codes.FailedPrecondition, "%s %q: %v", ref.Kind.TypeName(), ref.Name, err)
			}
			return volume.Record{}, volume.View{}, status.Errorf(codes.FailedPrecondition, "%s %s/%s cannot be shared with this volume: %v", ref.Kind, sh.SourceNamespace, sh.SourceName, err)
		}
		rec.Shares[i].Bytes, rec.Shares[i].Entries = volume.ChargedBytes(perShare[i]), volume.FilesEntries(perShare[i])
		size += src.Size
	}
	if n := volume.EntryCount(rec.Shares); n > maxVolumeEntries {
		return volume.Record{}, volume.View{}, status.Errorf(codes.ResourceExhausted, "the shares of volume %s make %d files and directories; a volume holds at most %d "+
			"(each costs the node memory whatever its size): select fewer keys with the volumeAttribute %s, or mount fewer shares", v.VolumeID, n, maxVolumeEntries, attrItems)
	}
	view := volume.ComposeView(perShare)
	if len(view.Conflicts) > 0 {
		c := view.Conflicts[0]
		return volume.Record{}, volume.View{}, status.Errorf(codes.FailedPrecondition, "%s and %s both provide the file %q: select and rename keys with the volumeAttribute %s",
			v.Shares[c.Kept], v.Shares[c.Dropped], c.Path, attrItems)
	}
	// Twice: each share's copy, and during an update the new copy beside the old one, which the
	// pod's view still shows until it is swapped (after a refresh, the view it replaced is kept
	// beside the new one, and dropped before the next update writes anything: twice still). The view itself costs nothing: its files are
	// hard links to the copies' (internal/volume). Should linking ever fail, the files are
	// written, and an update that then runs out of room fails and leaves the volume as it was.
	// The record is kept room for too, twice (its new version is written beside the old one):
	// it holds the pod's items, which may make it larger than reservedBytes.
	if spare := reservedBytes + 2*volume.RecordPages(rec); 2*size+spare > d.tmpfsSize {
		return volume.Record{}, volume.View{}, status.Errorf(codes.ResourceExhausted, "the shares of volume %s hold %d bytes; a volume needs twice that plus %d bytes for its record and directories, more than the tmpfs size limit of %d bytes (raise --tmpfs-size)",
			v.VolumeID, size, spare, d.tmpfsSize)
	}
	return rec, view, nil
}

// admitShare looks up one share of a publish, checks the pod may use it and GETs its source.
//
// The review decides what the pod learns: a pod that may not use the share is told so, and
// nothing else, not whether the share exists (RBAC can grant use on a name before the share is
// made) nor anything about its source. Only a pod that may use it hears that the share is
// missing or broken, or how the GET went.
//
// The review comes first, and the source is read only for a pod that may use the share: a pod
// that is refused costs the API server one review (a decision the authorizer caches), never a
// GET of a Secret it may not see. Any pod author can ask for any share; were the GET to go out
// with the review, every refused publish, retried by the kubelet with its backoff, would read a
// Secret on the API server for nothing. A cold publish waits for the review, then the GET (tens
// of milliseconds each); a warm one finds both cached.
func (d *driver) admitShare(ctx context.Context, v *volumeRequest, ref share.Ref) (share.Spec, *share.SourceData, error) {
	sh, shareErr := d.shares.Get(ctx, ref.Kind, ref.Name)
	missing, broken := apierrors.IsNotFound(shareErr), errors.As(shareErr, new(*share.BadError))
	if shareErr != nil && !missing && !broken {
		return sh, nil, status.Errorf(codes.Unavailable, "reading %s %q, will retry: %v", ref.Kind.TypeName(), ref.Name, shareErr)
	}
	key := accessKey{Namespace: v.PodNamespace, ServiceAccount: v.ServiceAccount, Kind: ref.Kind, Share: ref.Name}
	dec, err := d.authz.check(ctx, key)
	switch {
	case apierrors.IsForbidden(err):
		// The driver's own RBAC is wrong, not the pod's: say what the admin must fix. Still
		// never a grant; Unavailable so that the kubelet's retry succeeds once it is fixed.
		return sh, nil, status.Errorf(codes.Unavailable, "cannot check access: the driver's service account may not create "+
			"subjectaccessreviews.authorization.k8s.io; its ClusterRole (shared-resource-csi-driver in deploy.yaml) must allow it; will retry: %v", err)
	case err != nil:
		// An error is never a grant.
		return sh, nil, status.Errorf(codes.Unavailable, "cannot check access, will retry: %v", err)
	case !dec.Allowed:
		return sh, nil, status.Error(codes.PermissionDenied, deniedMessage(key, dec.Reason))
	case errors.As(shareErr, new(*share.DeletingError)):
		return sh, nil, status.Errorf(codes.NotFound, "%v: no new volume may use it", shareErr)
	case missing:
		return sh, nil, status.Errorf(codes.NotFound, "%s %q does not exist: a cluster admin must create it (cluster-scoped, group %s)", ref.Kind.TypeName(), ref.Name, share.Group)
	case broken:
		return sh, nil, status.Errorf(codes.FailedPrecondition, "%v", shareErr)
	}
	src, err := d.sources.get(ctx, sh.SourceKey(), sh.Exposed)
	switch {
	case err != nil:
		return sh, nil, sourceError(sh, err, d.account)
	case sh.Pin.Refuses(src.UID):
		return sh, nil, status.Error(codes.FailedPrecondition, share.ReplacedMessage(sh, src.UID))
	}
	return sh, src, nil
}

// sourceError maps a failed GET of a share's source to the code the kubelet should see.
func sourceError(sh share.Spec, err error, account sourceaccess.DriverAccount) error {
	what := fmt.Sprintf("%s %s/%s (referenced by %s %q)", sh.Kind, sh.SourceNamespace, sh.SourceName, sh.Kind.TypeName(), sh.Name)
	switch {
	case apierrors.IsNotFound(err):
		return status.Errorf(codes.FailedPrecondition, "%s does not exist: create it, or point the share at an existing object", what)
	case apierrors.IsForbidden(err):
		// The driver's own read access, granted per source namespace by an admin, is missing:
		// the kubelet retries, and the mount succeeds once the admin ran what the message says.
		return status.Errorf(codes.FailedPrecondition, "the driver may not read %s; %s",
			what, account.GrantReadHint(sh.SourceKey()))
	default:
		return status.Errorf(codes.Unavailable, "reading %s: %v", what, err)
	}
}

// newVolumeRecord is the record of a volume about to be published for v; its shares are added as
// they are fetched.
func newVolumeRecord(v *volumeRequest) volume.Record {
	return volume.Record{
		VolumeID: v.VolumeID, Refresh: v.Refresh,
		PodNamespace: v.PodNamespace, PodName: v.PodName, PodUID: v.PodUID, ServiceAccount: v.ServiceAccount,
		TargetPath:  v.TargetPath,
		DefaultMode: v.DefaultMode, Items: v.Items, GID: v.GID, MountContext: v.MountContext,
	}
}

// sameRequest says whether a repeated NodePublishVolume, v, asks for what volume r already is.
func sameRequest(r volume.Record, v *volumeRequest) bool {
	return slices.Equal(r.Refs(), v.Shares) && r.Refresh == v.Refresh &&
		r.PodNamespace == v.PodNamespace && r.PodName == v.PodName && r.PodUID == v.PodUID &&
		r.ServiceAccount == v.ServiceAccount && r.TargetPath == v.TargetPath &&
		r.DefaultMode == v.DefaultMode && slices.Equal(r.Items, v.Items) && r.GID == v.GID && r.MountContext == v.MountContext
}
