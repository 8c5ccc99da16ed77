package main

// Specification of how a NodePublishVolume request is read and checked (validate.go): what a
// kubelet sends is accepted, anything else refused with the field named; target paths, items,
// modes, mount flags, fsGroup and the shares attribute; and how shares become files
// (keyfiles.go): items select and rename keys (the first share wins a path: internal/volume).

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

const testRoot = "/var/lib/kubelet"
const testUID = "0f1e2d3c-0000-4000-8000-123456789abc"

var goodTarget = testRoot + "/pods/" + testUID + "/volumes/kubernetes.io~csi/ca/mount"

func goodPublishRequest() *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   "csi-0123abcd",
		TargetPath: goodTarget,
		Readonly:   true, // what the kubelet sends for a csi volume with readOnly: true
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		},
		VolumeContext: map[string]string{
			ctxPodName: "web-1", ctxPodNamespace: "team-a", ctxPodUID: testUID,
			ctxServiceAccount: "app", ctxEphemeral: "true", attrSharedSecret: "corp-ca",
		},
	}
}

func TestParsePublishRequestAcceptsAKubeletRequest(t *testing.T) {
	v, err := parsePublishRequest(goodPublishRequest(), testRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := volumeRequest{VolumeID: "csi-0123abcd", TargetPath: goodTarget, Shares: []share.Ref{{Kind: share.KindSecret, Name: "corp-ca"}}, Refresh: true,
		PodNamespace: "team-a", PodName: "web-1", PodUID: testUID, ServiceAccount: "app", DefaultMode: 0o644, GID: -1}
	if !reflect.DeepEqual(*v, want) {
		t.Errorf("got %+v\nwant %+v", *v, want)
	}
}

func TestParsePublishRequestRejectsBadInput(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *csi.NodePublishVolumeRequest)
		want   string // part of the message
	}{
		{"no volume id", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }, "volume_id is required"},
		{"volume id with slash", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "a/b" }, "not valid"},
		{"volume id dotdot", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "a..b" }, "not valid"},
		{"volume id is ..", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = ".." }, "not valid"},
		{"no capability", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }, "volume_capability is required"},
		// A container runtime honours only the kubelet's read-only flag for the container's own
		// bind (runc 1.2+): a writable request would be a writable mount in the container.
		{"writable", func(r *csi.NodePublishVolumeRequest) { r.Readonly = false }, "set `readOnly: true`"},
		{"block capability", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}, "only the mount access type"},
		{"mount flags", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"exec"}
		}, "mount flag"},
		{"fs type", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().FsType = "ext4" }, "fs_type"},
		{"no target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }, "target_path is required"},
		{"relative target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "pods/x/mount" }, "absolute"},
		{"target outside kubelet root", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "/etc/ssl" }, "not under the kubelet root"},
		{"target with ..", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = testRoot + "/pods/" + testUID + "/volumes/kubernetes.io~csi/ca/../../../../../../etc"
		}, "\"..\""},
		{"target with double slash", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(goodTarget, "/pods/", "/pods//", 1)
		}, "empty"},
		{"target of another pod", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(goodTarget, testUID, "aaaaaaaa-0000-4000-8000-123456789abc", 1)
		}, "does not belong"},
		{"target not a csi volume path", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = testRoot + "/pods/" + testUID + "/volumes/kubernetes.io~secret/ca/mount"
		}, "not a kubelet CSI volume path"},
		{"target is kubelet root", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = testRoot }, "not a kubelet CSI volume path"},
		{"ephemeral missing", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, ctxEphemeral) }, "in-line ephemeral"},
		{"ephemeral false", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[ctxEphemeral] = "false" }, "not PersistentVolumes"},
		{"pod info missing", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, ctxServiceAccount) }, "podInfoOnMount"},
		{"both shares", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrSharedConfigMap] = "x" }, "exactly one"},
		{"no share", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, attrSharedSecret) }, "set one of"},
		{"empty share", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrSharedSecret] = "" }, "not a valid object name"},
		{"invalid share name", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrSharedSecret] = "../etc" }, "not a valid object name"},
		{"refresh maybe", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrRefreshResource] = "maybe" }, "\"maybe\""},
		{"unknown attribute", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["sharedSecrets"] = "x" }, "unknown volumeAttribute"},
		{"staging path", func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "/x" }, "staging_target_path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := goodPublishRequest()
			c.mutate(r)
			_, err := parsePublishRequest(r, testRoot)
			if err == nil {
				t.Fatal("accepted")
			}
			if _, ok := err.(*invalidArgument); !ok {
				t.Errorf("error %T is not an invalidArgument", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("message %q does not contain %q", err.Error(), c.want)
			}
		})
	}
}

func TestParsePublishRequestAllowsNewKubeletKeysAndRefreshFalse(t *testing.T) {
	r := goodPublishRequest()
	r.VolumeContext["csi.storage.k8s.io/some.future.key"] = "x"
	r.VolumeContext[attrRefreshResource] = "false"
	v, err := parsePublishRequest(r, testRoot)
	if err != nil {
		t.Fatal(err)
	}
	if v.Refresh {
		t.Error("refreshResource=false parsed as true")
	}
}

func TestValidateTargetPathForUnpublishAcceptsAnyPodUID(t *testing.T) {
	otherPod := strings.Replace(goodTarget, testUID, "9a8b7c6d-0000-4000-8000-000000000001", 1)
	for _, target := range []string{goodTarget, otherPod} {
		if err := validateTargetPath(testRoot, target, ""); err != nil {
			t.Fatalf("%s: %v", target, err)
		}
	}
	// With a pod UID (publish), only that pod's dir is accepted.
	if err := validateTargetPath(testRoot, otherPod, testUID); err == nil {
		t.Errorf("%s accepted for pod %s", otherPod, testUID)
	}
	for _, bad := range []string{"/", testRoot, testRoot + "/pods", testRoot + "/plugins/x/volumes/y", "/etc/passwd"} {
		if err := validateTargetPath(testRoot, bad, ""); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseItemsSelectsRenamesAndSetsModes(t *testing.T) {
	items, err := parseItems(" ca.crt , tls.key=keys/tls.key:0400,tls.crt=keys/tls.crt", oneShare)
	if err != nil {
		t.Fatal(err)
	}
	want := []volume.Item{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.key", Path: "keys/tls.key", Mode: 0o400}, {Key: "tls.crt", Path: "keys/tls.crt"}}
	if len(items) != len(want) {
		t.Fatalf("got %+v", items)
	}
	for i := range want {
		if items[i] != want[i] {
			t.Errorf("item %d: got %+v, want %+v", i, items[i], want[i])
		}
	}
}

func TestParseItemsRejectsUnsafeOrConflictingPaths(t *testing.T) {
	for _, bad := range []string{
		"", "a,,b", "a=../etc/passwd", "a=/etc/passwd", "a=b//c", "a=./b", "a=b/../c", "a=..data/x",
		"../a", "a/b", "a=x,b=x", "a=x,b=x/y", "a:0999", "a:abc", "a:0000", "a:01777", "a=b:",
	} {
		if _, err := parseItems(bad, oneShare); err == nil {
			t.Errorf("items %q accepted", bad)
		}
	}
}

func TestParseModeAcceptsOctalPermissionBitsOnly(t *testing.T) {
	for s, want := range map[string]os.FileMode{"0440": 0o440, "440": 0o440, "0": 0, "0777": 0o777} {
		if m, err := parseMode(s); err != nil || m != want {
			t.Errorf("parseMode(%q) = %v, %v", s, m, err)
		}
	}
	for _, bad := range []string{"", "0800", "1777", "04755", "rw", "-1", "0x1ff", "00440"} {
		if _, err := parseMode(bad); err == nil {
			t.Errorf("parseMode(%q) accepted", bad)
		}
	}
}

func TestMountFlagsAcceptOnlyAnSELinuxContext(t *testing.T) {
	ok := `context="system_u:object_r:container_file_t:s0:c1,c2"`
	if ctx, err := parseMountFlags([]string{ok}); err != nil || ctx != ok {
		t.Errorf("got %q, %v", ctx, err)
	}
	for _, bad := range [][]string{
		{"ro"}, {"exec"}, {"context=a,size=0"}, {`context="a",size=0`}, {`context="a" b`}, {"context="},
		{`context="a"`, `context="b"`}, {"nosuid", `context="a"`},
	} {
		if _, err := parseMountFlags(bad); err == nil {
			t.Errorf("mount flags %q accepted", bad)
		}
	}
}

func TestParsePublishRequestReadsFsGroupAndFileAttributes(t *testing.T) {
	r := goodPublishRequest()
	r.VolumeCapability.GetMount().VolumeMountGroup = "2345"
	r.VolumeContext[attrDefaultMode] = "0440"
	r.VolumeContext[attrItems] = "ca.crt=certs/ca.pem"
	v, err := parsePublishRequest(r, testRoot)
	if err != nil {
		t.Fatal(err)
	}
	if v.GID != 2345 || v.DefaultMode != 0o440 || len(v.Items) != 1 || v.Items[0].Path != "certs/ca.pem" {
		t.Errorf("got %+v", v)
	}
	r.VolumeCapability.GetMount().VolumeMountGroup = "wheel"
	if _, err := parsePublishRequest(r, testRoot); err == nil {
		t.Error("a non-numeric fsGroup was accepted")
	}
}

func TestProjectFilesFollowsItemsAndReportsMissingKeys(t *testing.T) {
	src := map[string][]byte{"ca.crt": []byte("ca"), "tls.key": []byte("key"), "unused": []byte("x")}
	files, err := projectFiles(src, []volume.Item{{Key: "ca.crt", Path: "certs/ca.pem"}, {Key: "tls.key", Path: "tls.key", Mode: 0o400}}, 0, 0o440, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || string(files["certs/ca.pem"].Data) != "ca" || files["certs/ca.pem"].Mode != 0o440 || files["tls.key"].Mode != 0o400 {
		t.Errorf("got %+v", files)
	}
	_, err = projectFiles(src, []volume.Item{{Key: "absent", Path: "a"}}, 0, 0o644, nil)
	if err == nil || !strings.Contains(err.Error(), `"absent"`) {
		t.Errorf("missing key: %v", err)
	}
	all, err := projectFiles(src, nil, 0, 0o600, nil)
	if err != nil || len(all) != 3 || all["unused"].Mode != 0o600 {
		t.Errorf("no items: %+v, %v", all, err)
	}
}

var oneShare = []share.Ref{{Kind: share.KindSecret, Name: "corp-ca"}}

func TestParseSharesListsSeveralSharesAndItemsNameThem(t *testing.T) {
	r := goodPublishRequest()
	delete(r.VolumeContext, attrSharedSecret)
	r.VolumeContext[attrShares] = "secret/corp-ca, configmap/proxy"
	r.VolumeContext[attrItems] = "secret/corp-ca/ca.crt=certs/ca.pem, configmap/proxy/proxy.env"
	v, err := parsePublishRequest(r, testRoot)
	if err != nil {
		t.Fatal(err)
	}
	wantShares := []share.Ref{{Kind: share.KindSecret, Name: "corp-ca"}, {Kind: share.KindConfigMap, Name: "proxy"}}
	if !reflect.DeepEqual(v.Shares, wantShares) {
		t.Errorf("shares %+v", v.Shares)
	}
	wantItems := []volume.Item{{Share: 0, Key: "ca.crt", Path: "certs/ca.pem"}, {Share: 1, Key: "proxy.env", Path: "proxy.env"}}
	if !reflect.DeepEqual(v.Items, wantItems) {
		t.Errorf("items %+v", v.Items)
	}
	for _, bad := range []map[string]string{
		{attrShares: "secret/a, secret/a"},
		{attrShares: "secret/a, configmaps/b"},
		{attrShares: "a"},
		{attrShares: "secret/A_B"},
		{attrShares: "secret/a", attrSharedSecret: "a"},
		{attrShares: "secret/a,configmap/b", attrItems: "ca.crt"},                       // which share?
		{attrShares: "secret/a,configmap/b", attrItems: "secret/zzz/ca.crt"},            // not listed
		{attrShares: "secret/a,configmap/b", attrItems: "secret/a/k=x,configmap/b/k=x"}, // same path
	} {
		r := goodPublishRequest()
		delete(r.VolumeContext, attrSharedSecret)
		for k, v := range bad {
			r.VolumeContext[k] = v
		}
		if _, err := parsePublishRequest(r, testRoot); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The share attributes as OpenShift's manifests write them: the API, spelled out here so that a
// change of the kinds table cannot rename them unnoticed.
const (
	attrSharedSecret    = "sharedSecret"
	attrSharedConfigMap = "sharedConfigMap"
)

// The items attribute is bounded: at most maxItems entries, and at most maxVolumeEntries files
// and directories made by their paths (so a thousand paths sixteen segments deep are refused
// before anything is fetched or written); the message names the bound.
func TestParseItemsBoundsEntriesAndTheirFilesAndDirectories(t *testing.T) {
	list := func(n int, path func(int) string) string {
		entries := make([]string, n)
		for i := range entries {
			entries[i] = fmt.Sprintf("k%d=%s", i, path(i))
		}
		return strings.Join(entries, ",")
	}
	flat := func(i int) string { return fmt.Sprintf("f%d", i) }
	deep := func(i int) string { return fmt.Sprintf("d%d/a/b/c/d/e/f/g/h/i/j/k/l/m/n/f", i) }
	if _, err := parseItems(list(maxItems, flat), oneShare); err != nil {
		t.Errorf("%d items refused: %v", maxItems, err)
	}
	if _, err := parseItems(list(200, deep), oneShare); err != nil {
		t.Errorf("200 items 16 segments deep (3200 files and directories) refused: %v", err)
	}
	for _, tc := range []struct {
		name, items, want string
	}{
		{"too many items", list(maxItems+1, flat), fmt.Sprintf("%d entries; at most %d", maxItems+1, maxItems)},
		{"a thousand items sixteen deep", list(1000, deep), fmt.Sprintf("16000 files and directories; a volume holds at most %d", maxVolumeEntries)},
	} {
		v, err := parsePublishRequest(withAttr(goodPublishRequest(), attrItems, tc.items), testRoot)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), attrItems) {
			t.Errorf("%s: %+v, %v; want refused, saying %q", tc.name, v, err, tc.want)
		}
		var inv *invalidArgument
		if !errors.As(err, &inv) {
			t.Errorf("%s: %T, want an invalidArgument (InvalidArgument)", tc.name, err)
		}
	}
}

func withAttr(r *csi.NodePublishVolumeRequest, key, value string) *csi.NodePublishVolumeRequest {
	r.VolumeContext[key] = value
	return r
}
