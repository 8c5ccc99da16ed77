package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The driver's API, as a user meets it: the names below are what the driver publishes (its CSI
// name, volume attributes, share kinds and fields, event and condition reasons, object names).
// They are written here as strings, not taken from the driver's code: a renamed constant there
// must not silently change what the suites check.

// DriverName is the CSI driver's name (CSIDriver object, kubelet plugin dir).
const DriverName = "csi.sharedresource.openshift.io"

// Volume attributes a pod's csi volume sets.
const (
	AttrSharedSecret    = "sharedSecret"
	AttrSharedConfigMap = "sharedConfigMap"
	AttrShares          = "shares"
	AttrItems           = "items"
	AttrDefaultMode     = "defaultMode"
	AttrRefreshResource = "refreshResource"
)

// Attributes the kubelet adds to a publish (podInfoOnMount, ephemeral, token requests).
const (
	CtxPodName           = "csi.storage.k8s.io/pod.name"
	CtxPodNamespace      = "csi.storage.k8s.io/pod.namespace"
	CtxPodUID            = "csi.storage.k8s.io/pod.uid"
	CtxServiceAccount    = "csi.storage.k8s.io/serviceAccount.name"
	CtxEphemeral         = "csi.storage.k8s.io/ephemeral"
	CtxServiceAccountTok = "csi.storage.k8s.io/serviceAccount.tokens"
)

// Documented limits.
const (
	MaxShares        = 16   // shares one volume may list
	MaxVolumeEntries = 4096 // files and directories one volume may hold
	EntryBytes       = 1024 // what the volume budget charges for each file or directory
)

// The share custom resources.
const (
	ShareGroup   = "sharedresource.openshift.io"
	shareVersion = "v1alpha1"
	// spec fields: the source's pin and what a recreated source does.
	PinField         = "sourceUID"
	RecreationField  = "sourceRecreation"
	RecreationFollow = "Follow"
)

// ShareKind is the Kind of the object a share copies ("Secret", "ConfigMap").
type ShareKind string

// The share kinds.
const (
	KindSecret    ShareKind = "Secret"
	KindConfigMap ShareKind = "ConfigMap"
)

// ShareTypeName is the share CRD's Kind.
func (k ShareKind) ShareTypeName() string { return "Shared" + string(k) }

// ShareResource is the share CRD's resource (what RBAC grants `use` on).
func (k ShareKind) ShareResource() string { return strings.ToLower(k.ShareTypeName()) + "s" }

// ShareGVR is the resource of the kind's shares.
func ShareGVR(k ShareKind) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: ShareGroup, Version: shareVersion, Resource: k.ShareResource()}
}

// ShareRefField is the spec field of a share naming its source (spec.secretRef, spec.configMapRef).
func ShareRefField(k ShareKind) string {
	if k == KindConfigMap {
		return "configMapRef"
	}
	return strings.ToLower(string(k)) + "Ref"
}

// Event reasons on pods.
const (
	ReasonRevoked        = "SharedResourceAccessRevoked"
	ReasonRestored       = "SharedResourceAccessRestored"
	ReasonRefreshed      = "SharedResourceRefreshed"
	ReasonConflict       = "SharedResourceFileConflict"
	ReasonRefreshFailed  = "SharedResourceRefreshFailed"
	ReasonRefreshResumed = "SharedResourceRefreshResumed"
	ReasonKeysChanged    = "SharedResourceKeysChanged"
	ReasonShareReplaced  = "SharedResourceReplaced"
)

// Reasons of a share's SourceAvailable condition.
const (
	ReasonSourceAvailable  = "SourceAvailable"
	ReasonSourceNotFound   = "SourceNotFound"
	ReasonSourceForbidden  = "SourceForbidden"
	ReasonSourceReplaced   = "SourceReplaced"
	ReasonSourceKeyMissing = "SourceKeyMissing"
)

// Objects and names an install creates.
const (
	SourceReaderRole = "shared-resource-csi-source-reader"
	StatusLeaseName  = "shared-resource-csi-status"
	// RoleStatus is --role's value for the status controller.
	RoleStatus = "status"
	// RecordFile is a volume's record in its directory under the driver's state dir.
	RecordFile = "record.json"
	// HealthIdleTimeout is how long the health server keeps an idle connection.
	HealthIdleTimeout = 15 * time.Second
	// FirstPinGrace is how much later than its share a source may be created and still be the
	// share's first object, pinned by the status controller (docs/security.md).
	FirstPinGrace = 10 * time.Second
)

// shareConditions reads a share's status.conditions.
func shareConditions(u *unstructured.Unstructured) ([]metav1.Condition, error) {
	items, found, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil || !found {
		return nil, err
	}
	out := make([]metav1.Condition, 0, len(items))
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("status.conditions holds a %T", it)
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// CrashStep is a crash point of the driver's test build (go build -tags crashpoints), armed by
// the environment variable crashEnv: the process kills itself there.
type CrashStep string

// CrashEnv is the environment variable that arms a crash point of the test build.
const CrashEnv = "SRCSI_TEST_CRASH_AT"

// The crash points of each operation, in the order it reaches them.
var (
	PublishSteps   = []CrashStep{"publish:dir", "publish:tmpfs", "publish:data", "publish:record", "publish:target", "publish:bind"}
	UnpublishSteps = []CrashStep{"unpublish:bind", "unpublish:target", "unpublish:tmpfs", "unpublish:dir"}
	ReconcileSteps = []CrashStep{"reconcile:copies", "reconcile:data", "reconcile:record"}
)

// Quote puts s in double quotes.
func Quote(s string) string { return "\"" + s + "\"" }

// HasOption says whether the comma-separated mount options include opt.
func HasOption(options, opt string) bool { return slices.Contains(strings.Split(options, ","), opt) }

// mountEntry is one line of /proc/self/mountinfo (proc(5)), read by the tests themselves.
type mountEntry struct {
	MajorMinor, Root, MountPoint, Options, FSType, Source, SuperOptions string
}

// ReadMountInfo parses /proc/self/mountinfo.
func ReadMountInfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f)
}

// parseMountInfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER.
func parseMountInfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), " ")
		sep := slices.Index(f, "-")
		if len(f) < 6 || sep < 6 || len(f) < sep+4 {
			return nil, fmt.Errorf("mountinfo line %q: malformed", sc.Text())
		}
		out = append(out, mountEntry{
			MajorMinor: f[2], Root: mountInfoUnescape(f[3]), MountPoint: mountInfoUnescape(f[4]), Options: f[5],
			FSType: f[sep+1], Source: mountInfoUnescape(f[sep+2]), SuperOptions: f[sep+3],
		})
	}
	return out, sc.Err()
}

// mountInfoUnescape undoes the kernel's \NNN octal escapes (space, tab, newline, backslash).
func mountInfoUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal3(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal3(s string) bool {
	if len(s) != 3 || s[0] > '3' {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '7' {
			return false
		}
	}
	return true
}

// MountAt is the topmost mount at path.
func MountAt(entries []mountEntry, path string) (mountEntry, bool) {
	path = filepath.Clean(path)
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == path {
			return entries[i], true
		}
	}
	return mountEntry{}, false
}

var _ = json.Marshal

// Where the chart and its monitoring files are, from the repository's root.
const (
	ChartDir = "charts/shared-resource-csi"
)

// volumeRecord is what the tests read of a volume's record.json (the driver's state on the node).
type volumeRecord struct {
	PodNamespace string `json:"podNamespace"`
	Shares       []struct {
		Bytes int64 `json:"bytes"`
	} `json:"shares"`
	Items []struct {
		Key  string `json:"key"`
		Path string `json:"path"`
	} `json:"items"`
	KeptBytes int64 `json:"keptBytes"`
}

// volumeBytes is what the volume budget charges for a volume whose record.json is recordLen
// bytes: its record in whole pages, its items in the driver's memory (twice: each item's 64 bytes
// and its two strings with an eighth and 16 bytes more), six entries of its own (the tmpfs root,
// record.json, shares/, data/, its payload dir and ..data), its shares' copies, and the view a
// refresh kept.
func volumeBytes(rec volumeRecord, recordLen int) int64 {
	const pageSize = 4096
	n := (int64(recordLen)+pageSize-1)/pageSize*pageSize + 6*EntryBytes + rec.KeptBytes
	str := func(s string) int64 {
		if s == "" {
			return 0
		}
		return int64(len(s)) + int64(len(s))/8 + 16
	}
	for _, it := range rec.Items {
		n += 2 * (64 + str(it.Key) + str(it.Path))
	}
	for _, s := range rec.Shares {
		n += s.Bytes
	}
	return n
}

// UseReview is the SubjectAccessReview the driver sends before a publish: may the pod's
// service account `use` the share.
func UseReview(ns, sa string, kind ShareKind, share string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "use", Group: ShareGroup, Resource: kind.ShareResource(), Name: share,
		},
	}}
}

// DriverAcceptsArgs runs the driver binary with args and --version: it parses and checks every
// flag, then prints its version and exits 0, or refuses them (exit 2) saying why.
func DriverAcceptsArgs(args []string) error {
	bin := os.Getenv("DRIVER_BINARY")
	if bin == "" {
		bin = "_output/bin/shared-resource-csi"
	}
	out, err := exec.Command(bin, append(slices.Clone(args), "--version")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s --version: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return nil
}
