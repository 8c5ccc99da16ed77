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
	"slices"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// Volume attributes a pod author may set (API-compatible with OpenShift's driver), besides each
// share kind's own (sharedSecret, sharedConfigMap: share.Kinds).
const (
	attrRefreshResource = "refreshResource"
	attrDefaultMode     = "defaultMode"
	attrItems           = "items"
	attrShares          = "shares"
)

// maxShares bounds the shares of one volume (each costs a SubjectAccessReview and a GET).
const maxShares = 16

// maxItems bounds the entries of the items attribute. A list names files one by one, by hand:
// a thousand is far beyond any such list (the largest Secrets and ConfigMaps in common use, CA
// bundles and dashboards, are mounted whole, without items), and the bound keeps the record,
// which holds the list, and the parse small.
const maxItems = 1000

// maxVolumeEntries bounds the files plus directories of one volume: each share's files and the
// directories of their paths, summed over the shares (volume.PathEntries). Every one costs kernel memory
// whatever its size (volume.EntryBytes), charged to the driver: without a bound, empty files
// or deep paths held tens of times the tmpfs's size. 4096 is four times about the largest list items
// allows, and more keys than a Secret or ConfigMap of ordinary use has (its 1 MiB holds 4096
// keys of 256 bytes); a volume at the bound is charged about 16 MiB of budget.
const maxVolumeEntries = 4096

// defaultFileMode is what files get when the volume sets no defaultMode, as the kubelet's own
// secret volumes do.
const defaultFileMode os.FileMode = 0o644

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
	Items       []item // empty: every key, as a file of the same name
	// Ownership and labels from the kubelet.
	GID          int    // the pod's fsGroup (VOLUME_MOUNT_GROUP), or -1
	MountContext string // an SELinux context= mount option for the tmpfs, or ""
}

// item selects one key of one share's source and names the file it becomes.
type item struct {
	Share int         `json:"share,omitempty"` // index into the volume's shares
	Key   string      `json:"key"`
	Path  string      `json:"path"`
	Mode  os.FileMode `json:"mode,omitempty"` // 0: the volume's default mode
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
	// Volume ids become a directory name under the state dir, so they must be one safe segment.
	// The kubelet's ids for inline volumes look like "csi-<sha256 hex>".
	volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	podUIDPattern   = regexp.MustCompile(`^[a-f0-9-]{1,64}$`)
)

// validateVolumeID accepts only ids that are a single, harmless path segment: the id names
// the volume's directory, and "..", "/" or a leading dot would let a caller escape or collide
// with our own files.
func validateVolumeID(id string) error {
	if id == "" {
		return invalidf("volume_id is required")
	}
	if len(id) > 128 || !volumeIDPattern.MatchString(id) || strings.Contains(id, "..") {
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

// parseVolumeAttributes reads what the pod author set in the volume's volumeAttributes into v:
// the shares, refreshResource, defaultMode and items. Keys the kubelet adds are skipped; any
// other key is an error, so that a misspelt attribute is not silently ignored.
func parseVolumeAttributes(vc map[string]string, v *volumeRequest) error {
	shares, err := parseShareAttributes(vc)
	if err != nil {
		return err
	}
	v.Shares = shares
	if s, ok := vc[attrRefreshResource]; ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return invalidf("volumeAttribute %s must be \"true\" or \"false\", not %q", attrRefreshResource, s)
		}
		v.Refresh = b
	}
	if s, ok := vc[attrDefaultMode]; ok {
		m, err := parseMode(s)
		if err != nil {
			return invalidf("volumeAttribute %s: %v", attrDefaultMode, err)
		}
		v.DefaultMode = m
	}
	if s, ok := vc[attrItems]; ok {
		items, err := parseItems(s, v.Shares)
		if err != nil {
			return invalidf("volumeAttribute %s: %v", attrItems, err)
		}
		v.Items = items
	}
	supported := append(share.Attributes(), attrShares, attrRefreshResource, attrDefaultMode, attrItems)
	for k := range vc {
		if slices.Contains(supported, k) {
			continue
		}
		// The kubelet owns the csi.storage.k8s.io/ prefix and may add keys in newer releases;
		// rejecting those would break upgrades, so only unknown user attributes are errors.
		if strings.HasPrefix(k, kubeletKeyPrefix) {
			continue
		}
		return invalidf("unknown volumeAttribute %q: supported are %s", k, wordList(supported, "and"))
	}
	return nil
}

// parseShareAttributes reads which shares a volume mounts: exactly one of sharedSecret: NAME,
// sharedConfigMap: NAME (OpenShift's attributes) or shares: "secret/NAME, configmap/NAME, ...".
func parseShareAttributes(vc map[string]string) ([]share.Ref, error) {
	var shares []share.Ref
	for _, row := range share.Kinds {
		if name, ok := vc[row.Attribute]; ok {
			shares = append(shares, share.Ref{Kind: row.Kind, Name: name})
		}
	}
	list, hasList := vc[attrShares]
	switch {
	case len(shares)+btoi(hasList) > 1:
		return nil, invalidf("set exactly one of volumeAttributes %s, not several", wordList(append(share.Attributes(), attrShares), "and"))
	case hasList:
		for _, entry := range strings.Split(list, ",") {
			entry = strings.TrimSpace(entry)
			kind, name, ok := strings.Cut(entry, "/")
			s := share.Ref{Kind: share.KindOfListName(kind), Name: name}
			if !ok || s.Kind == "" {
				return nil, invalidf("volumeAttribute %s: entry %q is not %s", attrShares, entry, wordList(share.ListForms(), "or"))
			}
			if slices.Contains(shares, s) {
				return nil, invalidf("volumeAttribute %s: %q is listed twice", attrShares, s.String())
			}
			shares = append(shares, s)
		}
		if len(shares) > maxShares {
			return nil, invalidf("volumeAttribute %s lists %d shares; at most %d", attrShares, len(shares), maxShares)
		}
	case len(shares) == 0:
		return nil, invalidf("set one of volumeAttributes %s to the name of a share (or %s to a list of them)", wordList(share.Attributes(), "or"), attrShares)
	}
	for _, s := range shares {
		if !share.ValidName(s.Name) {
			return nil, invalidf("%s name %q is not a valid object name (lowercase RFC 1123 subdomain)", s.Kind.TypeName(), s.Name)
		}
	}
	return shares, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseMode reads an octal file mode such as "0440" or "440": permission bits only.
func parseMode(s string) (os.FileMode, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || s == "" || len(s) > 4 || m > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode between 0000 and 0777 (e.g. \"0440\")", s)
	}
	return os.FileMode(m), nil
}

// parseItems reads the key selection: comma-separated entries KEY[=PATH][:MODE], e.g.
// "ca.crt, tls.key=keys/tls.key:0400". PATH is relative, checked segment by segment; MODE is
// octal. Two entries may not produce the same path, nor a path that is another's directory.
// In a volume of several shares, KEY names its share: secret/NAME/KEY or configmap/NAME/KEY.
func parseItems(s string, shares []share.Ref) ([]item, error) {
	var items []item
	paths := map[string]bool{}
	entries := strings.Split(s, ",")
	if len(entries) > maxItems {
		return nil, fmt.Errorf("%d entries; at most %d are allowed (without items, a volume shows every key its shares share)", len(entries), maxItems)
	}
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("empty entry in %q (entries are KEY[=PATH][:MODE], comma-separated)", s)
		}
		var it item
		rest, modeStr, hasMode := strings.Cut(entry, ":")
		if hasMode {
			m, err := parseMode(modeStr)
			if err != nil {
				return nil, fmt.Errorf("entry %q: %v", entry, err)
			}
			if m == 0 {
				return nil, fmt.Errorf("entry %q: mode 0000 would make the file unreadable", entry)
			}
			it.Mode = m
		}
		it.Key, it.Path, _ = strings.Cut(rest, "=")
		if i := strings.LastIndex(it.Key, "/"); i >= 0 {
			it.Share = slices.IndexFunc(shares, func(s share.Ref) bool { return s.String() == it.Key[:i] })
			if it.Share < 0 {
				return nil, fmt.Errorf("entry %q: %q is not one of the volume's shares", entry, it.Key[:i])
			}
			it.Key = it.Key[i+1:]
		} else if len(shares) > 1 {
			return nil, fmt.Errorf("entry %q: the volume has several shares; name the key as KIND/SHARE/KEY, e.g. %s/%s", entry, shares[0], it.Key)
		}
		if it.Path == "" {
			it.Path = it.Key
		}
		if err := atomicwriter.ValidateKey(it.Key); err != nil {
			return nil, fmt.Errorf("entry %q: %v", entry, err)
		}
		if err := atomicwriter.ValidatePath(it.Path); err != nil {
			return nil, fmt.Errorf("entry %q: %v", entry, err)
		}
		if paths[it.Path] {
			return nil, fmt.Errorf("entry %q: path %q is used twice", entry, it.Path)
		}
		paths[it.Path] = true
		items = append(items, it)
	}
	for p := range paths {
		for dir := range atomicwriter.ParentDirs(p) {
			if paths[dir] {
				return nil, fmt.Errorf("path %q is a file and also the directory of %q", dir, p)
			}
		}
	}
	perShare := make([][]string, len(shares))
	for _, it := range items {
		perShare[it.Share] = append(perShare[it.Share], it.Path)
	}
	n := 0
	for _, p := range perShare {
		n += volume.PathEntries(p)
	}
	if n > maxVolumeEntries {
		return nil, fmt.Errorf("its paths make %d files and directories; a volume holds at most %d: list fewer keys, or use shallower paths", n, maxVolumeEntries)
	}
	return items, nil
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

// wordList joins words as a sentence does: "a", "a or b", "a, b and c".
func wordList(words []string, conjunction string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conjunction + " " + words[len(words)-1]
}
