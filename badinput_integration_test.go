//go:build integration

package main

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
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shared-resource/csi-driver/internal/treesnap"
)

// snapshotTree describes every entry under root (treesnap.Take), or fails the test.
func snapshotTree(t *testing.T, root string, withTimes bool) map[string]string {
	t.Helper()
	snap, err := treesnap.Take(root, withTimes)
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return snap
}

// mountTable returns the lines of /proc/self/mountinfo, byte for byte, of every mount under
// root (the driver's kubelet root and state dir, and the sentinel tree), and of every mount
// anywhere of a file system mounted under root (a bind of a volume's tmpfs that leaked out).
// Everything else on the host is left out on purpose: a kubelet and containerd, or other tests'
// drivers, may mount and unmount their own things at any moment. Mount ids are kept: a mount
// taken down and made again is a change.
func mountTable(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	type line struct{ text, device, mountPoint string }
	var lines []line
	ours := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fields := strings.Split(l, " ")
		if len(fields) < 5 {
			t.Fatalf("malformed mountinfo line %q", l)
		}
		mp := mountInfoUnescape(fields[4])
		lines = append(lines, line{l, fields[2], mp})
		if mp == root || strings.HasPrefix(mp, root+"/") {
			ours[fields[2]] = true
		}
	}
	var out []string
	for _, l := range lines {
		if l.mountPoint == root || strings.HasPrefix(l.mountPoint, root+"/") || ours[l.device] {
			out = append(out, l.text)
		}
	}
	return out
}

func diffLines(before, after []string) string {
	var lines []string
	for _, b := range before {
		if !slices.Contains(after, b) {
			lines = append(lines, "- "+b)
		}
	}
	for _, a := range after {
		if !slices.Contains(before, a) {
			lines = append(lines, "+ "+a)
		}
	}
	return strings.Join(lines, "\n")
}

// hostState is what must not change: the mount table, the driver's whole temp root (kubelet
// root, state dir, volumes; without times, since a failed publish may create and remove its
// own volume dir) and the sentinel tree (with times: nothing may even be created in it).
type hostState struct {
	mounts   []string
	tree     map[string]string
	sentinel map[string]string
}

func (p *driverProc) hostState(t *testing.T, sentinel string) hostState {
	t.Helper()
	tree := snapshotTree(t, p.root, false)
	delete(tree, filepath.Base(p.logPath)) // the driver's log grows
	return hostState{mounts: mountTable(t, p.root), tree: tree, sentinel: snapshotTree(t, sentinel, true)}
}

func (s hostState) assertSame(t *testing.T, after hostState) {
	t.Helper()
	if !slices.Equal(s.mounts, after.mounts) {
		t.Errorf("the mount table changed:\n%s", diffLines(s.mounts, after.mounts))
	}
	if d := treesnap.Diff(s.tree, after.tree); d != "" {
		t.Errorf("files under the driver's root changed:\n%s", d)
	}
	if d := treesnap.Diff(s.sentinel, after.sentinel); d != "" {
		t.Errorf("the sentinel tree changed:\n%s", d)
	}
}

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
	e := e2e(t)
	// 256 KiB per volume: a 100 KiB source needs twice that plus 64 KiB and must be refused.
	p := e.startDriver(t, withArgs("--tmpfs-size=256Ki"), withRelist(time.Hour))
	f := newSharedSecret(t, e, p, true)
	// 100 KiB would fit in the tmpfs once, but an update needs room for two copies (see
	// publish): it must be refused up front, not when a later update runs out of space.
	big := append(p.secret("big"), bytes.Repeat([]byte("x"), 100<<10)...)
	e.createSecret(t, f.platform, "big", map[string][]byte{"big.bin": big})
	bigShare := "big-" + randSuffix()
	e.createShare(t, kindSecret, bigShare, f.platform, "big")
	e.grant(t, f.consumer, kindSecret, bigShare, serviceAccount(f.consumer, "app"))
	// A second share with a file of the same name as the first one's.
	e.createSecret(t, f.platform, "other", map[string][]byte{"ca.crt": p.secret("other")})
	otherShare := "other-" + randSuffix()
	e.createShare(t, kindSecret, otherShare, f.platform, "other")
	e.grant(t, f.consumer, kindSecret, otherShare, serviceAccount(f.consumer, "app"))

	sentinel := filepath.Join(p.root, "sentinel")
	makeSentinel(t, sentinel)
	sentinelAtStart := snapshotTree(t, sentinel, true)

	// The control: the request every case below starts from is valid. If it were not, the cases
	// would pass whatever the driver checks. The volume stays published during the cases, so
	// that unpublish cases can aim at a live volume.
	live := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
	if err := p.publish(live); err != nil {
		t.Fatalf("the valid base request failed: %v", err)
	}
	if err := sameFiles(readVolume(t, live.target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}

	// publish builds a fresh, valid volume of a new pod and lets mutate break one thing.
	publish := func(mutate func(t *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest)) func(*testing.T) func(context.Context) error {
		return func(t *testing.T) func(context.Context) error {
			v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
			r := v.publishRequest()
			mutate(t, v, r)
			return func(ctx context.Context) error { _, err := p.node.NodePublishVolume(ctx, r); return err }
		}
	}
	attr := func(k, val string) func(*testing.T, *testVolume, *csi.NodePublishVolumeRequest) {
		return func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { r.VolumeContext[k] = val }
	}
	drop := func(k string) func(*testing.T, *testVolume, *csi.NodePublishVolumeRequest) {
		return func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, k) }
	}
	unpublish := func(mk func(t *testing.T) *csi.NodeUnpublishVolumeRequest) func(*testing.T) func(context.Context) error {
		return func(t *testing.T) func(context.Context) error {
			r := mk(t)
			return func(ctx context.Context) error { _, err := p.node.NodeUnpublishVolume(ctx, r); return err }
		}
	}
	podDir := func(v *testVolume) string { return filepath.Join(p.kubeletRoot, "pods", v.podUID) }
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
		v := p.volume(f.consumer, "app", nil)
		if err := os.Mkdir(v.target, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", v.target, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Unmount(v.target, 0) })
		if err := os.WriteFile(filepath.Join(v.target, "keep"), []byte("not the driver's"), 0o644); err != nil {
			t.Fatal(err)
		}
		return v.target
	}

	cases := []badCase{
		// Missing fields.
		{"missing volume id", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }),
			codes.InvalidArgument, []string{"volume_id is required"}},
		{"missing target path", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }),
			codes.InvalidArgument, []string{"target_path is required"}},
		{"missing capability", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }),
			codes.InvalidArgument, []string{"volume_capability is required"}},

		// Target paths.
		{"relative target", publish(func(_ *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.TrimPrefix(v.target, "/")
		}), codes.InvalidArgument, []string{"must be absolute"}},
		{"target outside the kubelet root", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Join(sentinel, "dir")
		}), codes.InvalidArgument, []string{"is not under the kubelet root dir"}},
		{"target with .. segments out of the kubelet root", publish(func(_ *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			// From .../kubernetes.io~csi/vol, six levels up is the driver's temp root.
			r.TargetPath = filepath.Dir(v.target) + "/../../../../../../sentinel/dir"
		}), codes.InvalidArgument, []string{`".."`}},
		{"target of the CSI shape with a .. volume name", publish(func(_ *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			// Only the segment check stops this one: it resolves to <pod>/volumes/mount.
			r.TargetPath = podDir(v) + "/volumes/kubernetes.io~csi/../mount"
		}), codes.InvalidArgument, []string{`".."`}},
		{"target with an empty segment", publish(func(_ *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(v.target, "/volumes/", "/volumes//", 1)
		}), codes.InvalidArgument, []string{"empty"}},
		{"target below a CSI volume path", publish(func(t *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			if err := os.Mkdir(v.target, 0o750); err != nil {
				t.Fatal(err)
			}
			r.TargetPath = v.target + "/sub"
		}), codes.InvalidArgument, []string{"is not a kubelet CSI volume path"}},
		{"target of another volume type", publish(func(t *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(v.target, "kubernetes.io~csi", "kubernetes.io~secret", 1)
			if err := os.MkdirAll(filepath.Dir(r.TargetPath), 0o750); err != nil {
				t.Fatal(err)
			}
		}), codes.InvalidArgument, []string{"is not a kubelet CSI volume path"}},
		{"target with a NUL byte", publish(func(_ *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Dir(filepath.Dir(v.target)) + "/a\x00b/mount"
		}), codes.InvalidArgument, []string{"target_path", "contains control characters"}},
		{"target with a volume name that is no DNS label", publish(func(t *testing.T, v *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = filepath.Join(podDir(v), "volumes", "kubernetes.io~csi", "Vol_1", "mount")
			if err := os.MkdirAll(filepath.Dir(r.TargetPath), 0o750); err != nil {
				t.Fatal(err)
			}
		}), codes.InvalidArgument, []string{`invalid volume name segment "Vol_1"`}},
		{"target of another pod", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.TargetPath = live.target
		}), codes.InvalidArgument, []string{"does not belong to pod uid"}},
		{"target that is a symlink to a host directory", publish(func(t *testing.T, v *testVolume, _ *csi.NodePublishVolumeRequest) {
			symlink(t, filepath.Join(sentinel, "dir"), v.target)
		}), codes.InvalidArgument, []string{"is a symlink"}},
		{"target whose volume dir is a symlink", publish(func(t *testing.T, v *testVolume, _ *csi.NodePublishVolumeRequest) {
			symlink(t, filepath.Join(sentinel, "vol"), filepath.Dir(v.target))
		}), codes.InvalidArgument, []string{"is a symlink"}},
		{"target whose pod dir is a symlink", publish(func(t *testing.T, v *testVolume, _ *csi.NodePublishVolumeRequest) {
			symlink(t, filepath.Join(sentinel, "pod"), podDir(v))
		}), codes.InvalidArgument, []string{"is a symlink"}},

		// Volume ids name a directory under the state dir.
		{"volume id with / reaching the sentinel", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			// From <state>/volumes, four levels up is the driver's temp root.
			r.VolumeId = "../../../../sentinel/victim"
		}), codes.InvalidArgument, []string{"volume_id", "is not valid"}},
		{"volume id ..", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { r.VolumeId = ".." }),
			codes.InvalidArgument, []string{"volume_id", "is not valid"}},
		{"volume id containing ..", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) { r.VolumeId = "csi-..-x" }),
			codes.InvalidArgument, []string{"volume_id", `not contain ".."`}},
		{"volume id already published with other arguments", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeId = live.id
		}), codes.AlreadyExists, []string{live.id, "already published with other arguments"}},

		// Attributes.
		{"unknown attribute", publish(attr("sharedSecrets", f.share)),
			codes.InvalidArgument, []string{`unknown volumeAttribute "sharedSecrets"`}},
		{"attribute with an empty name", publish(attr("", "x")),
			codes.InvalidArgument, []string{`unknown volumeAttribute ""`}},
		{"empty share name", publish(attr(attrSharedSecret, "")),
			codes.InvalidArgument, []string{`SharedSecret name ""`, "not a valid object name"}},
		{"conflicting share attributes", publish(attr(attrSharedConfigMap, f.share)),
			codes.InvalidArgument, []string{"exactly one", attrSharedSecret, attrSharedConfigMap}},
		{"no share attribute", publish(drop(attrSharedSecret)),
			codes.InvalidArgument, []string{"set one of"}},
		{"share name with a path", publish(attr(attrSharedSecret, "../"+f.share)),
			codes.InvalidArgument, []string{"not a valid object name"}},
		{"share name not lowercase", publish(attr(attrSharedSecret, "Corp_CA")),
			codes.InvalidArgument, []string{`"Corp_CA"`, "not a valid object name"}},
		{"refreshResource maybe", publish(attr(attrRefreshResource, "maybe")),
			codes.InvalidArgument, []string{attrRefreshResource, `"maybe"`}},
		{"refreshResource empty", publish(attr(attrRefreshResource, "")),
			codes.InvalidArgument, []string{attrRefreshResource, `not ""`}},
		{"ephemeral missing", publish(drop(ctxEphemeral)),
			codes.InvalidArgument, []string{"in-line ephemeral"}},
		{"ephemeral false", publish(attr(ctxEphemeral, "false")),
			codes.InvalidArgument, []string{`"false"`, "not PersistentVolumes"}},
		{"pod name missing", publish(drop(ctxPodName)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},
		{"pod namespace missing", publish(drop(ctxPodNamespace)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},
		{"pod uid missing", publish(drop(ctxPodUID)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},
		{"service account missing", publish(drop(ctxServiceAccount)), codes.InvalidArgument, []string{"podInfoOnMount: true"}},

		// Capabilities and CSI features the driver does not have.
		{"block capability", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}), codes.InvalidArgument, []string{"only the mount access type"}},
		{"fs type", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().FsType = "ext4"
		}), codes.InvalidArgument, []string{`fs_type "ext4"`}},
		{"mount flags", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"exec", "suid"}
		}), codes.InvalidArgument, []string{`mount flag "exec" is not supported`}},
		{"SELinux context smuggling another mount option", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"context=system_u:object_r:container_file_t:s0,size=0"}
		}), codes.InvalidArgument, []string{"mount flag", "is not supported"}},
		{"two SELinux contexts", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"context=a_t", "context=b_t"}
		}), codes.InvalidArgument, []string{"two SELinux contexts"}},
		{"volume mount group not a group id", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().VolumeMountGroup = "-1"
		}), codes.InvalidArgument, []string{`volume_mount_group "-1"`}},
		{"staging target path", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			r.StagingTargetPath = filepath.Join(sentinel, "dir")
		}), codes.InvalidArgument, []string{"staging_target_path"}},

		// Several shares in one volume.
		{"shares listing one share twice", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, attrSharedSecret)
			r.VolumeContext[attrShares] = "secret/" + f.share + ", secret/" + f.share
		}), codes.InvalidArgument, []string{"secret/" + f.share, "is listed twice"}},
		{"shares and sharedSecret both", publish(attr(attrShares, "secret/"+f.share)),
			codes.InvalidArgument, []string{"exactly one", attrShares}},
		{"shares entry of an unknown kind", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, attrSharedSecret)
			r.VolumeContext[attrShares] = "secret/" + f.share + ",pod/x"
		}), codes.InvalidArgument, []string{`"pod/x"`, "is not secret/NAME or configmap/NAME"}},
		{"shares entry with a path", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, attrSharedSecret)
			r.VolumeContext[attrShares] = "secret/../" + f.share
		}), codes.InvalidArgument, []string{"not a valid object name"}},
		{"shares listing too many", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, attrSharedSecret)
			var list []string
			for i := range maxShares + 1 {
				list = append(list, fmt.Sprintf("secret/s%d", i))
			}
			r.VolumeContext[attrShares] = strings.Join(list, ",")
		}), codes.InvalidArgument, []string{"at most 16"}},
		{"two shares providing the same file", publish(func(_ *testing.T, _ *testVolume, r *csi.NodePublishVolumeRequest) {
			delete(r.VolumeContext, attrSharedSecret)
			r.VolumeContext[attrShares] = "secret/" + f.share + ",secret/" + otherShare
		}), codes.FailedPrecondition, []string{`both provide the file "ca.crt"`, attrItems}},

		// Modes and items: item paths are files inside the volume, checked segment by segment.
		{"defaultMode not octal", publish(attr(attrDefaultMode, "rw-r--r--")),
			codes.InvalidArgument, []string{attrDefaultMode, `"rw-r--r--"`}},
		{"defaultMode with the setuid bit", publish(attr(attrDefaultMode, "4755")),
			codes.InvalidArgument, []string{attrDefaultMode, `"4755"`}},
		{"item path with .. segments", publish(attr(attrItems, "ca.crt=certs/../../../../../../sentinel/dir/x")),
			codes.InvalidArgument, []string{attrItems, `invalid key ".."`}},
		{"item path absolute", publish(attr(attrItems, "ca.crt=/etc/passwd")),
			codes.InvalidArgument, []string{attrItems, "must be relative"}},
		{"item path reaching the writer's ..data", publish(attr(attrItems, "ca.crt=..data/ca.crt")),
			codes.InvalidArgument, []string{attrItems, `must not start with ".."`}},
		{"item path with an empty segment", publish(attr(attrItems, "ca.crt=certs//ca.crt")),
			codes.InvalidArgument, []string{attrItems, "empty"}},
		{"item key with a path", publish(attr(attrItems, "../ca.crt=x")),
			codes.InvalidArgument, []string{attrItems, "is not one of the volume's shares"}},
		{"two items with the same path", publish(attr(attrItems, "ca.crt=x,tls.key=x")),
			codes.InvalidArgument, []string{attrItems, `path "x" is used twice`}},
		{"item path that is another item's directory", publish(attr(attrItems, "ca.crt=a,tls.key=a/b")),
			codes.InvalidArgument, []string{attrItems, `"a" is a file and also the directory of "a/b"`}},
		{"item mode 0000", publish(attr(attrItems, "ca.crt:0000")),
			codes.InvalidArgument, []string{attrItems, "unreadable"}},
		{"item selecting a key the source lacks", publish(attr(attrItems, "ca.crt,nope")),
			codes.FailedPrecondition, []string{`no key "nope"`}},

		// Too big: refused before anything is created.
		{"source larger than the tmpfs size limit", publish(attr(attrSharedSecret, bigShare)),
			codes.ResourceExhausted, []string{"262144", "raise --tmpfs-size"}},

		// Unpublish only ever removes what the driver published, where it published it.
		{"unpublish /", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: "/"}
		}), codes.InvalidArgument, []string{`target_path "/"`}},
		{"unpublish the kubelet root", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: p.kubeletRoot}
		}), codes.InvalidArgument, []string{"not a kubelet CSI volume path"}},
		{"unpublish a pod dir", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: filepath.Join(p.kubeletRoot, "pods", live.podUID)}
		}), codes.InvalidArgument, []string{"not a kubelet CSI volume path"}},
		{"unpublish a host dir", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: filepath.Join(sentinel, "dir")}
		}), codes.InvalidArgument, []string{"not under the kubelet root dir"}},
		{"unpublish with .. segments", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: live.target + "/../../../../../../../sentinel/dir"}
		}), codes.InvalidArgument, []string{`".."`}},
		{"unpublish with a volume id reaching the sentinel", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "../../../../sentinel/victim", TargetPath: live.target}
		}), codes.InvalidArgument, []string{"volume_id", "is not valid"}},
		{"unpublish without volume id", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{TargetPath: live.target}
		}), codes.InvalidArgument, []string{"volume_id is required"}},
		{"unpublish without target", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id}
		}), codes.InvalidArgument, []string{"target_path is required"}},
		{"unpublish a live volume at a path it is not published at", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: foreignTarget(t)}
		}), codes.InvalidArgument, []string{live.id, "is published at", "nothing was changed"}},
		{"unpublish a live volume through a symlink to its target", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			v := p.volume(f.consumer, "app", nil)
			symlink(t, live.target, v.target)
			return &csi.NodeUnpublishVolumeRequest{VolumeId: live.id, TargetPath: v.target}
		}), codes.InvalidArgument, []string{live.id, "is published at"}},
		// For a volume the driver does not know, CSI says unpublish succeeds (the kubelet may
		// repeat a call whose answer it lost); success must not mean "cleaned up anyway".
		{"unpublish an unknown volume at a live volume's target", unpublish(func(*testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-never-published", TargetPath: live.target}
		}), codes.OK, nil},
		{"unpublish an unknown volume at someone else's mount", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-never-published", TargetPath: foreignTarget(t)}
		}), codes.OK, nil},
		{"unpublish an unknown volume at a symlink to a host dir", unpublish(func(t *testing.T) *csi.NodeUnpublishVolumeRequest {
			v := p.volume(f.consumer, "app", nil)
			symlink(t, filepath.Join(sentinel, "dir"), v.target)
			return &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-never-published", TargetPath: v.target}
		}), codes.OK, nil},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			call := c.setup(t)
			before := p.hostState(t, sentinel)
			// Aborted (the volume's lock held by a share event's reconcile) is retried, as the
			// kubelet does; it changes nothing either.
			err := p.retryAborted(func() error {
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
			before.assertSame(t, p.hostState(t, sentinel))
			t.Logf("%v: %s", st.Code(), st.Message())
		})
	}

	// The live volume went through all of that untouched and still unpublishes cleanly.
	if err := sameFiles(readVolume(t, live.target), asStrings(f.data)); err != nil {
		t.Fatalf("the live volume changed: %v", err)
	}
	if err := p.unpublish(live); err != nil {
		t.Fatal(err)
	}
	p.assertNothingLeft(t, live)
	if d := treesnap.Diff(sentinelAtStart, snapshotTree(t, sentinel, true)); d != "" {
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

// serviceAccountKubeconfig creates a ServiceAccount bound to a ClusterRole with rules, and
// writes a kubeconfig that authenticates as it with a token from the TokenRequest API.
// It returns the kubeconfig's path, the token (a secret), the ClusterRole's name and the
// service account's user name.
func (e *kubeEnv) serviceAccountKubeconfig(t *testing.T, rules []rbacv1.PolicyRule) (path, token, role, user string) {
	t.Helper()
	ctx := context.Background()
	ns := e.namespace(t, "driver")
	sa, err := e.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "driver"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role = "srcsi-test-driver-" + randSuffix()
	if _, err := e.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{serviceAccount(ns, sa.Name)},
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	expiry := int64(3600)
	tr, err := e.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for the driver's service account: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeTokenKubeconfig(path, cfg, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path, tr.Status.Token, role, "system:serviceaccount:" + ns + ":" + sa.Name
}

// setRules replaces a ClusterRole's rules and waits until the authorizer applies them to user:
// whether it may create SubjectAccessReviews.
func (e *kubeEnv) setRules(t *testing.T, role, user string, rules []rbacv1.PolicyRule, canReview bool) {
	t.Helper()
	ctx := context.Background()
	cr, err := e.kube.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cr.Rules = rules
	if _, err := e.kube.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		res, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if res.Status.Allowed != canReview {
			return fmt.Errorf("%s may create subjectaccessreviews: %v, waiting for %v", user, res.Status.Allowed, canReview)
		}
		return nil
	})
}

// A driver whose own ClusterRole lacks `create subjectaccessreviews` gets Forbidden for every
// review. That error must never be read as a grant (the peer bug: a Forbidden was ignored and a
// volume mounted): the publish fails Unavailable, so the kubelet retries, nothing is mounted,
// and once the admin fixes the ClusterRole the retry succeeds. Nor is it read as a denial: a
// published volume whose periodic check fails the same way keeps its data.
func TestSubjectAccessReviewForbiddenIsNeverAGrant(t *testing.T) {
	e := e2e(t)
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
	kubeconfig, token, role, driverUser := e.serviceAccountKubeconfig(t, rules)
	e.setRules(t, role, driverUser, rules, false)
	p := e.startDriver(t, withArgs("--kubeconfig="+kubeconfig))
	p.secrets = append(p.secrets, []byte(token)) // the driver's own token must not be logged either
	sentinel := filepath.Join(p.root, "sentinel")
	makeSentinel(t, sentinel)
	f := newSharedSecret(t, e, p, true)
	// This driver's own account may read the source's namespace, as deploy.yaml's would.
	saNS, saName, _ := strings.Cut(strings.TrimPrefix(driverUser, "system:serviceaccount:"), ":")
	e.grantSourceRead(t, f.platform, serviceAccount(saNS, saName))
	v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})

	before := p.hostState(t, sentinel)
	err := p.publish(v)
	wantCode(t, err, codes.Unavailable, "subjectaccessreviews", "forbidden", "ClusterRole", f.share)
	t.Logf("publish without the right to review access: %v", err)
	before.assertSame(t, p.hostState(t, sentinel))
	p.assertNothingLeft(t, v)

	// The admin restores the rule; the kubelet's retry of the same request now mounts.
	e.setRules(t, role, driverUser, full.Rules, true)
	eventually(t, 30*time.Second, func() error { return p.publish(v) })
	if err := sameFiles(readVolume(t, v.target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}

	// The rule goes away again: the relist's reviews fail from now on, which must leave the
	// volume as it is (an outage of the check is not a revocation).
	e.setRules(t, role, driverUser, rules, false)
	time.Sleep(relist + relistSlack)
	if err := sameFiles(readVolume(t, v.target), asStrings(f.data)); err != nil {
		t.Fatalf("a failing access check changed the volume: %v", err)
	}
	if evs, err := e.podEvents(v.podNS, v.podName, reasonRevoked); err != nil || len(evs) > 0 {
		t.Errorf("revocation events %v (%v) for a failed access check", evs, err)
	}
	if err := p.unpublish(v); err != nil {
		t.Fatal(err)
	}
	p.assertNothingLeft(t, v)
}
