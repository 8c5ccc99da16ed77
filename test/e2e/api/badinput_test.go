package api

// Specification of how the driver meets bad input: every malformed or hostile request the kubelet
// (or anything that can reach the socket) could send gets a clear gRPC error, and changes
// nothing: the mount table and every file, directory and link under the driver's temp root (its
// kubelet root, its state dir and a sentinel tree standing in for the rest of the host) are
// byte-for-byte the same afterwards.
//
// Each publish case is a valid request with exactly one thing wrong, against a share the pod is
// allowed to use: if the check for that one thing regressed, the request would go through and
// mount, so the case would fail. The cases that would have written or mounted elsewhere (".."
// in a target or volume id, symlinked targets) all aim at the sentinel tree.
//
// Not here, and why: a duplicate attribute cannot reach the driver (the volume context is a
// protobuf map; the last of two wire entries wins, and the winner is validated like any value);
// a share listed twice in the shares attribute can, and is a case below. A Secret whose key is
// not a valid file name cannot be created through the API server (it validates keys by the same
// rule), so key checks are covered by TestValidateKey and by FuzzValidateKey and FuzzWrite in
// internal/atomicwriter.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/shared-resource/csi-driver/internal/treesnap"
)

// makeSentinel builds the tree that stands in for the host outside the kubelet's CSI paths:
// files, and directories shaped like a CSI target so that a followed link or a ".." would find
// a place to mount.
func makeSentinel(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"dir", "vol/mount", "pod/volumes/kubernetes.io~csi/vol/mount", "victim"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{
		"passwd": "root:x:0:0::/root:/bin/sh\n", "dir/keep": "host data", "vol/mount/keep": "host data",
		"pod/volumes/kubernetes.io~csi/vol/mount/keep": "host data", "victim/keep": "host data",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
}

// badCase is one request with one thing wrong. setup prepares it (a fresh pod dir, links,
// mounts) and returns the call; the host state is recorded between the two.
type badCase struct {
	name  string
	setup func(t *testing.T) func(ctx context.Context) error
	code  codes.Code
	msg   []string // each must be in the error message
}

func TestBadRequestsGetAClearErrorAndChangeNothing(t *testing.T) {
	e := framework.E2e(t)
	// 256 KiB per volume: a 100 KiB source needs twice that plus 64 KiB and must be refused.
	p := e.StartDriver(t, framework.WithArgs("--tmpfs-size=256Ki"), framework.WithRelist(time.Hour))
	f := newSharedSecret(t, e, p, true)
	// 100 KiB would fit in the tmpfs once, but an update needs room for two copies (see
	// publish): it must be refused up front, not when a later update runs out of space.
	big := append(p.Secret("big"), bytes.Repeat([]byte("x"), 100<<10)...)
	e.CreateSecret(t, f.platform, "big", map[string][]byte{"big.bin": big})
	bigShare := "big-" + framework.RandSuffix()
	e.CreateShare(t, framework.KindSecret, bigShare, f.platform, "big")
	e.Grant(t, f.consumer, framework.KindSecret, bigShare, framework.ServiceAccount(f.consumer, "app"))
	// A second share with a file of the same name as the first one's.
	e.CreateSecret(t, f.platform, "other", map[string][]byte{"ca.crt": p.Secret("other")})
	otherShare := "other-" + framework.RandSuffix()
	e.CreateShare(t, framework.KindSecret, otherShare, f.platform, "other")
	e.Grant(t, f.consumer, framework.KindSecret, otherShare, framework.ServiceAccount(f.consumer, "app"))

	sentinel := filepath.Join(p.Root, "sentinel")
	makeSentinel(t, sentinel)
	sentinelAtStart := framework.SnapshotTree(t, sentinel, true)

	// The control: the request every case below starts from is valid. If it were not, the cases
	// would pass whatever the driver checks. The volume stays published during the cases, so
	// that unpublish cases can aim at a live volume.
	live := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	if err := p.Publish(live); err != nil {
		t.Fatalf("the valid base request failed: %v", err)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, live.Target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}

	// publish builds a fresh, valid volume of a new pod and lets mutate break one thing.
	publish := func(mutate func(t *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest)) func(*testing.T) func(context.Context) error {
		return func(t *testing.T) func(context.Context) error {
			v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
			r := v.PublishRequest()
			mutate(t, v, r)
			return func(ctx context.Context) error { _, err := p.Node.NodePublishVolume(ctx, r); return err }
		}
	}
	attr := func(k, val string) func(*testing.T, *framework.TestVolume, *csi.NodePublishVolumeRequest) {
		return func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) { r.VolumeContext[k] = val }
	}
	drop := func(k string) func(*testing.T, *framework.TestVolume, *csi.NodePublishVolumeRequest) {
		return func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, k)
		}
	}
	unpublish := func(mk func(t *testing.T) *csi.NodeUnpublishVolumeRequest) func(*testing.T) func(context.Context) error {
		return func(t *testing.T) func(context.Context) error {
			r := mk(t)
			return func(ctx context.Context) error { _, err := p.Node.NodeUnpublishVolume(ctx, r); return err }
		}
	}
	podDir := func(v *framework.TestVolume) string { return filepath.Join(p.KubeletRoot, "pods", v.PodUID) }
	symlink := func(t *testing.T, to, at string) {
		t.Helper()
		if err := os.RemoveAll(at); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(to, at); err != nil {
			t.Fatal(err)
		}
	}
	// foreignTarget is a valid CSI target of a pod the driver never saw, with a tmpfs someone
	// else mounted and a file in it.
	foreignTarget := func(t *testing.T) string {
		t.Helper()
		v := p.Volume(f.consumer, "app", nil)
		if err := os.Mkdir(v.Target, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", v.Target, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(v.Target, 0) })
		if err := os.WriteFile(filepath.Join(v.Target, "keep"), []byte("not the driver's"), 0o644); err != nil {
			t.Fatal(err)
		}
		return v.Target
	}

	cases := []badCase{
		// Missing fields.
		{"missing volume id", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }),
			codes.InvalidArgument, []string{"volume_id is required"}},
		{"missing target path", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }),
			codes.InvalidArgument, []string{"target_path is required"}},
		{"missing capability", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }),
			codes.InvalidArgument, []string{"volume_capability is required"}},

		// Target paths.
		{"relative target", publish(func(_ *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.TrimPrefix(v.Target, "/")
		}), codes.InvalidArgument, []string{"must be absolute"}},
		{"target outside the kubelet root", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Join(sentinel, "dir")
		}), codes.InvalidArgument, []string{"is not under the kubelet root dir"}},
		{"target with .. segments out of the kubelet root", publish(func(_ *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			// From .../kubernetes.io~csi/vol, six levels up is the driver's temp root.
			r.TargetPath = filepath.Dir(v.Target) + "/../../../../../../sentinel/dir"
		}), codes.InvalidArgument, []string{`".."`}},
		{"target of the CSI shape with a .. volume name", publish(func(_ *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			// Only the segment check stops this one: it resolves to <pod>/volumes/mount.
			r.TargetPath = podDir(v) + "/volumes/kubernetes.io~csi/../mount"
		}), codes.InvalidArgument, []string{`".."`}},
		{"target with an empty segment", publish(func(_ *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(v.Target, "/volumes/", "/volumes//", 1)
		}), codes.InvalidArgument, []string{"empty"}},
		{"target below a CSI volume path", publish(func(t *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			if err := os.Mkdir(v.Target, 0o750); err != nil {
				t.Fatal(err)
			}
			r.TargetPath = v.Target + "/sub"
		}), codes.InvalidArgument, []string{"is not a kubelet CSI volume path"}},
		{"target of another volume type", publish(func(t *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(v.Target, "kubernetes.io~csi", "kubernetes.io~secret", 1)
			if err := os.MkdirAll(filepath.Dir(r.TargetPath), 0o750); err != nil {
				t.Fatal(err)
			}
		}), codes.InvalidArgument, []string{"is not a kubelet CSI volume path"}},
		{"target with a NUL byte", publish(func(_ *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Dir(filepath.Dir(v.Target)) + "/a\x00b/mount"
		}), codes.InvalidArgument, []string{"target_path", "contains control characters"}},
		{"target with a volume name that is no DNS label", publish(func(t *testing.T, v *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Join(podDir(v), "volumes", "kubernetes.io~csi", "Vol_1", "mount")
			if err := os.MkdirAll(filepath.Dir(r.TargetPath), 0o750); err != nil {
				t.Fatal(err)
			}
		}), codes.InvalidArgument, []string{`invalid volume name segment "Vol_1"`}},
		{"target of another pod", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = live.Target
		}), codes.InvalidArgument, []string{"does not belong to pod uid"}},
		{"target that is a symlink to a host directory", publish(func(t *testing.T, v *framework.TestVolume, _ *csi.NodePublishVolumeRequest) {
			symlink(t, filepath.Join(sentinel, "dir"), v.Target)
		}), codes.InvalidArgument, []string{"is a symlink"}},
		{"target whose volume dir is a symlink", publish(func(t *testing.T, v *framework.TestVolume, _ *csi.NodePublishVolumeRequest) {
			symlink(t, filepath.Join(sentinel, "vol"), filepath.Dir(v.Target))
		}), codes.InvalidArgument, []string{"is a symlink"}},
		{"target whose pod dir is a symlink", publish(func(t *testing.T, v *framework.TestVolume, _ *csi.NodePublishVolumeRequest) {
			symlink(t, filepath.Join(sentinel, "pod"), podDir(v))
		}), codes.InvalidArgument, []string{"is a symlink"}},

		// Volume ids name a directory under the state dir.
		{"volume id with / reaching the sentinel", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			// From <state>/volumes, four levels up is the driver's temp root.
			r.VolumeId = "../../../../sentinel/victim"
		}), codes.InvalidArgument, []string{"volume_id", "is not valid"}},
		{"volume id ..", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) { r.VolumeId = ".." }),
			codes.InvalidArgument, []string{"volume_id", "is not valid"}},
		{"volume id containing ..", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) { r.VolumeId = "csi-..-x" }),
			codes.InvalidArgument, []string{"volume_id", `not contain ".."`}},
		{"volume id already published with other arguments", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeId = live.ID
		}), codes.AlreadyExists, []string{live.ID, "already published with other arguments"}},

		// Attributes.
		{"unknown attribute", publish(attr("sharedSecrets", f.share)),
			codes.InvalidArgument, []string{`unknown volumeAttribute "sharedSecrets"`}},
		{"attribute with an empty name", publish(attr("", "x")),
			codes.InvalidArgument, []string{`unknown volumeAttribute ""`}},
		{"empty share name", publish(attr(framework.AttrSharedSecret, "")),
			codes.InvalidArgument, []string{`SharedSecret name ""`, "not a valid object name"}},
		{"conflicting share attributes", publish(attr(framework.AttrSharedConfigMap, f.share)),
			codes.InvalidArgument, []string{"exactly one", framework.AttrSharedSecret, framework.AttrSharedConfigMap}},
		{"no share attribute", publish(drop(framework.AttrSharedSecret)),
			codes.InvalidArgument, []string{"set one of"}},
		{"share name with a path", publish(attr(framework.AttrSharedSecret, "../"+f.share)),
			codes.InvalidArgument, []string{"not a valid object name"}},
		{"share name not lowercase", publish(attr(framework.AttrSharedSecret, "Corp_CA")),
			codes.InvalidArgument, []string{`"Corp_CA"`, "not a valid object name"}},
		{"refreshResource maybe", publish(attr(framework.AttrRefreshResource, "maybe")),
			codes.InvalidArgument, []string{framework.AttrRefreshResource, `"maybe"`}},
		{"refreshResource empty", publish(attr(framework.AttrRefreshResource, "")),
			codes.InvalidArgument, []string{framework.AttrRefreshResource, `not ""`}},
		{"ephemeral missing", publish(drop(framework.CtxEphemeral)),
			codes.InvalidArgument, []string{"in-line ephemeral"}},
		{"ephemeral false", publish(attr(framework.CtxEphemeral, "false")),
			codes.InvalidArgument, []string{`"false"`, "not PersistentVolumes"}},
		{"pod name missing", publish(drop(framework.CtxPodName)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},
		{"pod namespace missing", publish(drop(framework.CtxPodNamespace)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},
		{"pod uid missing", publish(drop(framework.CtxPodUID)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},
		{"service account missing", publish(drop(framework.CtxServiceAccount)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},

		// Capabilities and CSI features the driver does not have.
		{"block capability", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}), codes.InvalidArgument, []string{"only the mount access type"}},
		{"fs type", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().FsType = "ext4"
		}), codes.InvalidArgument, []string{`fs_type "ext4"`}},
		{"mount flags", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"exec", "suid"}
		}), codes.InvalidArgument, []string{`mount flag "exec" is not supported`}},
		{"SELinux context smuggling another mount option", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"context=system_u:object_r:container_file_t:s0,size=0"}
		}), codes.InvalidArgument, []string{"mount flag", "is not supported"}},
		{"two SELinux contexts", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"context=a_t", "context=b_t"}
		}), codes.InvalidArgument, []string{"two SELinux contexts"}},
		{"volume mount group not a group id", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().VolumeMountGroup = "-1"
		}), codes.InvalidArgument, []string{`volume_mount_group "-1"`}},
		{"staging target path", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			r.StagingTargetPath = filepath.Join(sentinel, "dir")
		}), codes.InvalidArgument, []string{"staging_target_path"}},

		// Several shares in one volume.
		{"shares listing one share twice", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, framework.AttrSharedSecret)
			r.VolumeContext[framework.AttrShares] = "secret/" + f.share + ", secret/" + f.share
		}), codes.InvalidArgument, []string{"secret/" + f.share, "is listed twice"}},
		{"shares and sharedSecret both", publish(attr(framework.AttrShares, "secret/"+f.share)),
			codes.InvalidArgument, []string{"exactly one", framework.AttrShares}},
		{"shares entry of an unknown kind", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, framework.AttrSharedSecret)
			r.VolumeContext[framework.AttrShares] = "secret/" + f.share + ",pod/x"
		}), codes.InvalidArgument, []string{`"pod/x"`, "is not secret/NAME or configmap/NAME"}},
		{"shares entry with a path", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, framework.AttrSharedSecret)
			r.VolumeContext[framework.AttrShares] = "secret/../" + f.share
		}), codes.InvalidArgument, []string{"not a valid object name"}},
		{"shares listing too many", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, framework.AttrSharedSecret)
			var list []string
			for i := range framework.MaxShares + 1 {
				list = append(list, fmt.Sprintf("secret/s%d", i))
			}
			r.VolumeContext[framework.AttrShares] = strings.Join(list, ",")
		}), codes.InvalidArgument, []string{"at most 16"}},
		{"two shares providing the same file", publish(func(_ *testing.T, _ *framework.TestVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, framework.AttrSharedSecret)
			r.VolumeContext[framework.AttrShares] = "secret/" + f.share + ",secret/" + otherShare
		}), codes.FailedPrecondition, []string{`both provide the file "ca.crt"`, framework.AttrItems}},

		// Modes and items: item paths are files inside the volume, checked segment by segment.
		{"defaultMode not octal", publish(attr(framework.AttrDefaultMode, "rw-r--r--")),
			codes.InvalidArgument, []string{framework.AttrDefaultMode, `"rw-r--r--"`}},
		{"defaultMode with the setuid bit", publish(attr(framework.AttrDefaultMode, "4755")),
			codes.InvalidArgument, []string{framework.AttrDefaultMode, `"4755"`}},
		{"item path with .. segments", publish(attr(framework.AttrItems, "ca.crt=certs/../../../../../../sentinel/dir/x")),
			codes.InvalidArgument, []string{framework.AttrItems, `invalid key ".."`}},
		{"item path absolute", publish(attr(framework.AttrItems, "ca.crt=/etc/passwd")),
			codes.InvalidArgument, []string{framework.AttrItems, "must be relative"}},
		{"item path reaching the writer's ..data", publish(attr(framework.AttrItems, "ca.crt=..data/ca.crt")),
			codes.InvalidArgument, []string{framework.AttrItems, `must not start with ".."`}},
		{"item path with an empty segment", publish(attr(framework.AttrItems, "ca.crt=certs//ca.crt")),
			codes.InvalidArgument, []string{framework.AttrItems, "empty"}},
		{"item key with a path", publish(attr(framework.AttrItems, "../ca.crt=x")),
			codes.InvalidArgument, []string{framework.AttrItems, "is not one of the volume's shares"}},
		{"two items with the same path", publish(attr(framework.AttrItems, "ca.crt=x,tls.key=x")),
			codes.InvalidArgument, []string{framework.AttrItems, `path "x" is used twice`}},
		{"item path that is another item's directory", publish(attr(framework.AttrItems, "ca.crt=a,tls.key=a/b")),
			codes.InvalidArgument, []string{framework.AttrItems, `"a" is a file and also the directory of "a/b"`}},
		{"item mode 0000", publish(attr(framework.AttrItems, "ca.crt:0000")),
			codes.InvalidArgument, []string{framework.AttrItems, "unreadable"}},
		{"item selecting a key the source lacks", publish(attr(framework.AttrItems, "ca.crt,nope")),
			codes.FailedPrecondition, []string{`no key "nope"`}},

		// Too big: refused before anything is created.
		{"source larger than the tmpfs size limit", publish(attr(framework.AttrSharedSecret, bigShare)),
			codes.ResourceExhausted, []string{"262144", "raise --tmpfs-size"}},

		// Unpublish only ever removes what the driver published, where it published it.
		{"unpublish /", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: "/"}
		}), codes.InvalidArgument, []string{`target_path "/"`}},
		{"unpublish the kubelet root", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: p.KubeletRoot}
		}), codes.InvalidArgument, []string{"not a kubelet CSI volume path"}},
		{"unpublish a pod dir", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: filepath.Join(p.KubeletRoot, "pods", live.PodUID)}
		}), codes.InvalidArgument, []string{"not a kubelet CSI volume path"}},
		{"unpublish a host dir", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: filepath.Join(sentinel, "dir")}
		}), codes.InvalidArgument, []string{"not under the kubelet root dir"}},
		{"unpublish with .. segments", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: live.Target + "/../../../../../../../sentinel/dir"}
		}), codes.InvalidArgument, []string{`".."`}},
		{"unpublish with a volume id reaching the sentinel", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "../../../../sentinel/victim", TargetPath: live.Target}
		}), codes.InvalidArgument, []string{"volume_id", "is not valid"}},
		{"unpublish without volume id", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{TargetPath: live.Target}
		}), codes.InvalidArgument, []string{"volume_id is required"}},
		{"unpublish without target", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID}
		}), codes.InvalidArgument, []string{"target_path is required"}},
		{"unpublish a live volume at a path it is not published at", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: foreignTarget(t)}
		}), codes.InvalidArgument, []string{live.ID, "is published at", "nothing was changed"}},
		{"unpublish a live volume through a symlink to its target", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			v := p.Volume(f.consumer, "app", nil)
			symlink(t, live.Target, v.Target)
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.ID, TargetPath: v.Target}
		}), codes.InvalidArgument, []string{live.ID, "is published at"}},
		// For a volume the driver does not know, CSI says unpublish succeeds (the kubelet may
		// repeat a call whose answer it lost); success must not mean "cleaned up anyway".
		{"unpublish an unknown volume at a live volume's target", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-never-published", TargetPath: live.Target}
		}), codes.OK, nil},
		{"unpublish an unknown volume at someone else's mount", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-never-published", TargetPath: foreignTarget(t)}
		}), codes.OK, nil},
		{"unpublish an unknown volume at a symlink to a host dir", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			v := p.Volume(f.consumer, "app", nil)
			symlink(t, filepath.Join(sentinel, "dir"), v.Target)
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-never-published", TargetPath: v.Target}
		}), codes.OK, nil},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			call := c.setup(t)
			before := p.HostState(t, sentinel)
			// Aborted (the volume's lock held by a share event's reconcile) is retried, as the
			// kubelet does; it changes nothing either.
			err := p.RetryAborted(func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				return call(ctx)
			})
			st, _ := status.FromError(err)
			if st.Code() != c.code {
				t.Errorf("got %v (%q), want %v", st.Code(), st.Message(), c.code)
			}
			for _, m := range c.msg {
				if !strings.Contains(st.Message(), m) {
					t.Errorf("message %q does not say %q", st.Message(), m)
				}
			}
			before.AssertSame(t, p.HostState(t, sentinel))
			t.Logf("%v: %s", st.Code(), st.Message())
		})
	}

	// The live volume went through all of that untouched and still unpublishes cleanly.
	if err := framework.SameFiles(framework.ReadVolume(t, live.Target), asStrings(f.data)); err != nil {
		t.Fatalf("the live volume changed: %v", err)
	}
	if err := p.Unpublish(live); err != nil {
		t.Fatal(err)
	}
	p.AssertNothingLeft(t, live)
	if d := treesnap.Diff(sentinelAtStart, framework.SnapshotTree(t, sentinel, true)); d != "" {
		t.Errorf("the sentinel tree changed:\n%s", d)
	}
}

// deployClusterRole returns the driver's ClusterRole as deploy.yaml ships it.
func deployClusterRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	docs, err := os.ReadFile("deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(docs), "\n---") {
		var cr rbacv1.ClusterRole
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&cr); err != nil {
			continue
		}
		if cr.Kind == "ClusterRole" && cr.Name == "shared-resource-csi-driver" {
			return &cr
		}
	}
	t.Fatal("deploy.yaml has no ClusterRole shared-resource-csi-driver")
	return nil
}

// A driver whose own ClusterRole lacks `create subjectaccessreviews` gets Forbidden for every
// review. That error must never be read as a grant (the peer bug: a Forbidden was ignored and a
// volume mounted): the publish fails Unavailable, so the kubelet retries, nothing is mounted,
// and once the admin fixes the ClusterRole the retry succeeds. Nor is it read as a denial: a
// published volume whose periodic check fails the same way keeps its data.
func TestSubjectAccessReviewForbiddenIsNeverAGrant(t *testing.T) {
	e := framework.E2e(t)
	full := deployClusterRole(t)
	var rules []rbacv1.PolicyRule
	for _, r := range full.Rules {
		if !slices.Contains(r.Resources, "subjectaccessreviews") {
			rules = append(rules, r)
		}
	}
	if len(rules) == len(full.Rules) {
		t.Fatal("deploy.yaml's ClusterRole has no subjectaccessreviews rule to take away")
	}
	kubeconfig, token, role, driverUser := e.ServiceAccountKubeconfig(t, rules)
	e.SetRules(t, role, driverUser, rules, false)
	p := e.StartDriver(t, framework.WithArgs("--kubeconfig="+kubeconfig))
	p.Secrets = append(p.Secrets, []byte(token)) // the driver's own token must not be logged either
	sentinel := filepath.Join(p.Root, "sentinel")
	makeSentinel(t, sentinel)
	f := newSharedSecret(t, e, p, true)
	// This driver's own account may read the source's namespace, as deploy.yaml's would.
	saNS, saName, _ := strings.Cut(strings.TrimPrefix(driverUser, "system:serviceaccount:"), ":")
	e.GrantSourceRead(t, f.platform, framework.ServiceAccount(saNS, saName))
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})

	before := p.HostState(t, sentinel)
	err := p.Publish(v)
	wantCode(t, err, codes.Unavailable, "subjectaccessreviews", "forbidden", "ClusterRole", f.share)
	t.Logf("publish without the right to review access: %v", err)
	before.AssertSame(t, p.HostState(t, sentinel))
	p.AssertNothingLeft(t, v)

	// The admin restores the rule; the kubelet's retry of the same request now mounts.
	e.SetRules(t, role, driverUser, full.Rules, true)
	framework.Eventually(t, 30*time.Second, func() error { return p.Publish(v) })
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}

	// The rule goes away again: the relist's reviews fail from now on, which must leave the
	// volume as it is (an outage of the check is not a revocation).
	e.SetRules(t, role, driverUser, rules, false)
	time.Sleep(relist + relistSlack)
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("a failing access check changed the volume: %v", err)
	}
	if evs, err := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRevoked); err != nil || len(evs) > 0 {
		t.Errorf("revocation events %v (%v) for a failed access check", evs, err)
	}
	if err := p.Unpublish(v); err != nil {
		t.Fatal(err)
	}
	p.AssertNothingLeft(t, v)
}
