package main

// Pure validation of what the kubelet hands us. Nothing here does I/O: every check that can be
// made on the request alone is made before the driver takes a lock, calls the API server or
// touches the file system, so bad input is rejected without side effects.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// maxVolumeEntries bounds the files plus directories of one volume: each share's files and the
// directories of their paths, summed over the shares (volume.PathEntries). Every one costs kernel memory
// whatever its size (volume.EntryBytes), charged to the driver: without a bound, empty files
// or deep paths held tens of times the tmpfs's size. 4096 is four times about the largest list items
// allows, and more keys than a Secret or ConfigMap of ordinary use has (its 1 MiB holds 4096
// keys of 256 bytes); a volume at the bound is charged about 16 MiB of budget.
const maxVolumeEntries = 4096

// Keys the kubelet adds to the volume context (podInfoOnMount: true).
const (
	kubeletKeyPrefix     = "csi.storage.k8s.io/"
	ctxPodName           = "csi.storage.k8s.io/pod.name"
	ctxPodNamespace      = "csi.storage.k8s.io/pod.namespace"
	ctxPodUID            = "csi.storage.k8s.io/pod.uid"
	ctxServiceAccount    = "csi.storage.k8s.io/serviceAccount.name"
	ctxEphemeral         = "csi.storage.k8s.io/ephemeral"
	ctxServiceAccountTok = "csi.storage.k8s.io/serviceAccount.tokens"
)

// volumeRequest is a validated NodePublishVolume request.
type volumeRequest struct {
	VolumeID       string
	TargetPath     string
	Shares         []share.Ref // one, or several (attribute shares), in the order given
	Refresh        bool
	PodNamespace   string
	PodName        string
	PodUID         string
	ServiceAccount string
	// How the source's keys become files.
	DefaultMode os.FileMode
	Items       []volume.Item // empty: every key, as a file of the same name
	// Ownership and labels from the kubelet.
	GID          int    // the pod's fsGroup (VOLUME_MOUNT_GROUP), or -1
	MountContext string // an SELinux context= mount option for the tmpfs, or ""
}

// invalidArgument is a validation failure; toStatus maps it to codes.InvalidArgument.
type invalidArgument struct{ msg string }

func (e *invalidArgument) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &invalidArgument{msg: fmt.Sprintf(format, args...)}
}

// toStatus maps validation errors to InvalidArgument and passes status errors through.
func toStatus(err error) error {
	var inv *invalidArgument
	if errors.As(err, &inv) {
		return status.Error(codes.InvalidArgument, inv.msg)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

var (
	podUIDPattern = regexp.MustCompile(`^[a-f0-9-]{1,64}$`)
)

// validateVolumeID accepts only ids that are a single, harmless path segment (volume.ValidID):
// the id names the volume's directory.
func validateVolumeID(id string) error {
	if id == "" {
		return invalidf("volume_id is required")
	}
	if !volume.ValidID(id) {
		return invalidf("volume_id %q is not valid: it must be 1-128 characters of [A-Za-z0-9._-], start with a letter or digit and not contain \"..\"", id)
	}
	return nil
}

// validateTargetPath checks, segment by segment, that target is where the kubelet puts a CSI
// volume of the given pod: <kubeletRoot>/pods/<podUID>/volumes/kubernetes.io~csi/<name>/mount.
// Checking the exact shape (not just a prefix) means that no request, whatever it claims, can
// make the driver mount over or later remove any other host path (CVE-2020-8567 class bugs).
// podUID may be empty (NodeUnpublishVolume carries no pod info); then any pod UID is accepted.
func validateTargetPath(kubeletRoot, target, podUID string) error {
	if target == "" {
		return invalidf("target_path is required")
	}
	if !filepath.IsAbs(target) {
		return invalidf("target_path %q must be absolute", target)
	}
	if hasControlChars(target) {
		return invalidf("target_path %q contains control characters", target)
	}
	// Compare raw segments, not filepath.Clean output: Clean would silently turn "a/../b" into
	// "b", hiding exactly the kind of path that must be rejected.
	segs := strings.Split(target[1:], "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return invalidf("target_path %q must not contain empty, \".\" or \"..\" segments", target)
		}
	}
	rootSegs := strings.Split(strings.TrimPrefix(filepath.Clean(kubeletRoot), "/"), "/")
	if filepath.Clean(kubeletRoot) == "/" {
		rootSegs = nil
	}
	rest, ok := cutSegments(segs, rootSegs)
	if !ok {
		return invalidf("target_path %q is not under the kubelet root dir %q", target, kubeletRoot)
	}
	// pods/<uid>/volumes/kubernetes.io~csi/<volume name>/mount
	if len(rest) != 6 || rest[0] != "pods" || rest[2] != "volumes" || rest[3] != "kubernetes.io~csi" || rest[5] != "mount" {
		return invalidf("target_path %q is not a kubelet CSI volume path (%s/pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount)", target, kubeletRoot)
	}
	if !podUIDPattern.MatchString(rest[1]) {
		return invalidf("target_path %q has an invalid pod uid segment %q", target, rest[1])
	}
	// The kubelet names the directory after the pod's volume, a DNS label.
	if !share.ValidLabel(rest[4]) {
		return invalidf("target_path %q has an invalid volume name segment %q", target, rest[4])
	}
	if podUID != "" && rest[1] != podUID {
		return invalidf("target_path %q does not belong to pod uid %q", target, podUID)
	}
	return nil
}

func hasControlChars(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

func cutSegments(segs, prefix []string) ([]string, bool) {
	if len(segs) < len(prefix) {
		return nil, false
	}
	for i := range prefix {
		if segs[i] != prefix[i] {
			return nil, false
		}
	}
	return segs[len(prefix):], true
}

// parsePublishRequest validates a NodePublishVolume request without side effects: the request's
// own fields, then the pod information and target path the kubelet sends, then the attributes the
// pod's author set.
func parsePublishRequest(req *csi.NodePublishVolumeRequest, kubeletRoot string) (*volumeRequest, error) {
	if err := validateVolumeID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	mountContext, gid, err := parseVolumeCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if req.GetStagingTargetPath() != "" {
		return nil, invalidf("staging_target_path is not supported: this driver has no STAGE_UNSTAGE_VOLUME capability")
	}

	vc := req.GetVolumeContext()
	if vc[ctxEphemeral] != "true" {
		return nil, invalidf("%s is %q: this driver only serves in-line ephemeral volumes (a pod's `csi:` volume), not PersistentVolumes", ctxEphemeral, vc[ctxEphemeral])
	}
	v := &volumeRequest{
		VolumeID:       req.GetVolumeId(),
		TargetPath:     req.GetTargetPath(),
		Refresh:        true,
		DefaultMode:    defaultFileMode,
		GID:            gid,
		MountContext:   mountContext,
		PodNamespace:   vc[ctxPodNamespace],
		PodName:        vc[ctxPodName],
		PodUID:         vc[ctxPodUID],
		ServiceAccount: vc[ctxServiceAccount],
	}
	if v.PodNamespace == "" || v.PodName == "" || v.PodUID == "" || v.ServiceAccount == "" {
		return nil, invalidf("pod information is missing from the volume context: the CSIDriver object must set podInfoOnMount: true")
	}
	if !share.ValidLabel(v.PodNamespace) || !share.ValidName(v.PodName) || !share.ValidName(v.ServiceAccount) || !podUIDPattern.MatchString(v.PodUID) {
		return nil, invalidf("pod information in the volume context is malformed (namespace %q, name %q, uid %q, service account %q)", v.PodNamespace, v.PodName, v.PodUID, v.ServiceAccount)
	}
	if err := validateTargetPath(kubeletRoot, v.TargetPath, v.PodUID); err != nil {
		return nil, err
	}
	if err := parseVolumeAttributes(vc, v); err != nil {
		return nil, err
	}
	// A writable request is refused, as OpenShift's driver refuses it. The driver's bind is
	// read-only, but the container runtime makes its own bind of the target for the container,
	// read-only only when the kubelet asks (the csi volume's readOnly, or the volumeMount's).
	// runc 1.2 and later apply the container's mount flags to that bind, so a writable request
	// gives the container a writable mount of the volume's tmpfs (seen with runc 1.5.2 under
	// containerd 2.4: the pod's writes reached the files every pod of the share sees).
	if !req.GetReadonly() {
		return nil, invalidf("the volume is requested writable (readOnly is false or unset in the pod's csi volume): this driver's volumes are read-only; set `readOnly: true` under the pod's `csi:` volume")
	}
	return v, nil
}

// parseVolumeCapability accepts a mount of tmpfs (or of no fs type) and returns its SELinux
// context mount option ("" for none) and the pod's fsGroup (-1 for none).
func parseVolumeCapability(capability *csi.VolumeCapability) (mountContext string, gid int, err error) {
	if capability == nil {
		return "", 0, invalidf("volume_capability is required")
	}
	if capability.GetBlock() != nil || capability.GetMount() == nil {
		return "", 0, invalidf("only the mount access type is supported: this driver provides files, not a block device")
	}
	if fs := capability.GetMount().GetFsType(); fs != "" && fs != "tmpfs" {
		return "", 0, invalidf("fs_type %q is not supported: volumes are always tmpfs", fs)
	}
	if mountContext, err = parseMountFlags(capability.GetMount().GetMountFlags()); err != nil {
		return "", 0, err
	}
	if gid, err = parseMountGroup(capability.GetMount().GetVolumeMountGroup()); err != nil {
		return "", 0, err
	}
	return mountContext, gid, nil
}

// selinuxContextFlag is the only mount flag accepted: the kubelet's SELinux label for the volume
// (CSIDriver seLinuxMount), quoted because MLS categories contain commas. Anything else could
// smuggle further options into the tmpfs mount.
var selinuxContextFlag = regexp.MustCompile(`^context="[A-Za-z0-9_.:,-]+"$|^context=[A-Za-z0-9_.:-]+$`)

func parseMountFlags(flags []string) (string, error) {
	var ctx string
	for _, f := range flags {
		if !selinuxContextFlag.MatchString(f) {
			return "", invalidf("mount flag %q is not supported: the only mount flag accepted is an SELinux context=\"...\"", f)
		}
		if ctx != "" && ctx != f {
			return "", invalidf("mount flags %q set two SELinux contexts", flags)
		}
		ctx = f
	}
	return ctx, nil
}

// parseMountGroup reads the pod's fsGroup, passed because the driver advertises VOLUME_MOUNT_GROUP.
func parseMountGroup(s string) (int, error) {
	if s == "" {
		return -1, nil
	}
	g, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return 0, invalidf("volume_mount_group %q is not a group id", s)
	}
	return int(g), nil
}
