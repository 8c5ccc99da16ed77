package api

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/shared-resource/csi-driver/test/e2e/framework"
)

// TestSanityNodeService runs csi-sanity (github.com/kubernetes-csi/csi-test/v5/pkg/sanity, the
// CSI spec's conformance suite) against the driver binary, a subprocess on a real API server, as
// the kubelet would call it: the node and identity services only. The driver is a node plugin for
// in-line ephemeral volumes and has no controller service.
//
// csi-sanity is written for drivers of PersistentVolumes: it makes a volume with the controller's
// CreateVolume and publishes it at a path of its own choosing. The test plays the kubelet's part
// for an in-line volume between sanity and the driver (sanityKubelet, a gRPC client interceptor on
// sanity's connection): CreateVolume and DeleteVolume are answered on the client side with a volume
// whose context is what the kubelet sends for a pod's `csi:` volume (the pod's name, namespace,
// UID and service account, csi.storage.k8s.io/ephemeral, and sharedSecret naming a SharedSecret
// granted to that service account in the API server); a target path under sanity's temp dir is
// mapped to the kubelet's shape for that pod (<kubelet root>/pods/<uid>/volumes/kubernetes.io~csi/
// <name>/mount, the only shape the driver accepts) and its parent made, as the kubelet makes it;
// and a publish is marked read-only, as the kubelet marks a `readOnly: true` csi volume (the driver
// refuses a writable one). Every other field of every call reaches the driver as sanity sent it, so
// the publish and unpublish specs run the driver's real publish (SubjectAccessReview, source read,
// tmpfs, bind) and unpublish.
//
// Skipped specs, and why:
//   - every spec tagged [Controller Server] (Controller Service, ListSnapshots, GetSnapshot,
//     DeleteSnapshot, CreateSnapshot, ExpandVolume, ModifyVolume, ControllerGetVolumeHealth,
//     ControllerListVolumeHealth): no controller service; the driver's identity does not
//     advertise CONTROLLER_SERVICE (skipped by the test's ginkgo skip list: sanity runs these
//     specs whatever the capabilities say).
//   - "Node Service should work", "Node Service should be idempotent": they need a controller's
//     CreateVolume (skipped by sanity itself: no CONTROLLER_SERVICE).
//   - NodeStageVolume, NodeUnstageVolume: no STAGE_UNSTAGE_VOLUME capability (an in-line volume
//     is published in one step).
//   - NodeGetVolumeStats: no GET_VOLUME_STATS capability.
//   - NodeExpandVolume: no EXPAND_VOLUME capability (the volume's size follows its share).
//   - NodeGetVolumeHealth, NodeGetStorageHealth: neither capability.
//   - NodePublishVolume "with single node multi writer capability": no SINGLE_NODE_MULTI_WRITER.
//   - GroupController (all): no GROUP_CONTROLLER_SERVICE.
//
// The test fails unless every spec that can run passes and the publish/unpublish spec ("should
// remove target path") is among them, so a change that made it skip would be seen.
func TestSanityNodeService(t *testing.T) {
	if os.Getenv(sanityChildEnv) == "" {
		runSanityInAChild(t)
		return
	}
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	k := &sanityKubelet{
		pod: framework.TestVolume{
			PodName: "sanity-" + framework.RandSuffix(), PodNS: f.consumer,
			PodUID: "5a417700-0000-4000-8000-" + framework.RandSuffix() + framework.RandSuffix()[:4],
		},
		share:       f.share,
		kubeletRoot: p.KubeletRoot,
		sanityDir:   filepath.Join(p.Root, "sanity"),
	}
	if err := os.MkdirAll(k.sanityDir, 0o750); err != nil {
		t.Fatal(err)
	}

	cfg := sanity.NewTestConfig()
	cfg.Address = p.Endpoint()
	cfg.TargetPath = filepath.Join(k.sanityDir, "target")
	cfg.StagingPath = filepath.Join(k.sanityDir, "staging")
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithUnaryInterceptor(k.intercept))
	cfg.CheckPath = k.checkPath
	cfg.IDGen = sanityIDs{}
	k.targetParent = cfg.TargetPath

	var report ginkgo.Report
	ginkgo.ReportAfterSuite("csi-sanity counts", func(r ginkgo.Report) { report = r })
	sc := sanity.GinkgoTest(&cfg)
	defer sc.Finalize()
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	reporter.NoColor = true // a log file, not a terminal
	suite.SkipStrings = append(suite.SkipStrings, `\[Controller Server\]`)
	ok := ginkgo.RunSpecs(t, "csi-sanity (node service)", suite, reporter)

	var passed, skipped, failed []string
	for _, s := range report.SpecReports {
		if !s.LeafNodeType.Is(types.NodeTypeIt) {
			continue
		}
		name := s.FullText()
		switch {
		case s.State.Is(types.SpecStatePassed):
			passed = append(passed, name)
		case s.State.Is(types.SpecStateSkipped | types.SpecStatePending):
			why := s.Failure.Message
			if why == "" {
				why = "skip list: no controller service"
			}
			skipped = append(skipped, name+" ("+why+")")
		default:
			failed = append(failed, name)
		}
	}
	t.Logf("csi-sanity: %d passed, %d skipped, %d failed", len(passed), len(skipped), len(failed))
	for _, s := range passed {
		t.Logf("passed: %s", s)
	}
	for _, s := range skipped {
		t.Logf("skipped: %s", s)
	}
	if !ok || len(failed) > 0 {
		t.Errorf("csi-sanity failed: %s", strings.Join(failed, "; "))
	}
	publish := "Node Service NodeUnpublishVolume should remove target path"
	if !contains(passed, publish) {
		t.Errorf("%q did not pass (passed: %s): sanity did not exercise publish and unpublish", publish, strings.Join(passed, "; "))
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// sanityKubelet stands in for the kubelet between csi-sanity and the driver (TestSanityNodeService
// says what it changes and why); one pod's in-line volumes.
type sanityKubelet struct {
	pod          framework.TestVolume // the pod's name, namespace and UID
	share        string               // the SharedSecret its volumes name, granted to its service account
	kubeletRoot  string
	sanityDir    string // sanity's target and staging dirs are made under it
	targetParent string // sanity's TargetPath: its targets are <targetParent>/<name>

	mu   sync.Mutex
	next int
}

// volumeContext is what the kubelet sends for a pod's `csi:` volume naming the share.
func (k *sanityKubelet) volumeContext() map[string]string {
	return map[string]string{
		framework.CtxPodName: k.pod.PodName, framework.CtxPodNamespace: k.pod.PodNS,
		framework.CtxPodUID: k.pod.PodUID, framework.CtxServiceAccount: "app",
		framework.CtxEphemeral: "true", framework.AttrSharedSecret: k.share,
	}
}

// kubeletTarget maps a target sanity chose (<targetParent>/<name>) to where the kubelet puts the
// pod's volume of that name; any other path (empty, say) is left as it is, for the driver to judge.
func (k *sanityKubelet) kubeletTarget(target string) string {
	name, ok := strings.CutPrefix(target, k.targetParent+"/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return target
	}
	// A volume's name is a DNS label: sanity's other_target becomes other-target.
	name = strings.ReplaceAll(name, "_", "-")
	return filepath.Join(k.kubeletRoot, "pods", k.pod.PodUID, "volumes", "kubernetes.io~csi", name, "mount")
}

func (k *sanityKubelet) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch r := req.(type) {
	case *csi.CreateVolumeRequest:
		// The kubelet's side of an in-line volume: it exists as soon as the pod names it.
		k.mu.Lock()
		k.next++
		id := fmt.Sprintf("sanity-%s-%d", framework.RandSuffix(), k.next)
		k.mu.Unlock()
		reply.(*csi.CreateVolumeResponse).Volume = &csi.Volume{
			VolumeId: id, CapacityBytes: r.GetCapacityRange().GetRequiredBytes(), VolumeContext: k.volumeContext(),
		}
		return nil
	case *csi.DeleteVolumeRequest:
		// Nothing to delete: the volume went with its NodeUnpublishVolume.
		return nil
	case *csi.NodePublishVolumeRequest:
		out := proto.Clone(r).(*csi.NodePublishVolumeRequest)
		out.TargetPath = k.kubeletTarget(r.GetTargetPath())
		if out.TargetPath != r.GetTargetPath() {
			// The kubelet makes the target's parent; the driver makes the target itself.
			if err := os.MkdirAll(filepath.Dir(out.TargetPath), 0o750); err != nil {
				return err
			}
		}
		out.Readonly = true
		req = out
	case *csi.NodeUnpublishVolumeRequest:
		out := proto.Clone(r).(*csi.NodeUnpublishVolumeRequest)
		out.TargetPath = k.kubeletTarget(r.GetTargetPath())
		req = out
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// checkPath is sanity's look at a target, at the path the driver was given for it.
func (k *sanityKubelet) checkPath(path string) (sanity.PathKind, error) {
	fi, err := os.Lstat(k.kubeletTarget(path))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return sanity.PathIsNotFound, nil
	case err != nil:
		return "", err
	case fi.IsDir():
		return sanity.PathIsDir, nil
	case fi.Mode().IsRegular():
		return sanity.PathIsFile, nil
	}
	return sanity.PathIsOther, nil
}

// sanityIDs gives the IDs of the specs that send a made-up volume (the ones expecting an error):
// valid volume IDs in the driver's alphabet, so the error is about what the spec means to test.
type sanityIDs struct{}

func (sanityIDs) GenerateUniqueValidVolumeID() string { return "sanity-vol-" + framework.RandSuffix() }
func (sanityIDs) GenerateInvalidVolumeID() string     { return "sanity invalid/volume" }
func (sanityIDs) GenerateUniqueValidNodeID() string   { return "sanity-node-" + framework.RandSuffix() }
func (sanityIDs) GenerateInvalidNodeID() string       { return "sanity invalid/node" }

// sanityChildEnv marks the child process runSanityInAChild starts.
const sanityChildEnv = "SRCSI_SANITY_CHILD"

// runSanityInAChild runs TestSanityNodeService in a child process of this test binary, without
// the -test.parallel flag the suites run with: Ginkgo, which csi-sanity runs on, refuses to start
// when that flag was given (its specs do not run in parallel under go test) and ends the whole
// process, every other test of the package with it.
func runSanityInAChild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestSanityNodeService$", "-test.v", "-test.count", "1", "-test.timeout", "20m")
	cmd.Env = append(os.Environ(), sanityChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("csi-sanity in a child process:\n%s", out)
	if err != nil {
		t.Fatalf("csi-sanity failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestSanityNodeService") {
		t.Fatal("csi-sanity's child process did not pass TestSanityNodeService")
	}
}
