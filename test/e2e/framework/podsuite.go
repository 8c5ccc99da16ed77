package framework

// The pod suite (test/e2e/pods), which the three-node suite reuses: the driver installed from the
// cluster's registry as a user installs a release, pods mounting shares, their files, events and
// logs, the node's volumes and mounts, relist cycles counted on the driver's /metrics.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// CanI runs `kubectl auth can-i VERB RESOURCE -n NS --as <the driver>` and returns its answer.
func (s *PodSuite) CanI(t *testing.T, verb, resource, ns string) string {
	t.Helper()
	out, _ := exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, "auth", "can-i", verb, resource, "-n", ns, "--as", DriverUser).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// WaitShareReady waits (one status pass and slack) for the share's Ready condition.
func (s *PodSuite) WaitShareReady(t *testing.T, share string, status metav1.ConditionStatus, reason string, msg ...string) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	Eventually(t, PodsRelist+PodsRelistSlack, func() error {
		cond, u, err := s.ReadyCondition(KindSecret, share)
		if err != nil {
			return err
		}
		for _, m := range append([]string{""}, msg...) {
			if err := WantReady(cond, u, status, reason, m); err != nil {
				return err
			}
		}
		c = cond
		return nil
	})
	return c
}

// SharedToNewPod shares a new Secret ca-bundle of src holding data, and starts pod "app" using
// it in a new namespace whose service account "app" may use the share.
func (s *PodSuite) SharedToNewPod(t *testing.T, src string, data map[string][]byte) (share, ns string) {
	t.Helper()
	s.CreateSecret(t, src, "ca-bundle", data)
	share = "src-" + RandSuffix()
	s.CreateShare(t, KindSecret, share, src, "ca-bundle")
	ns = s.PodNamespace(t, "consumer")
	s.CreateServiceAccount(t, ns, "app")
	s.Grant(t, ns, KindSecret, share, ServiceAccount(ns, "app"))
	s.CreatePod(t, ns, "app", ConsumerSpec{Sa: "app", Attrs: map[string]string{AttrSharedSecret: share}})
	return share, ns
}

// budgetValues give the driver a small container: budget = 96Mi - 8Mi - 64Mi = 24Mi.
var budgetValues = []string{"--set", "resources.limits.memory=96Mi", "--set", "driver.cacheMaxBytes=8388608"}

// BudgetBytes is the volume budget the pod suite's driver runs with.
const BudgetBytes = 24 << 20

// UseSmallDriver gives the driver the small container of budgetValues for the test, and its
// usual one back when the test ends.
func (s *PodSuite) UseSmallDriver(t *testing.T) {
	t.Helper()
	upgrade := func(values ...string) {
		t.Helper()
		before, err := s.DriverPod(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.helmUpgrade(values...); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WaitDriver(context.Background(), before.UID, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	upgrade(budgetValues...)
	t.Cleanup(func() { upgrade("--set", "resources.limits.memory=256Mi", "--set", "driver.cacheMaxBytes=67108864") })
	if got := s.Scrape(t).Sum("sharedresource_volume_bytes_budget", nil); got != BudgetBytes {
		t.Fatalf("budget %v bytes, want %d (derived from the container's 96Mi limit)", got, BudgetBytes)
	}
}

// VolumesOfNamespaces counts the volumes on the node whose records name a pod of one of the
// namespaces, and the bytes the budget charges for them (internal/volume's RecordedBytes).
func (s *PodSuite) VolumesOfNamespaces(t *testing.T, namespaces ...string) (n int, bytes int64) {
	t.Helper()
	records, err := filepath.Glob(filepath.Join(s.Kubelet, "plugins", DriverName, "volumes", "*", "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range records {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // unpublished since the glob
		}
		var rec volumeRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("record %s: %v", path, err)
		}
		if slices.Contains(namespaces, rec.PodNamespace) {
			n++
			bytes += volumeBytes(rec, len(b))
		}
	}
	return n, bytes
}

// containerCgroup finds the memory cgroup of the pod's first container: on cgroup v1 in the memory
// hierarchy's kubepods tree, on cgroup v2 its cri-containerd scope in the local cluster's slices
// (the kubelet's systemd driver, which writes the pod's UID with underscores). v2 says which.
func containerCgroup(p *corev1.Pod) (dir string, v2 bool, ok bool) {
	if len(p.Status.ContainerStatuses) == 0 {
		return "", false, false
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	id = id[strings.Index(id, "://")+3:]
	uid := string(p.UID)
	for _, pattern := range []string{
		"/sys/fs/cgroup/memory/kubepods*/*/pod" + uid + "/" + id,
		"/sys/fs/cgroup/memory/kubepods*/pod" + uid + "/" + id,
	} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0], false, true
		}
	}
	scope := "*pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-" + id + ".scope"
	for _, pattern := range []string{
		"/sys/fs/cgroup/srcsi.slice/*/*kubepods.slice/*/" + scope,
		"/sys/fs/cgroup/srcsi.slice/*/*kubepods.slice/" + scope,
	} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0], true, true
		}
	}
	return "", false, false
}

// memoryStat is KEY's value in DIR's memory.stat, or -1.
func memoryStat(dir, key string) float64 {
	b, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// memoryFile is the number in DIR's file NAME.
func memoryFile(dir, name string) float64 {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	v, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return v
}

// DriverKernelMemory reads what the kernel charges the driver pod's container for files and
// names: the tmpfs pages (memory.stat's shmem), the kernel's own allocations (inodes, dentries,
// names: cgroup v1's memory.kmem.usage_in_bytes, v2's memory.stat kernel), and its whole usage.
// ok is false when the container's cgroup is not found.
func (s *PodSuite) DriverKernelMemory(p *corev1.Pod) (shmem, kmem, usage float64, ok bool) {
	dir, v2, ok := containerCgroup(p)
	if !ok {
		return 0, 0, 0, false
	}
	if v2 {
		return memoryStat(dir, "shmem"), memoryStat(dir, "kernel"), memoryFile(dir, "memory.current"), true
	}
	return memoryStat(dir, "shmem"), memoryFile(dir, "memory.kmem.usage_in_bytes"), memoryFile(dir, "memory.usage_in_bytes"), true
}

// LogCharged logs where the kernel charges the volumes' pages: the shmem (tmpfs) bytes of the
// driver container's memory cgroup and of its pod's, and the container's usage against its limit.
func (s *PodSuite) LogCharged(t *testing.T, p *corev1.Pod, when string) {
	t.Helper()
	container, v2, ok := containerCgroup(p)
	if !ok {
		t.Logf("%s: no memory cgroup found for the first container of pod %s", when, p.UID)
		return
	}
	pod := filepath.Dir(container)
	qos := filepath.Dir(pod) // kubepods/burstable: where a deleted pod's charges go
	if v2 {
		// cgroup v2's memory.stat counts a cgroup's descendants too.
		t.Logf("%s: tmpfs pages (shmem) charged to the driver container's cgroup %.1f MiB, to its pod's with its containers' %.1f MiB, "+
			"to %s's %.1f MiB with its pods' (removed ones included); container usage %.1f MiB of 96 MiB",
			when, memoryStat(container, "shmem")/(1<<20), memoryStat(pod, "shmem")/(1<<20),
			filepath.Base(qos), memoryStat(qos, "shmem")/(1<<20), memoryFile(container, "memory.current")/(1<<20))
		return
	}
	t.Logf("%s: tmpfs pages (shmem) charged to the driver container's cgroup %.1f MiB, to its pod's own %.1f MiB (with its containers' %.1f MiB), "+
		"to %s's %.1f MiB with its pods' (removed ones included); container usage %.1f MiB of 96 MiB",
		when, memoryStat(container, "shmem")/(1<<20), memoryStat(pod, "shmem")/(1<<20), memoryStat(pod, "total_shmem")/(1<<20),
		filepath.Base(qos), memoryStat(qos, "total_shmem")/(1<<20), memoryFile(container, "memory.usage_in_bytes")/(1<<20))
}

const (
	// PodsRelist is the driver's --relist-interval in this suite (set by the overlay).
	PodsRelist = 3 * time.Second
	// PodsRelistSlack covers what a relist deadline adds to the interval: the cycle's own API
	// calls and our polling of the pod through `kubectl exec`.
	PodsRelistSlack = 3 * time.Second
	// PodsCacheTTL is the driver's default --cache-ttl and --authz-cache-ttl, which deploy.yaml
	// keeps: within one TTL a burst of publishes of one share costs one GET and one review.
	PodsCacheTTL = 10 * time.Second

	// PodsDriverNS is the driver's namespace; DriverDaemonSet and DriverSelector are its
	// DaemonSet and the label selector of its pods, as the chart names them.
	PodsDriverNS = DriverNamespace
	// DriverDaemonSet is the chart's DaemonSet of the driver.
	DriverDaemonSet = "shared-resource-csi-driver"
	// DriverSelector selects the driver's pods.
	DriverSelector = "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=node-plugin"
	// StatusDeployment is the status controller (--role=status), the chart's Deployment: the
	// only writer of status.
	StatusDeployment = "shared-resource-csi-status"
	statusSelector   = "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=status-controller"
	// DriverMetricsPort is deploy.yaml's --health-address; the driver pod is on the host network.
	DriverMetricsPort = "9809"

	// PodMount is where consumer pods mount the share.
	PodMount = "/v"
	// PodVolName is the name of the consumer pods' volume of the share.
	PodVolName = "share"
)

// PodSuite is the cluster with the driver deployed.
type PodSuite struct {
	*KubeEnv
	Kubectl  string
	node     string // the first node: where the single-node tests' pods run
	NodeIP   string
	Nodes    []string // every node, the first first: the DaemonSet runs a driver pod on each
	Busybox  string
	Image    string // the driver image the chart deployed
	AuditLog string
	Kubelet  string // kubelet root dir on this node
	// chart names the installed chart for `helm upgrade`: the released chart in the cluster's
	// registry (oci://..., --version, --ca-file), or the chart in this tree.
	chart []string
	// Release is the test release the driver runs now, when it came from the cluster's registry
	// (SRCSI_REGISTRY); nil when the image was imported. An upgrade (PrepareUpgrade) replaces it.
	Release *testRelease
	// Installed is the release the suite installed first, by README.md's install lines; an
	// upgrade leaves it.
	Installed *testRelease
}

var (
	podSuiteOnce sync.Once
	podSuiteVal  *PodSuite
	podSuiteErr  error
)

// How a test shares the driver with the others.
type podsMode int

// The modes of a pod suite test.
const (
	PodsShared podsMode = iota // runs in parallel with other shared tests
	PodsAlone                  // runs with no other pod test: it restarts the driver or counts its requests
)

// podsTurn orders the suite's tests: shared ones hold it for reading, lone ones for writing.
var podsTurn sync.RWMutex

// PodsEnv returns the cluster with the driver deployed from deploy.yaml (once per test binary),
// or fails the test. Every pod test is parallel, so the suite starts only after the package's
// sequential tests (whose own driver processes must not meet a deployed driver, e.g. over the
// status Lease) have finished.
func PodsEnv(t *testing.T, mode podsMode) *PodSuite {
	t.Helper()
	t.Parallel()
	if mode == PodsAlone {
		podsTurn.Lock()
		t.Cleanup(podsTurn.Unlock)
	} else {
		podsTurn.RLock()
		t.Cleanup(podsTurn.RUnlock)
	}
	e := E2e(t)
	podSuiteOnce.Do(func() {
		start := time.Now()
		podSuiteVal, podSuiteErr = deployDriver(e)
		if podSuiteErr == nil {
			fmt.Printf("pods suite: driver image %s deployed and Ready in %v\n", podSuiteVal.Image, time.Since(start).Round(100*time.Millisecond))
		}
	})
	if podSuiteErr != nil {
		t.Fatalf("cannot deploy the driver into the local cluster (run with `make test`, or `make up` then "+
			"`hack/cluster.sh exec -- go test -run TestPods .`): %v", podSuiteErr)
	}
	return podSuiteVal
}

// deployDriver installs the driver with Helm and waits until the DaemonSet's pod is Ready and
// registered with the kubelet. In the local cluster (SRCSI_REGISTRY set by hack/cluster.sh) it is
// installed as a user installs a release: `make release` pushes the image index and the chart to
// the cluster's registry, and the chart is installed from there, its image (pinned by digest)
// pulled by the node. Otherwise (a cluster of `make up`, which starts no registry) the image is
// the static binary alone, written by mkimage (no Docker) and imported into the node, and the
// chart is this tree's.
func deployDriver(e *KubeEnv) (*PodSuite, error) {
	s := &PodSuite{
		KubeEnv:  e,
		Kubectl:  os.Getenv("SRCSI_KUBECTL"),
		node:     os.Getenv("SRCSI_NODE_NAME"),
		NodeIP:   os.Getenv("SRCSI_NODE_IP"),
		Busybox:  os.Getenv("SRCSI_BUSYBOX_IMAGE"),
		AuditLog: os.Getenv("SRCSI_AUDIT_LOG"), // optional: without it, requests are counted by /metrics only
		Kubelet:  os.Getenv("SRCSI_KUBELET_DIR"),
		Nodes:    strings.Fields(os.Getenv("SRCSI_NODES")),
	}
	binDir := os.Getenv("SRCSI_BIN_DIR")
	required := map[string]string{"SRCSI_KUBECTL": s.Kubectl, "HELM": os.Getenv("HELM"), "SRCSI_NODE_NAME": s.node, "SRCSI_NODE_IP": s.NodeIP,
		"SRCSI_BUSYBOX_IMAGE": s.Busybox, "SRCSI_KUBELET_DIR": s.Kubelet, "SRCSI_NODES": os.Getenv("SRCSI_NODES"), "SRCSI_BIN_DIR": binDir}
	for k, v := range required {
		if v == "" {
			return nil, fmt.Errorf("$%s is not set: not in a local cluster started by hack/cluster.sh up", k)
		}
	}
	if m := os.Getenv("SRCSI_MODE"); m != "full" {
		return nil, fmt.Errorf("the cluster runs in mode %q; pods need a node (hack/cluster.sh up without --control-plane-only)", m)
	}
	if reg := os.Getenv("SRCSI_REGISTRY"); reg != "" {
		return deployFromRegistry(s, reg)
	}
	var err error
	if s.Image, err = buildAndImportImage(e.Binary, binDir); err != nil {
		return nil, err
	}

	// Installed as an admin installs it with Helm: the chart's defaults (what deploy.yaml holds)
	// but for the image and a short relist interval. The harness applied deploy.yaml's other
	// objects with `kubectl apply --server-side` before; Helm takes them over (and the fields
	// kubectl's apply owned), as when an admin moves from deploy.yaml to the chart.
	repo, tag := s.Image, "latest"
	if i := strings.LastIndex(s.Image, ":"); i > strings.LastIndex(s.Image, "/") {
		repo, tag = s.Image[:i], s.Image[i+1:]
	}
	install := exec.Command(os.Getenv("HELM"), "--kubeconfig", e.Kubeconfig, "upgrade", "--install", "--take-ownership", "--force-conflicts",
		"shared-resource-csi", ChartDir, "--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "driver.relistInterval="+PodsRelist.String())
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("helm upgrade --install: %v\n%s", err, out)
	}
	s.chart = []string{ChartDir}
	if _, err := s.WaitDriver(context.Background(), "", 2*time.Minute); err != nil {
		return nil, err
	}
	return s, nil
}

// buildAndImportImage writes the driver's image (the static binary alone, with mkimage) and
// imports it into the local cluster's containerd; it returns the image reference.
func buildAndImportImage(binary, binDir string) (string, error) {
	bin, err := staticDriverBinary(binary)
	if err != nil {
		return "", err
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return "", err
	}
	// Tagged by content: a changed binary gets a new tag, so re-applying rolls the DaemonSet.
	image := "docker.io/library/shared-resource-csi:e2e-" + sum[:12]
	dir, err := os.MkdirTemp("", "srcsi-image")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	tar := filepath.Join(dir, "image.tar")
	if err := runTool(filepath.Join(binDir, "mkimage"), "-o", tar, "-tag", image,
		"-entrypoint", "/shared-resource-csi", "-file", bin+":/shared-resource-csi:0755"); err != nil {
		return "", err
	}
	if err := runTool("hack/cluster.sh", "import-image", tar); err != nil {
		return "", err
	}
	return image, nil
}

// staticDriverBinary returns bin if it is statically linked (the image has no libc), or builds
// one that is.
func staticDriverBinary(bin string) (string, error) {
	if f, err := elf.Open(bin); err == nil {
		static := true
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return bin, nil
		}
	}
	dir, err := os.MkdirTemp("", "srcsi-static")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "shared-resource-csi")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building a static driver binary: %v\n%s", err, b)
	}
	return out, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func runTool(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// WaitDriver waits until the DaemonSet runs an up-to-date, Ready driver pod with our image on
// every node (on the first node not the pod notUID), each node's kubelet lists the driver in its
// CSINode, each pod's log says the kubelet accepted its registration (CSINode alone can be
// stale after a restart), and the status controller's Deployment has all its replicas up to
// date with our image and Ready. It returns the first node's driver pod.
func (s *PodSuite) WaitDriver(ctx context.Context, notUID types.UID, timeout time.Duration) (*corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		pod, err := s.driverReady(ctx, notUID)
		if err == nil {
			return pod, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("driver not ready after %v: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (s *PodSuite) driverReady(ctx context.Context, notUID types.UID) (*corev1.Pod, error) {
	ds, err := s.Kube.AppsV1().DaemonSets(PodsDriverNS).Get(ctx, DriverDaemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	st, n := ds.Status, int32(len(s.Nodes))
	if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled != n || st.UpdatedNumberScheduled != n ||
		st.NumberReady != n || st.NumberAvailable != n {
		return nil, fmt.Errorf("DaemonSet status: %+v (want %d nodes)", st, n)
	}
	if err := s.statusControllerReady(ctx); err != nil {
		return nil, err
	}
	var first *corev1.Pod
	for _, node := range s.Nodes {
		pod, err := s.DriverPodOn(ctx, node)
		if err != nil {
			return nil, err
		}
		if node == s.node {
			if pod.UID == notUID {
				return nil, fmt.Errorf("still the old driver pod %s", pod.Name)
			}
			first = pod
		}
		if err := s.DriverPodReady(ctx, node, pod); err != nil {
			return nil, err
		}
	}
	return first, nil
}

// statusControllerReady: the status controller's Deployment runs our image in every replica,
// all up to date and Ready (its readiness probe: the share caches synced).
func (s *PodSuite) statusControllerReady(ctx context.Context) error {
	dep, err := s.Kube.AppsV1().Deployments(PodsDriverNS).Get(ctx, StatusDeployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != s.Image {
		return fmt.Errorf("the status controller's Deployment runs %s, want %s", img, s.Image)
	}
	st, n := dep.Status, ptr.Deref(dep.Spec.Replicas, 1)
	if st.ObservedGeneration < dep.Generation || st.Replicas != n || st.UpdatedReplicas != n || st.ReadyReplicas != n || st.AvailableReplicas != n {
		return fmt.Errorf("the status controller's Deployment status: %+v (want %d replicas)", st, n)
	}
	return nil
}

// DriverPodReady says the driver pod on node runs our image, is Ready, and is registered with the
// node's kubelet.
func (s *PodSuite) DriverPodReady(ctx context.Context, node string, pod *corev1.Pod) error {
	if img := pod.Spec.Containers[0].Image; img != s.Image {
		return fmt.Errorf("driver pod %s runs %s, want %s", pod.Name, img, s.Image)
	}
	if !PodReady(pod) {
		return fmt.Errorf("driver pod %s not Ready", pod.Name)
	}
	csiNode, err := s.Kube.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	listed := false
	for _, d := range csiNode.Spec.Drivers {
		listed = listed || d.Name == DriverName
	}
	if !listed {
		return fmt.Errorf("CSINode %s does not list %s", node, DriverName)
	}
	log, err := s.PodLog(ctx, PodsDriverNS, pod.Name)
	if err != nil {
		return err
	}
	if !strings.Contains(log, "Registered with the kubelet") {
		return fmt.Errorf("driver pod %s has not registered with the kubelet yet", pod.Name)
	}
	return nil
}

// DriverPod returns the first node's driver pod (the one not terminating).
func (s *PodSuite) DriverPod(ctx context.Context) (*corev1.Pod, error) {
	return s.DriverPodOn(ctx, s.node)
}

// DriverPodOn returns the DaemonSet's one pod on node that is not terminating.
func (s *PodSuite) DriverPodOn(ctx context.Context, node string) (*corev1.Pod, error) {
	list, err := s.Kube.CoreV1().Pods(PodsDriverNS).List(ctx, metav1.ListOptions{LabelSelector: DriverSelector,
		FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d driver pods on node %s not terminating, want 1", len(live), node)
	}
	return &live[0], nil
}

// PodReady says whether the pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodLog is the log of the pod ns/name.
func (s *PodSuite) PodLog(ctx context.Context, ns, name string) (string, error) {
	b, err := s.Kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(b), err
}

// DriverLog is the current driver pod's log.
func (s *PodSuite) DriverLog(t *testing.T) string {
	t.Helper()
	pod, err := s.DriverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	log, err := s.PodLog(context.Background(), PodsDriverNS, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// AssertNotLogged checks that no secret value reached the driver's log (deployed with --v=2).
func (s *PodSuite) AssertNotLogged(t *testing.T, secrets ...[]byte) {
	t.Helper()
	log := s.DriverLog(t)
	for _, v := range secrets {
		if strings.Contains(log, string(v)) {
			t.Errorf("the driver pod's log contains a secret value")
		}
	}
}

// PodNamespace creates a namespace (deleted after the test) and waits for its default
// ServiceAccount, without which no pod can be created in it.
func (s *PodSuite) PodNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := s.Namespace(t, prefix)
	Eventually(t, 30*time.Second, func() error {
		_, err := s.Kube.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
	return ns
}

// CreateServiceAccount creates the ServiceAccount ns/name.
func (s *PodSuite) CreateServiceAccount(t *testing.T, ns, name string) {
	t.Helper()
	_, err := s.Kube.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// ConsumerSpec describes a pod mounting a share at /v.
type ConsumerSpec struct {
	Sa       string            // service account; "" is default
	Attrs    map[string]string // the csi volume's volumeAttributes
	Writable bool              // readOnly: false in the csi volume and in the volumeMount
	Script   string            // sh -c script; default: sleep
}

// ConsumerPod is a pod ns/name as c describes it.
func (s *PodSuite) ConsumerPod(ns, name string, c ConsumerSpec) *corev1.Pod {
	script := c.Script
	if script == "" {
		script = "exec sleep 3600"
	}
	grace, no := int64(1), false
	ro := !c.Writable
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "consumer"}},
		Spec: corev1.PodSpec{
			ServiceAccountName:            c.Sa,
			TerminationGracePeriodSeconds: &grace,
			// The share is the only volume: no token volume for the kubelet to fetch.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           s.Busybox,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
				VolumeMounts:    []corev1.VolumeMount{{Name: PodVolName, MountPath: PodMount, ReadOnly: ro}},
			}},
			Volumes: []corev1.Volume{{Name: PodVolName, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver:           DriverName,
				ReadOnly:         &ro,
				VolumeAttributes: c.Attrs,
			}}}},
		},
	}
}

// CreatePod creates the pod ConsumerPod describes.
func (s *PodSuite) CreatePod(t *testing.T, ns, name string, c ConsumerSpec) {
	t.Helper()
	if _, err := s.Kube.CoreV1().Pods(ns).Create(context.Background(), s.ConsumerPod(ns, name, c), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
}

// WaitRunning waits until the pod runs and is Ready, and returns it.
func (s *PodSuite) WaitRunning(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	Eventually(t, timeout, func() error {
		p, err := s.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || !PodReady(p) {
			return fmt.Errorf("pod %s/%s: phase %s, %s", ns, name, p.Status.Phase, s.WhyNotRunning(p))
		}
		pod = p
		return nil
	})
	return pod
}

// WhyNotRunning summarises a pod's container states and its latest FailedMount, for failures.
func (s *PodSuite) WhyNotRunning(p *corev1.Pod) string {
	var parts []string
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			parts = append(parts, "waiting: "+cs.State.Waiting.Reason+" "+cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("terminated: %s (exit %d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
		}
	}
	if evs, err := s.PodEvents(p.Namespace, p.Name, "FailedMount"); err == nil && len(evs) > 0 {
		parts = append(parts, "FailedMount: "+evs[len(evs)-1].Message)
	}
	return strings.Join(parts, "; ")
}

// Exec runs a command in the pod's container (kubectl exec: the API server, the kubelet and
// containerd's streaming server, as a user would), returning stdout, stderr and its error.
func (s *PodSuite) Exec(ns, pod string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command(s.Kubectl, append([]string{"--kubeconfig", s.Kubeconfig, "-n", ns, "exec", pod, "-c", "app", "--"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

// PodFiles returns what the pod sees in its volume: file name -> exact bytes (the kubelet
// atomic writer's `..` entries excluded, as `ls` shows them).
func (s *PodSuite) PodFiles(ns, pod string) (map[string][]byte, error) {
	out, stderr, err := s.Exec(ns, pod, "ls", PodMount)
	if err != nil {
		return nil, fmt.Errorf("ls %s in pod %s: %v: %s", PodMount, pod, err, stderr)
	}
	files := map[string][]byte{}
	for _, name := range strings.Fields(string(out)) {
		b, stderr, err := s.Exec(ns, pod, "cat", PodMount+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("cat %s in pod %s: %v: %s", name, pod, err, stderr)
		}
		files[name] = b
	}
	return files, nil
}

func shortSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// WaitFiles polls the pod's view until it equals want; it returns how long that took.
func (s *PodSuite) WaitFiles(t *testing.T, ns, pod string, want map[string][]byte, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	Eventually(t, timeout, func() error {
		got, err := s.PodFiles(ns, pod)
		if err != nil {
			return err
		}
		if d := SameFiles(got, want); d != nil {
			return fmt.Errorf("pod %s/%s sees: %s", ns, pod, d)
		}
		return nil
	})
	return time.Since(start)
}

// WaitEvent waits for an event with the reason on the pod whose message contains every part.
func (s *PodSuite) WaitEvent(t *testing.T, ns, pod, reason string, timeout time.Duration, parts ...string) corev1.Event {
	t.Helper()
	var found corev1.Event
	Eventually(t, timeout, func() error {
		evs, err := s.PodEvents(ns, pod, reason)
		if err != nil {
			return err
		}
	next:
		for _, ev := range evs {
			for _, p := range parts {
				if !strings.Contains(ev.Message, p) {
					continue next
				}
			}
			found = ev
			return nil
		}
		return fmt.Errorf("no %s event on pod %s/%s mentioning %q (has %d %s events)", reason, ns, pod, parts, len(evs), reason)
	})
	return found
}

// AssertStillRunning checks the pod was never restarted or stopped.
func (s *PodSuite) AssertStillRunning(t *testing.T, ns, name string) {
	t.Helper()
	p, err := s.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || !PodReady(p) {
		t.Errorf("pod %s/%s is no longer running: phase %s, %s", ns, name, p.Status.Phase, s.WhyNotRunning(p))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("pod %s/%s: container %s restarted %d times", ns, name, cs.Name, cs.RestartCount)
		}
	}
}

// PodsRandomBytes returns n random bytes: binary, with NULs and newlines, to check exact bytes
// (and incompressible payloads for the benchmarks).
func PodsRandomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// ShareFixture is a Secret in its own "platform" namespace shared as a SharedSecret.
type ShareFixture struct {
	Platform, Secret, Share string
	data                    map[string][]byte
}

// NewShare shares a new Secret holding data (ShareFixture).
func (s *PodSuite) NewShare(t *testing.T, data map[string][]byte) *ShareFixture {
	t.Helper()
	f := &ShareFixture{Platform: s.SourceNamespace(t, "platform"), Secret: "ca-bundle", Share: "corp-ca-" + RandSuffix(), data: data}
	s.CreateSecret(t, f.Platform, f.Secret, data)
	s.CreateShare(t, KindSecret, f.Share, f.Platform, f.Secret)
	return f
}

// Attrs are the volume attributes naming the share.
func (f *ShareFixture) Attrs() map[string]string { return map[string]string{"sharedSecret": f.Share} }

// EvCount is how many times the event happened.
func EvCount(ev corev1.Event) int32 {
	if ev.Series != nil {
		return ev.Series.Count
	}
	return ev.Count
}

// ReplaceDriverWhileReading replaces the driver pod with replace while the consumer pod reads its
// volume again and again: every read must succeed, and the new driver must resume the volume.
func (s *PodSuite) ReplaceDriverWhileReading(t *testing.T, ns, pod string, data map[string][]byte, how string, replace func(old *corev1.Pod) error) {
	t.Helper()
	old, err := s.DriverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Read the volume from the pod, again and again, until the new driver is up.
	stop := make(chan struct{})
	var reads, failures int
	var firstFailure string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := s.PodFiles(ns, pod)
			reads++
			msg := ""
			if err == nil {
				err = SameFiles(got, data)
			}
			if err != nil {
				msg = err.Error()
			}
			if msg != "" {
				failures++
				if firstFailure == "" {
					firstFailure = msg
				}
			}
		}
	}()
	start := time.Now()
	if err := replace(old); err != nil {
		t.Fatal(err)
	}
	newPod, err := s.WaitDriver(context.Background(), old.UID, 2*time.Minute)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: driver pod %s replaced by %s, Ready and registered %v later; the consumer read its volume %d times meanwhile",
		how, old.Name, newPod.Name, time.Since(start).Round(100*time.Millisecond), reads)
	if failures > 0 {
		t.Errorf("%s: %d of %d reads of the volume failed while the driver was replaced; first: %s", how, failures, reads, firstFailure)
	}
	if m := regexp.MustCompile(`"Recovered volumes" resumed=(\d+)`).FindStringSubmatch(s.DriverLog(t)); m == nil || m[1] == "0" {
		t.Errorf("%s: the new driver pod did not resume the running pod's volume (log: %q)", how, m)
	}
	s.AssertStillRunning(t, ns, pod)

}

// helm runs the helm binary against the cluster.
func (s *PodSuite) helm(args ...string) error {
	out, err := exec.Command(os.Getenv("HELM"), append([]string{"--kubeconfig", s.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// nodeVolume is one pod's volume as it exists on the node.
type nodeVolume struct {
	ID        string // the kubelet's volume handle: the driver's volume id
	PodDir    string // <kubelet>/pods/<uid>
	target    string // the pod's volume mount point
	VolumeDir string // the driver's tmpfs for it
}

// NodeVolume is the pod's volume as the node holds it.
func (s *PodSuite) NodeVolume(t *testing.T, pod *corev1.Pod) *nodeVolume {
	t.Helper()
	v := &nodeVolume{PodDir: filepath.Join(s.Kubelet, "pods", string(pod.UID))}
	csiDir := filepath.Join(v.PodDir, "volumes", "kubernetes.io~csi", PodVolName)
	v.target = filepath.Join(csiDir, "mount")
	b, err := os.ReadFile(filepath.Join(csiDir, "vol_data.json"))
	if err != nil {
		t.Fatalf("the kubelet's record of the volume: %v", err)
	}
	var vd struct {
		VolumeHandle string `json:"volumeHandle"`
	}
	if err := json.Unmarshal(b, &vd); err != nil || vd.VolumeHandle == "" {
		t.Fatalf("vol_data.json: %v (%s)", err, b)
	}
	v.ID = vd.VolumeHandle
	v.VolumeDir = filepath.Join(s.Kubelet, "plugins", DriverName, "volumes", v.ID)
	return v
}

// Mounts lists the mount points of the volume on the node (its tmpfs, its binds, anything in
// the pod's dir).
func (v *nodeVolume) Mounts() []string {
	var out []string
	for _, m := range MountsUnder(filepath.Dir(v.VolumeDir)) {
		if m == v.VolumeDir || strings.HasPrefix(m, v.VolumeDir+"/") {
			out = append(out, m)
		}
	}
	return append(out, MountsUnder(v.PodDir)...)
}

// RunningVolumes counts the volumes of this driver in running pods that are not being deleted.
func (s *PodSuite) RunningVolumes() (int, error) {
	list, err := s.Kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.CSI != nil && v.CSI.Driver == DriverName {
				n++
			}
		}
	}
	return n, nil
}

// podsWindow counts the driver's API requests between two points in time, from the API server's
// audit log (independent of the driver) and from the driver's own /metrics: the node plugins'
// account only. (The status Lease and share status are the status controller's, under its own
// account: they tick with time, not volumes.)
type podsWindow struct {
	s       *PodSuite
	Start   time.Time
	audit   *AuditMark // nil without an audit log
	metrics ScrapedMetrics
}

type windowResult struct {
	Duration time.Duration
	Requests int            // from the audit log if there is one, else from /metrics
	ByKind   map[string]int // verb/resource -> count, Leases included
	Metered  int            // the driver's own count (sharedresource_api_requests_total)
	Cycles   int            // relist cycles completed
}

// StartWindow starts counting the driver's API requests (and metrics) for a window of the test.
func (s *PodSuite) StartWindow(t *testing.T) *podsWindow {
	t.Helper()
	w := &podsWindow{s: s, Start: time.Now(), metrics: s.Scrape(t)}
	if s.AuditLog != "" {
		m, err := MarkAudit(s.AuditLog)
		if err != nil {
			t.Fatal(err)
		}
		w.audit = &m
	}
	return w
}

func (w *podsWindow) End(t *testing.T) windowResult {
	t.Helper()
	m := w.s.Scrape(t)
	r := windowResult{Duration: time.Since(w.Start)}
	r.Cycles = int(m.Sum(MetricRelistCycles, nil) - w.metrics.Sum(MetricRelistCycles, nil))
	metered := m.requests().minus(w.metrics.requests())
	r.Metered = metered.total()
	if w.audit == nil {
		r.Requests, r.ByKind = r.Metered, metered
		return r
	}
	// Every request of the driver's service account, whatever stage it got to.
	audited, err := w.audit.Requests(func(ev AuditEvent) bool {
		return ev.User.Username == DriverUser
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Requests, r.ByKind = audited.total(), audited
	return r
}

// MeasureCycles counts the requests of exactly n relist cycles: from just after one cycle ends
// to just after the n-th next one ends.
func (s *PodSuite) MeasureCycles(t *testing.T, n int) windowResult {
	t.Helper()
	s.WaitCycles(t, 1)
	w := s.StartWindow(t)
	s.WaitCycles(t, n)
	r := w.End(t)
	r.Cycles = n
	return r
}

// WaitCycles waits for n relist cycles of the driver.
func (s *PodSuite) WaitCycles(t *testing.T, n int) {
	t.Helper()
	c0 := s.Scrape(t).Sum(MetricRelistCycles, nil)
	Eventually(t, time.Duration(n+1)*(PodsRelist+PodsRelistSlack), func() error {
		if c := s.Scrape(t).Sum(MetricRelistCycles, nil); c < c0+float64(n) {
			return fmt.Errorf("%v of %d relist cycles", c-c0, n)
		}
		return nil
	})
}

// The driver's metrics the pod suite reads.
const (
	MetricRelistCycles  = "sharedresource_relist_cycle_duration_seconds_count"
	MetricVolumes       = "sharedresource_volumes"
	MetricCSIOperations = "sharedresource_csi_operations_total"
)

// Scrape reads the driver pod's /metrics (it is on the node's network).
func (s *PodSuite) Scrape(t *testing.T) ScrapedMetrics {
	t.Helper()
	m, err := ScrapeMetrics("http://" + s.NodeIP + ":" + DriverMetricsPort + "/metrics")
	if err != nil {
		t.Fatalf("the driver's /metrics: %v", err)
	}
	if !m.Has(MetricRelistCycles, nil) {
		t.Fatalf("the driver's /metrics has no %s", MetricRelistCycles)
	}
	return m
}

// SharedKeys is spec.items: "key" or "key=path" entries.
func SharedKeys(entries ...string) []any {
	out := make([]any, len(entries))
	for i, e := range entries {
		key, path, renamed := strings.Cut(e, "=")
		m := map[string]any{"key": key}
		if renamed {
			m["path"] = path
		}
		out[i] = m
	}
	return out
}

// NewListedShare shares a new Secret holding data, exposing only the items, as the cluster admin.
func (s *PodSuite) NewListedShare(t *testing.T, data map[string][]byte, items []any) *ShareFixture {
	t.Helper()
	f := &ShareFixture{Platform: s.SourceNamespace(t, "platform"), Secret: "issuer", Share: "issuer-ca-" + RandSuffix(), data: data}
	s.CreateSecret(t, f.Platform, f.Secret, data)
	u := ShareObject(KindSecret, f.Share, f.Platform, f.Secret)
	if err := unstructured.SetNestedSlice(u.Object, items, "spec", "items"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Dyn.Resource(ShareGVR(KindSecret)).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the share: %v", err)
	}
	t.Cleanup(func() { s.DeleteShare(t, KindSecret, f.Share) })
	return f
}

// SetSharedKeys replaces the share's list, as the cluster admin.
func (s *PodSuite) SetSharedKeys(t *testing.T, share string, items []any) {
	t.Helper()
	Eventually(t, 10*time.Second, func() error { // a conflict with the status writer is retried
		u, err := s.Dyn.Resource(ShareGVR(KindSecret)).Get(context.Background(), share, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedSlice(u.Object, items, "spec", "items"); err != nil {
			return err
		}
		_, err = s.Dyn.Resource(ShareGVR(KindSecret)).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
}

// GrantedNamespace is a new namespace whose service account "app" may use the share.
func (s *PodSuite) GrantedNamespace(t *testing.T, prefix, share string) string {
	t.Helper()
	ns := s.PodNamespace(t, prefix)
	s.CreateServiceAccount(t, ns, "app")
	s.Grant(t, ns, KindSecret, share, ServiceAccount(ns, "app"))
	return ns
}

// ExposedKeysOf is the share's status.exposedKeys.
func (s *PodSuite) ExposedKeysOf(share string) ([]string, error) {
	u, err := s.Dyn.Resource(ShareGVR(KindSecret)).Get(context.Background(), share, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	keys, _, err := unstructured.NestedStringSlice(u.Object, "status", "exposedKeys")
	return keys, err
}

const (
	notifyExitCode = 42 // the watcher's default --exit-code
	// NotifyRestartBound is the relist bound, then the kubelet noticing the exit (PLEG), removing
	// every container and starting them again in order (the sidecar first).
	NotifyRestartBound = PodsRelist + PodsRelistSlack + 20*time.Second
	// notifyQuiet: how long a test waits to see that nothing restarts: two relist bounds.
	notifyQuiet = 2 * (PodsRelist + PodsRelistSlack)
)

// NotifyDeployment is the recipe: the app reads its share once at start (its log shows what it
// read), the watcher sidecar exits 42 on a real change, and RestartAllContainers restarts both.
// signal: the watcher signals the app's shell instead (shareProcessNamespace), which counts
// the SIGHUPs in a file.
func (s *PodSuite) NotifyDeployment(ns, name, sa string, attrs map[string]string, signal bool) *appsv1.Deployment {
	ro, no, grace := true, false, int64(1)
	uid, gid := int64(1000), int64(2000)
	mount := []corev1.VolumeMount{{Name: PodVolName, MountPath: PodMount, ReadOnly: true}}
	watcher := corev1.Container{
		Name:          "share-watcher",
		Image:         s.Image,
		Args:          []string{"watch", "--dir=" + PodMount},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		RestartPolicyRules: []corev1.ContainerRestartRule{{
			Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{notifyExitCode}},
		}},
		SecurityContext: &corev1.SecurityContext{
			ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: mount,
	}
	app := corev1.Container{
		Name:            "app",
		Image:           s.Busybox,
		ImagePullPolicy: corev1.PullNever,
		// Reads its CA once, at start, as the apps this is for do.
		Command:      []string{"sh", "-c", "echo started; cat " + PodMount + "/ca.crt; echo; exec sleep 3600"},
		VolumeMounts: mount,
	}
	volumes := []corev1.Volume{{Name: PodVolName, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: DriverName, ReadOnly: &ro, VolumeAttributes: attrs,
	}}}}
	var share *bool
	if signal {
		share = ptr.To(true)
		watcher.RestartPolicyRules = nil
		watcher.Args = append(watcher.Args, "--signal=HUP", "--process=sh")
		// sleep in the background so the shell runs its trap at once.
		app.Command = []string{"sh", "-c", "trap 'echo HUP >> /work/hups' HUP; : > /work/hups; while true; do sleep 1 & wait $!; done"}
		app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "work", MountPath: "/work"})
		volumes = append(volumes, corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            sa,
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					ShareProcessNamespace:         share,
					SecurityContext:               &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: ptr.To(true), FSGroup: &gid},
					InitContainers:                []corev1.Container{watcher},
					Containers:                    []corev1.Container{app},
					Volumes:                       volumes,
				},
			},
		},
	}
}

// NotifyPod creates the Deployment and returns its one pod, running and Ready.
func (s *PodSuite) NotifyPod(t *testing.T, d *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	if _, err := s.Kube.AppsV1().Deployments(d.Namespace).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
	var name string
	Eventually(t, 60*time.Second, func() error {
		pods, err := s.Kube.CoreV1().Pods(d.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + d.Name})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("the Deployment %s/%s has %d pods", d.Namespace, d.Name, len(pods.Items))
		}
		name = pods.Items[0].Name
		return nil
	})
	return s.WaitRunning(t, d.Namespace, name, 90*time.Second)
}

// Restarts is the app container's restartCount and whether it runs now.
func Restarts(p *corev1.Pod) (count int32, running bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			return cs.RestartCount, cs.State.Running != nil
		}
	}
	return -1, false
}

// GetPod is the pod ns/name, or fails t.
func (s *PodSuite) GetPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := s.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// AppLog is what the app container's current run printed.
func (s *PodSuite) AppLog(t *testing.T, ns, pod string) string {
	t.Helper()
	b, err := s.Kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// LogContainersIfFailed logs, once t has failed, what each container of the pod ns/name printed:
// its current run, and the run before its last restart. Called before a test's checks, it keeps
// the logs that the deletion of the test's namespace would otherwise take with it.
func (s *PodSuite) LogContainersIfFailed(t *testing.T, ns, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		p, err := s.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Logf("the logs of pod %s/%s: %v", ns, name, err)
			return
		}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, previous := range []bool{true, false} {
				b, err := s.Kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: c.Name, Previous: previous}).DoRaw(ctx)
				run := "current run"
				if previous {
					run = "run before the last restart"
					if err != nil {
						continue // no restart
					}
				}
				t.Logf("pod %s/%s, container %s, %s (%v):\n%s", ns, name, c.Name, run, err, b)
			}
		}
	})
}

// Publishes counts the driver's "Published volume" lines for the pod: NodePublishVolume calls
// that published it (a repeated call for a published volume logs nothing).
func (s *PodSuite) Publishes(t *testing.T, ns, pod string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(s.DriverLog(t), "\n") {
		if strings.Contains(line, `"Published volume"`) && strings.Contains(line, `pod="`+ns+"/"+pod+`"`) {
			n++
		}
	}
	return n
}

// AssertNoRestart checks for notifyQuiet that the app never restarts.
func (s *PodSuite) AssertNoRestart(t *testing.T, ns, pod, why string) {
	t.Helper()
	deadline := time.Now().Add(notifyQuiet)
	for time.Now().Before(deadline) {
		if n, _ := Restarts(s.GetPod(t, ns, pod)); n != 0 {
			t.Fatalf("%s: the app restarted (restartCount %d)", why, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// NotifyShare is a share of a Secret holding ca.crt = ca-v0, and a namespace (named from prefix)
// whose service account "web" may use it.
func (s *PodSuite) NotifyShare(t *testing.T, prefix string) (*ShareFixture, string) {
	t.Helper()
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca-v0")})
	ns := s.PodNamespace(t, prefix)
	s.CreateServiceAccount(t, ns, "web")
	s.Grant(t, ns, KindSecret, f.Share, ServiceAccount(ns, "web"))
	return f, ns
}

// registryPath is where the pod suite's test releases go in the cluster's registry.
const registryPath = "srcsi-e2e"

// testRelease is a release `make release` pushed to the cluster's registry.
type testRelease struct {
	Version      string // the README's VERSION=, or vX.Y.Z-e2e.<commit>
	chartVersion string // the packaged chart's version
	Repo         string // REGISTRY/srcsi-e2e/shared-resource-csi
	IndexDigest  string // the pushed image index
	IndexSig     []byte // cosign's signature of the index (make release COSIGN_KEY=...)
	CosignPub    []byte // the key pair's public key, as the release ships it
	// Readme is the README's install the release was made and installed with (deployFromRegistry),
	// nil for the suite's other releases.
	Readme *ReadmeInstall
	took   time.Duration
}

// Image is the reference the released chart's DaemonSet names: tag and index digest.
func (r *testRelease) Image() string { return r.Repo + ":" + r.Version + "@" + r.IndexDigest }

// chartArgs name the released chart for helm install/upgrade: from the registry, by version,
// trusting the cluster CA.
func (r *testRelease) chartArgs(reg, ca string) []string {
	return []string{"oci://" + reg + "/" + registryPath + "/charts/shared-resource-csi", "--version", r.chartVersion, "--ca-file", ca}
}

// ReadmeInstall is the README's install from source, as written in the first ```sh block of its
// "## Install" section: the `make release` line and the `helm install` line, and the registry
// path they name (REGISTRY=...), which the suite replaces with its cluster's registry.
type ReadmeInstall struct {
	Release, Helm, Registry, Version string
}

// ReadReadmeInstall finds the README's install lines (run from the repository's root).
func ReadReadmeInstall() (*ReadmeInstall, error) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		return nil, err
	}
	_, section, ok := strings.Cut(string(b), "\n## Install\n")
	if !ok {
		return nil, errors.New("README.md has no section \"## Install\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		return nil, errors.New("README.md's Install section has no ```sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	in := &ReadmeInstall{}
	for _, line := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(line, "make release "):
			in.Release = line
		case strings.HasPrefix(line, "helm install "):
			in.Helm = line
		}
	}
	if in.Release == "" || in.Helm == "" {
		return nil, fmt.Errorf("README.md's Install block has no `make release ...` line or no `helm install ...` line:\n%s", block)
	}
	for _, f := range strings.Fields(in.Release) {
		if v, ok := strings.CutPrefix(f, "REGISTRY="); ok {
			in.Registry = v
		}
		if v, ok := strings.CutPrefix(f, "VERSION="); ok {
			in.Version = v
		}
	}
	if in.Registry == "" || in.Version == "" {
		return nil, fmt.Errorf("README.md's %q sets no REGISTRY= or no VERSION=", in.Release)
	}
	if !strings.Contains(in.Helm, "oci://"+in.Registry+"/") {
		return nil, fmt.Errorf("README.md's %q does not install from the registry its `make release` pushes to (%s)", in.Helm, in.Registry)
	}
	return in, nil
}

// deployFromRegistry installs the driver the way the README says, against the cluster's registry:
// its `make release` line and its `helm install` line, run as written with only the registry
// path replaced by the cluster's. What the suite adds is around the lines, not in them: the
// environment of `make release` (the node's platform only, the cluster CA, a cosign key pair for
// the signature test), and for Helm the cluster's kubeconfig and CA, the suite's short relist
// interval, and `upgrade --install --take-ownership --force-conflicts` for `install` (the
// harness applied deploy.yaml's other objects with `kubectl apply --server-side` before; Helm
// takes them over, as when an admin moves from deploy.yaml to the chart). The image is the
// chart's own, pinned by digest.
func deployFromRegistry(s *PodSuite, reg string) (*PodSuite, error) {
	ca := os.Getenv("SRCSI_REGISTRY_CA")
	if ca == "" {
		return nil, fmt.Errorf("$SRCSI_REGISTRY is set but $SRCSI_REGISTRY_CA is not (hack/cluster.sh writes both)")
	}
	in, err := ReadReadmeInstall()
	if err != nil {
		return nil, err
	}
	ours := strings.NewReplacer(in.Registry, reg+"/"+registryPath)
	rel := &testRelease{Version: in.Version, Repo: reg + "/" + registryPath + "/shared-resource-csi", Readme: in}
	if err := runRelease(rel, ca, "", nil, "sh", "-c", ours.Replace(in.Release)); err != nil {
		return nil, fmt.Errorf("README.md's %q, with the cluster's registry: %w", in.Release, err)
	}
	s.Release, s.Installed, s.Image, s.chart = rel, rel, rel.Image(), rel.chartArgs(reg, ca)
	start := time.Now()
	helmLine := strings.Replace(ours.Replace(in.Helm), "helm install ", `"$HELM" --kubeconfig "$KUBECONFIG" upgrade --install --take-ownership --force-conflicts `, 1) +
		` --ca-file "$SRCSI_REGISTRY_CA" --set driver.relistInterval=` + PodsRelist.String()
	helm := exec.Command("sh", "-c", helmLine)
	helm.Env = append(os.Environ(), "KUBECONFIG="+s.Kubeconfig)
	if out, err := helm.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("README.md's %q, with the cluster's registry (%s): %v\n%s", in.Helm, helmLine, err, out)
	}
	if _, err := s.WaitDriver(context.Background(), "", 2*time.Minute); err != nil {
		return nil, err
	}
	fmt.Printf("pods suite: README's install: %s released to %s in %v (build and push, linux/%s only); helm install to driver Ready: %v\n",
		rel.Version, rel.Repo, rel.took.Round(100*time.Millisecond), runtime.GOARCH, time.Since(start).Round(100*time.Millisecond))
	return s, nil
}

// releaseToRegistry runs `make release` for base-e2e.<commit> into the cluster's registry, the
// image for the node's platform only (the four-platform release is tools/ociimage's tests' job),
// signed with a fresh cosign key pair, its notes from a changelog of its own (a test version has
// no section in CHANGELOG.md).
func releaseToRegistry(reg, ca, base string) (*testRelease, error) {
	commit, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return nil, fmt.Errorf("git rev-parse: %v", err)
	}
	rel := &testRelease{Version: base + "-e2e." + strings.TrimSpace(string(commit)), Repo: reg + "/" + registryPath + "/shared-resource-csi"}
	dir, err := os.MkdirTemp("", "srcsi-changelog")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	changelog, err := testChangelog(dir, rel.Version, "A test release of the pod suite (test/e2e/pods/registry_test.go).")
	if err != nil {
		return nil, err
	}
	if err := runRelease(rel, ca, "", []string{"CHANGELOG=" + changelog}, "make", "release", "VERSION="+rel.Version, "REGISTRY="+reg+"/"+registryPath); err != nil {
		return nil, err
	}
	return rel, nil
}

// testChangelog writes, in dir, a changelog whose one section is version's, holding note: a test
// version has no section in CHANGELOG.md, and `make release` takes its notes from one.
func testChangelog(dir, version, note string) (string, error) {
	changelog := filepath.Join(dir, "CHANGELOG.md")
	err := os.WriteFile(changelog, []byte("# Changelog\n\n## ["+strings.TrimPrefix(version, "v")+"]\n\n"+note+"\n"), 0o644)
	return changelog, err
}

// runRelease runs a `make release` command line (args) for rel into the cluster's registry: for
// the node's platform only, signed with a fresh cosign key pair, env added, in dir (the working
// directory when ""); then reads what it wrote into rel.
func runRelease(rel *testRelease, ca, dir string, env []string, args ...string) error {
	keys, err := os.MkdirTemp("", "srcsi-release")
	if err != nil {
		return err
	}
	defer os.RemoveAll(keys)
	cosign, err := filepath.Abs("_output/bin/cosign")
	if err != nil {
		return err
	}
	password := "COSIGN_PASSWORD=" + RandSuffix()
	gen := exec.Command(cosign, "generate-key-pair")
	gen.Dir, gen.Env = keys, append(os.Environ(), password)
	if out, err := gen.CombinedOutput(); err != nil {
		return fmt.Errorf("cosign generate-key-pair (make test builds cosign): %v\n%s", err, out)
	}
	out := filepath.Join(keys, "out")
	start := time.Now()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "RELEASE_OUT="+out, "PLATFORMS=linux/"+runtime.GOARCH, "REGISTRY_CA_FILE="+ca,
		"REGISTRY_INSECURE=0", "COSIGN_KEY="+filepath.Join(keys, "cosign.key"), password), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, b)
	}
	rel.took = time.Since(start)
	digest, err := os.ReadFile(filepath.Join(out, "index-digest"))
	if err != nil {
		return err
	}
	rel.IndexDigest = strings.TrimSpace(string(digest))
	charts, _ := filepath.Glob(filepath.Join(out, "shared-resource-csi-*.tgz"))
	if len(charts) != 1 {
		return fmt.Errorf("make release packaged %d charts, want 1: %v", len(charts), charts)
	}
	rel.chartVersion = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(charts[0]), "shared-resource-csi-"), ".tgz")
	if rel.IndexSig, err = os.ReadFile(filepath.Join(out, "index.sig")); err != nil {
		return err
	}
	if rel.CosignPub, err = os.ReadFile(filepath.Join(out, "cosign.pub")); err != nil {
		return err
	}
	return nil
}

// PrepareUpgrade readies a `helm upgrade` that rolls the driver, and returns it: from the
// registry, to a newer release (another version, so another binary and index digest), pushed
// here so the upgrade itself is only Helm's, as a user upgrades; without the registry, a changed
// value of this tree's chart.
func (s *PodSuite) PrepareUpgrade() (func() error, error) {
	if s.Release == nil {
		return func() error { return s.helmUpgrade("--set", "driver.logLevel=3") }, nil
	}
	reg, ca := os.Getenv("SRCSI_REGISTRY"), os.Getenv("SRCSI_REGISTRY_CA")
	rel, err := releaseToRegistry(reg, ca, "v0.1.1")
	if err != nil {
		return nil, err
	}
	if rel.IndexDigest == s.Release.IndexDigest {
		return nil, fmt.Errorf("release %s has the index digest of %s (%s): the upgrade would change nothing", rel.Version, s.Release.Version, rel.IndexDigest)
	}
	fmt.Printf("pods suite: %s released to %s in %v for the upgrade\n", rel.Version, rel.Repo, rel.took.Round(100*time.Millisecond))
	return func() error {
		s.Release, s.Image, s.chart = rel, rel.Image(), rel.chartArgs(reg, ca)
		return s.helmUpgrade()
	}, nil
}

// helmUpgrade upgrades the release to s.chart, keeping the values set so far and adding values.
func (s *PodSuite) helmUpgrade(values ...string) error {
	return s.helm(append(append([]string{"upgrade", "shared-resource-csi"}, s.chart...), append([]string{"--reset-then-reuse-values"}, values...)...)...)
}

// CheckPulledFromRelease checks that the driver pod runs the released image, pulled from the registry. The
// kubelet's imageID is what containerd's CRI reports as the image's reference: the first of the
// image's repo digests, REPO@DIGEST with the digest it was pulled by. The chart names the image
// by the index digest, so that is the digest, not the linux/amd64 manifest's the node went on to
// fetch (nor the config digest containerd uses as image ID). An imported image has no repo
// digest in that repository, so this also tells that the node pulled it.
func (s *PodSuite) CheckPulledFromRelease(pod *corev1.Pod) error {
	if len(pod.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("driver pod %s has no container status", pod.Name)
	}
	if got, want := pod.Status.ContainerStatuses[0].ImageID, s.Release.Repo+"@"+s.Release.IndexDigest; got != want {
		return fmt.Errorf("driver pod %s: imageID %q, want %q (the index %s pushed)", pod.Name, got, want, s.Release.Version)
	}
	return nil
}

// ExampleManifest is the example file (a path under examples/) as a user applies it, with the
// images swapped for the cluster's: busybox for the local one, and the driver's image, which the
// examples name as README.md's install from source produces it, for the one the suite installed
// (that very install, against the cluster's registry). An example that names another driver
// image fails the test.
func (s *PodSuite) ExampleManifest(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	manifest := regexp.MustCompile(`(?m)^( *)image: busybox:.*$`).ReplaceAllString(string(b), "${1}image: "+s.Busybox+"\n${1}imagePullPolicy: Never")
	in, err := ReadReadmeInstall()
	if err != nil {
		t.Fatal(err)
	}
	readmeImage := "image: " + in.Registry + "/shared-resource-csi:" + in.Version + "\n"
	if !strings.Contains(manifest, readmeImage) {
		t.Fatalf("%s does not run the image README.md's install produces (%s)", file, strings.TrimSpace(readmeImage))
	}
	return strings.ReplaceAll(manifest, readmeImage, "image: "+s.Image+"\n")
}
