//go:build integration

package main

// The real-pod suite: the driver installed as users install it, with the Helm chart (deploy.yaml
// is that chart rendered), only the image and a short relist interval set, a real kubelet
// calling it, real pods reading their volumes. Each test is one user story (docs/local-cluster.md
// lists them). They run in the local cluster's network namespace (hack/test.sh, or
// `hack/cluster.sh exec -- go test -tags integration -run TestPods .`), on the node itself as
// root, so they can also look at what the volumes leave on the node.
//
// All run after the package's other tests; TestPodsDriverRecreated and TestPodsHundredOnOneShare
// run alone (they restart the driver and count its API requests), the others in parallel.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	// podsRelist is the driver's --relist-interval in this suite (set by the overlay).
	podsRelist = 3 * time.Second
	// podsRelistSlack covers what a relist deadline adds to the interval: the cycle's own API
	// calls and our polling of the pod through `kubectl exec`.
	podsRelistSlack = 3 * time.Second
	// podsCacheTTL is the driver's default --cache-ttl and --authz-cache-ttl, which deploy.yaml
	// keeps: within one TTL a burst of publishes of one share costs one GET and one review.
	podsCacheTTL = 10 * time.Second

	podsDriverNS    = driverNamespace
	driverDaemonSet = "shared-resource-csi-driver"
	driverSelector  = "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=node-plugin"
	// The status controller (--role=status), the chart's Deployment: the only writer of status.
	statusDeployment = "shared-resource-csi-status"
	statusSelector   = "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=status-controller"
	// driverMetricsPort is deploy.yaml's --health-address; the driver pod is on the host network.
	driverMetricsPort = "9809"

	podMount   = "/v" // where consumer pods mount the share
	podVolName = "share"
)

// podSuite is the cluster with the driver deployed.
type podSuite struct {
	*kubeEnv
	kubectl  string
	node     string // the first node: where the single-node tests' pods run
	nodeIP   string
	nodes    []string // every node, the first first: the DaemonSet runs a driver pod on each
	busybox  string
	image    string // the driver image the chart deployed
	auditLog string
	kubelet  string // kubelet root dir on this node
	// chart names the installed chart for `helm upgrade`: the released chart in the cluster's
	// registry (oci://..., --version, --ca-file), or the chart in this tree.
	chart []string
	// release is the test release the driver was installed from, when it came from the cluster's
	// registry (SRCSI_REGISTRY); nil when the image was imported.
	release *testRelease
}

var (
	podSuiteOnce sync.Once
	podSuiteVal  *podSuite
	podSuiteErr  error
)

// How a test shares the driver with the others.
type podsMode int

const (
	podsShared podsMode = iota // runs in parallel with other shared tests
	podsAlone                  // runs with no other pod test: it restarts the driver or counts its requests
)

// podsTurn orders the suite's tests: shared ones hold it for reading, lone ones for writing.
var podsTurn sync.RWMutex

// podsEnv returns the cluster with the driver deployed from deploy.yaml (once per test binary),
// or fails the test. Every pod test is parallel, so the suite starts only after the package's
// sequential tests (whose own driver processes must not meet a deployed driver, e.g. over the
// status Lease) have finished.
func podsEnv(t *testing.T, mode podsMode) *podSuite {
	t.Helper()
	t.Parallel()
	if mode == podsAlone {
		podsTurn.Lock()
		t.Cleanup(podsTurn.Unlock)
	} else {
		podsTurn.RLock()
		t.Cleanup(podsTurn.RUnlock)
	}
	e := e2e(t)
	podSuiteOnce.Do(func() {
		start := time.Now()
		podSuiteVal, podSuiteErr = deployDriver(e)
		if podSuiteErr == nil {
			fmt.Printf("pods suite: driver image %s deployed and Ready in %v\n", podSuiteVal.image, time.Since(start).Round(100*time.Millisecond))
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
// pulled by the node. Otherwise (hack/e2e-kind.sh, no registry) the image is the static binary
// alone, written by mkimage (no Docker) and imported into the node, and the chart is this tree's.
func deployDriver(e *kubeEnv) (*podSuite, error) {
	s := &podSuite{
		kubeEnv:  e,
		kubectl:  os.Getenv("SRCSI_KUBECTL"),
		node:     os.Getenv("SRCSI_NODE_NAME"),
		nodeIP:   os.Getenv("SRCSI_NODE_IP"),
		busybox:  os.Getenv("SRCSI_BUSYBOX_IMAGE"),
		auditLog: os.Getenv("SRCSI_AUDIT_LOG"), // optional: without it, requests are counted by /metrics only
		kubelet:  os.Getenv("SRCSI_KUBELET_DIR"),
		image:    os.Getenv("SRCSI_DRIVER_IMAGE"), // set: already on the node (hack/e2e-kind.sh); unset: built here
		nodes:    strings.Fields(os.Getenv("SRCSI_NODES")),
	}
	if len(s.nodes) == 0 { // a cluster without the list (hack/e2e-kind.sh): the one node
		s.nodes = []string{s.node}
	}
	binDir := os.Getenv("SRCSI_BIN_DIR")
	required := map[string]string{"SRCSI_KUBECTL": s.kubectl, "HELM": os.Getenv("HELM"), "SRCSI_NODE_NAME": s.node, "SRCSI_NODE_IP": s.nodeIP,
		"SRCSI_BUSYBOX_IMAGE": s.busybox, "SRCSI_KUBELET_DIR": s.kubelet}
	if s.image == "" {
		required["SRCSI_BIN_DIR"] = binDir
	}
	for k, v := range required {
		if v == "" {
			return nil, fmt.Errorf("$%s is not set: not in a local cluster started by hack/cluster.sh up", k)
		}
	}
	if m := os.Getenv("SRCSI_MODE"); m != "full" {
		return nil, fmt.Errorf("the cluster runs in mode %q; pods need a node (hack/cluster.sh up without --control-plane-only)", m)
	}
	if reg := os.Getenv("SRCSI_REGISTRY"); reg != "" && s.image == "" {
		return deployFromRegistry(s, reg)
	}
	if s.image == "" {
		var err error
		if s.image, err = buildAndImportImage(e.binary, binDir); err != nil {
			return nil, err
		}
	}

	// Installed as an admin installs it with Helm: the chart's defaults (what deploy.yaml holds)
	// but for the image and a short relist interval. The harness applied deploy.yaml's other
	// objects with `kubectl apply --server-side` before; Helm takes them over (and the fields
	// kubectl's apply owned), as when an admin moves from deploy.yaml to the chart.
	repo, tag := s.image, "latest"
	if i := strings.LastIndex(s.image, ":"); i > strings.LastIndex(s.image, "/") {
		repo, tag = s.image[:i], s.image[i+1:]
	}
	install := exec.Command(os.Getenv("HELM"), "--kubeconfig", e.kubeconfig, "upgrade", "--install", "--take-ownership", "--force-conflicts",
		"shared-resource-csi", chartDir, "--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "driver.relistInterval="+podsRelist.String())
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("helm upgrade --install: %v\n%s", err, out)
	}
	s.chart = []string{chartDir}
	if _, err := s.waitDriver(context.Background(), "", 2*time.Minute); err != nil {
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

// waitDriver waits until the DaemonSet runs an up-to-date, Ready driver pod with our image on
// every node (on the first node not the pod notUID), each node's kubelet lists the driver in its
// CSINode, each pod's log says the kubelet accepted its registration (CSINode alone can be
// stale after a restart), and the status controller's Deployment has all its replicas up to
// date with our image and Ready. It returns the first node's driver pod.
func (s *podSuite) waitDriver(ctx context.Context, notUID types.UID, timeout time.Duration) (*corev1.Pod, error) {
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

func (s *podSuite) driverReady(ctx context.Context, notUID types.UID) (*corev1.Pod, error) {
	ds, err := s.kube.AppsV1().DaemonSets(podsDriverNS).Get(ctx, driverDaemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	st, n := ds.Status, int32(len(s.nodes))
	if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled != n || st.UpdatedNumberScheduled != n ||
		st.NumberReady != n || st.NumberAvailable != n {
		return nil, fmt.Errorf("DaemonSet status: %+v (want %d nodes)", st, n)
	}
	if err := s.statusControllerReady(ctx); err != nil {
		return nil, err
	}
	var first *corev1.Pod
	for _, node := range s.nodes {
		pod, err := s.driverPodOn(ctx, node)
		if err != nil {
			return nil, err
		}
		if node == s.node {
			if pod.UID == notUID {
				return nil, fmt.Errorf("still the old driver pod %s", pod.Name)
			}
			first = pod
		}
		if err := s.driverPodReady(ctx, node, pod); err != nil {
			return nil, err
		}
	}
	return first, nil
}

// statusControllerReady: the status controller's Deployment runs our image in every replica,
// all up to date and Ready (its readiness probe: the share caches synced).
func (s *podSuite) statusControllerReady(ctx context.Context) error {
	dep, err := s.kube.AppsV1().Deployments(podsDriverNS).Get(ctx, statusDeployment, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != s.image {
		return fmt.Errorf("the status controller's Deployment runs %s, want %s", img, s.image)
	}
	st, n := dep.Status, ptr.Deref(dep.Spec.Replicas, 1)
	if st.ObservedGeneration < dep.Generation || st.Replicas != n || st.UpdatedReplicas != n || st.ReadyReplicas != n || st.AvailableReplicas != n {
		return fmt.Errorf("the status controller's Deployment status: %+v (want %d replicas)", st, n)
	}
	return nil
}

// driverPodReady: the driver pod on node runs our image, is Ready, and is registered with the
// node's kubelet.
func (s *podSuite) driverPodReady(ctx context.Context, node string, pod *corev1.Pod) error {
	if img := pod.Spec.Containers[0].Image; img != s.image {
		return fmt.Errorf("driver pod %s runs %s, want %s", pod.Name, img, s.image)
	}
	if !podReady(pod) {
		return fmt.Errorf("driver pod %s not Ready", pod.Name)
	}
	csiNode, err := s.kube.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	listed := false
	for _, d := range csiNode.Spec.Drivers {
		listed = listed || d.Name == driverName
	}
	if !listed {
		return fmt.Errorf("CSINode %s does not list %s", node, driverName)
	}
	log, err := s.podLog(ctx, podsDriverNS, pod.Name)
	if err != nil {
		return err
	}
	if !strings.Contains(log, "Registered with the kubelet") {
		return fmt.Errorf("driver pod %s has not registered with the kubelet yet", pod.Name)
	}
	return nil
}

// driverPod returns the first node's driver pod (the one not terminating).
func (s *podSuite) driverPod(ctx context.Context) (*corev1.Pod, error) {
	return s.driverPodOn(ctx, s.node)
}

// driverPodOn returns the DaemonSet's one pod on node that is not terminating.
func (s *podSuite) driverPodOn(ctx context.Context, node string) (*corev1.Pod, error) {
	list, err := s.kube.CoreV1().Pods(podsDriverNS).List(ctx, metav1.ListOptions{LabelSelector: driverSelector,
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

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *podSuite) podLog(ctx context.Context, ns, name string) (string, error) {
	b, err := s.kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(b), err
}

// driverLog is the current driver pod's log.
func (s *podSuite) driverLog(t *testing.T) string {
	t.Helper()
	pod, err := s.driverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	log, err := s.podLog(context.Background(), podsDriverNS, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// assertNotLogged checks that no secret value reached the driver's log (deployed with --v=2).
func (s *podSuite) assertNotLogged(t *testing.T, secrets ...[]byte) {
	t.Helper()
	log := s.driverLog(t)
	for _, v := range secrets {
		if strings.Contains(log, string(v)) {
			t.Errorf("the driver pod's log contains a secret value")
		}
	}
}

// podNamespace creates a namespace (deleted after the test) and waits for its default
// ServiceAccount, without which no pod can be created in it.
func (s *podSuite) podNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := s.namespace(t, prefix)
	eventually(t, 30*time.Second, func() error {
		_, err := s.kube.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
	return ns
}

func (s *podSuite) createServiceAccount(t *testing.T, ns, name string) {
	t.Helper()
	_, err := s.kube.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// consumerSpec describes a pod mounting a share at /v.
type consumerSpec struct {
	sa       string            // service account; "" is default
	attrs    map[string]string // the csi volume's volumeAttributes
	writable bool              // readOnly: false in the csi volume and in the volumeMount
	script   string            // sh -c script; default: sleep
}

func (s *podSuite) consumerPod(ns, name string, c consumerSpec) *corev1.Pod {
	script := c.script
	if script == "" {
		script = "exec sleep 3600"
	}
	grace, no := int64(1), false
	ro := !c.writable
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "consumer"}},
		Spec: corev1.PodSpec{
			ServiceAccountName:            c.sa,
			TerminationGracePeriodSeconds: &grace,
			// The share is the only volume: no token volume for the kubelet to fetch.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           s.busybox,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", script},
				VolumeMounts:    []corev1.VolumeMount{{Name: podVolName, MountPath: podMount, ReadOnly: ro}},
			}},
			Volumes: []corev1.Volume{{Name: podVolName, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver:           driverName,
				ReadOnly:         &ro,
				VolumeAttributes: c.attrs,
			}}}},
		},
	}
}

func (s *podSuite) createPod(t *testing.T, ns, name string, c consumerSpec) {
	t.Helper()
	if _, err := s.kube.CoreV1().Pods(ns).Create(context.Background(), s.consumerPod(ns, name, c), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
}

// waitRunning waits until the pod runs and is Ready, and returns it.
func (s *podSuite) waitRunning(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, timeout, func() error {
		p, err := s.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return fmt.Errorf("pod %s/%s: phase %s, %s", ns, name, p.Status.Phase, s.whyNotRunning(p))
		}
		pod = p
		return nil
	})
	return pod
}

// whyNotRunning summarises a pod's container states and its latest FailedMount, for failures.
func (s *podSuite) whyNotRunning(p *corev1.Pod) string {
	var parts []string
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			parts = append(parts, "waiting: "+cs.State.Waiting.Reason+" "+cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("terminated: %s (exit %d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
		}
	}
	if evs, err := s.podEvents(p.Namespace, p.Name, "FailedMount"); err == nil && len(evs) > 0 {
		parts = append(parts, "FailedMount: "+evs[len(evs)-1].Message)
	}
	return strings.Join(parts, "; ")
}

// exec runs a command in the pod's container (kubectl exec: the API server, the kubelet and
// containerd's streaming server, as a user would), returning stdout, stderr and its error.
func (s *podSuite) exec(ns, pod string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig, "-n", ns, "exec", pod, "-c", "app", "--"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

// podFiles returns what the pod sees in its volume: file name -> exact bytes (the kubelet
// atomic writer's `..` entries excluded, as `ls` shows them).
func (s *podSuite) podFiles(ns, pod string) (map[string][]byte, error) {
	out, stderr, err := s.exec(ns, pod, "ls", podMount)
	if err != nil {
		return nil, fmt.Errorf("ls %s in pod %s: %v: %s", podMount, pod, err, stderr)
	}
	files := map[string][]byte{}
	for _, name := range strings.Fields(string(out)) {
		b, stderr, err := s.exec(ns, pod, "cat", podMount+"/"+name)
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

// waitFiles polls the pod's view until it equals want; it returns how long that took.
func (s *podSuite) waitFiles(t *testing.T, ns, pod string, want map[string][]byte, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, timeout, func() error {
		got, err := s.podFiles(ns, pod)
		if err != nil {
			return err
		}
		if d := sameFiles(got, want); d != nil {
			return fmt.Errorf("pod %s/%s sees: %s", ns, pod, d)
		}
		return nil
	})
	return time.Since(start)
}

// waitEvent waits for an event with the reason on the pod whose message contains every part.
func (s *podSuite) waitEvent(t *testing.T, ns, pod, reason string, timeout time.Duration, parts ...string) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, timeout, func() error {
		evs, err := s.podEvents(ns, pod, reason)
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

// assertStillRunning checks the pod was never restarted or stopped.
func (s *podSuite) assertStillRunning(t *testing.T, ns, name string) {
	t.Helper()
	p, err := s.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || !podReady(p) {
		t.Errorf("pod %s/%s is no longer running: phase %s, %s", ns, name, p.Status.Phase, s.whyNotRunning(p))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("pod %s/%s: container %s restarted %d times", ns, name, cs.Name, cs.RestartCount)
		}
	}
}

// podsRandomBytes returns n random bytes: binary, with NULs and newlines, to check exact bytes
// (and incompressible payloads for the benchmarks).
func podsRandomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// shareFixture: a Secret in its own "platform" namespace shared as a SharedSecret.
type shareFixture struct {
	platform, secret, share string
	data                    map[string][]byte
}

func (s *podSuite) newShare(t *testing.T, data map[string][]byte) *shareFixture {
	t.Helper()
	f := &shareFixture{platform: s.sourceNamespace(t, "platform"), secret: "ca-bundle", share: "corp-ca-" + randSuffix(), data: data}
	s.createSecret(t, f.platform, f.secret, data)
	s.createShare(t, kindSecret, f.share, f.platform, f.secret)
	return f
}

func (f *shareFixture) attrs() map[string]string { return map[string]string{"sharedSecret": f.share} }

// ---------------------------------------------------------------------------------------------
// 1. A CA bundle shared from a platform namespace to pods in two other namespaces.

func TestPodsReadCABundleSharedFromPlatformNamespace(t *testing.T) {
	s := podsEnv(t, podsShared)
	marker := "s3cr3t-" + randSuffix()
	data := map[string][]byte{
		"ca.crt": []byte("-----BEGIN CERTIFICATE-----\n" + marker + "\n-----END CERTIFICATE-----\n"),
		// Binary, with NULs and no trailing newline: the pods must read exactly these bytes.
		"ca.der": podsRandomBytes(4096),
	}
	f := s.newShare(t, data)
	teamA, teamB := s.podNamespace(t, "team-a"), s.podNamespace(t, "team-b")
	// team-a grants its whole namespace (the group of its service accounts), team-b one account.
	s.grant(t, teamA, kindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + teamA})
	s.createServiceAccount(t, teamB, "web")
	s.grant(t, teamB, kindSecret, f.share, serviceAccount(teamB, "web"))

	s.createPod(t, teamA, "reader", consumerSpec{attrs: f.attrs()})
	s.createPod(t, teamB, "reader", consumerSpec{sa: "web", attrs: f.attrs()})
	for _, ns := range []string{teamA, teamB} {
		s.waitRunning(t, ns, "reader", 60*time.Second)
		got, err := s.podFiles(ns, "reader")
		if err != nil {
			t.Fatal(err)
		}
		if d := sameFiles(got, data); d != nil {
			t.Errorf("pod %s/reader does not read the CA bundle exactly: %s", ns, d)
		}
	}
	s.assertNotLogged(t, []byte(marker))
}

// ---------------------------------------------------------------------------------------------
// 2. Without a `use` grant the pod stays ContainerCreating, and its FailedMount event says which
// RBAC rule is missing. Granting it lets the same pod start (denials are not cached).

func TestPodsWithoutUseGrantStayContainerCreating(t *testing.T) {
	s := podsEnv(t, podsShared)
	f := s.newShare(t, map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())})
	ns := s.podNamespace(t, "no-grant")
	s.createServiceAccount(t, ns, "app")
	s.createPod(t, ns, "denied", consumerSpec{sa: "app", attrs: f.attrs()})

	ev := s.waitEvent(t, ns, "denied", "FailedMount", 60*time.Second,
		"PermissionDenied",
		fmt.Sprintf("service account %s/app may not use SharedSecret %q", ns, f.share),
		fmt.Sprintf("{apiGroups: [sharedresource.openshift.io], resources: [sharedsecrets], resourceNames: [%s], verbs: [use]}", f.share),
		"bound to ServiceAccount app in namespace "+ns)
	t.Logf("FailedMount event: %s", ev.Message)

	// Still not started a few kubelet retries later.
	time.Sleep(3 * time.Second)
	p, err := s.kube.CoreV1().Pods(ns).Get(context.Background(), "denied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("pod phase %s, want Pending", p.Status.Phase)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		t.Errorf("%d container statuses, want the pod's one", len(p.Status.ContainerStatuses))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("container %s: state %+v, want waiting ContainerCreating", cs.Name, cs.State)
		}
	}
	if n := evCount(ev); n < 2 {
		// Not an error: the kubelet's backoff decides; logged to show the retries.
		t.Logf("FailedMount seen %d time(s) so far", n)
	}

	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	start := time.Now()
	s.waitRunning(t, ns, "denied", 90*time.Second)
	t.Logf("granted: pod Running %v later (the kubelet's mount retry backoff)", time.Since(start).Round(100*time.Millisecond))
}

func evCount(ev corev1.Event) int32 {
	if ev.Series != nil {
		return ev.Series.Count
	}
	return ev.Count
}

// ---------------------------------------------------------------------------------------------
// 3. Access revoked while the pod runs: within one relist interval the files are gone, the pod
// keeps running and gets a Warning event; granted again, the files come back.

func TestPodsRevokedWhileRunningThenRegranted(t *testing.T) {
	s := podsEnv(t, podsShared)
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix()), "tls.key": podsRandomBytes(512)}
	f := s.newShare(t, data)
	ns := s.podNamespace(t, "revoke")
	s.createServiceAccount(t, ns, "app")
	revoke := s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitRunning(t, ns, "app", 60*time.Second)
	s.waitFiles(t, ns, "app", data, 10*time.Second)

	revoke()
	took := s.waitFiles(t, ns, "app", map[string][]byte{}, podsRelist+podsRelistSlack)
	t.Logf("revoked: files gone from the running pod after %v (relist interval %v)", took.Round(100*time.Millisecond), podsRelist)
	if _, stderr, err := s.exec(ns, "app", "cat", podMount+"/ca.crt"); err == nil || !strings.Contains(string(stderr), "No such file") {
		t.Errorf("cat of a revoked file: err %v, stderr %q; want No such file", err, stderr)
	}
	s.waitEvent(t, ns, "app", reasonRevoked, 10*time.Second, "may not use SharedSecret "+quote(f.share))
	s.assertStillRunning(t, ns, "app")

	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	took = s.waitFiles(t, ns, "app", data, podsRelist+podsRelistSlack)
	t.Logf("re-granted: files back after %v", took.Round(100*time.Millisecond))
	s.waitEvent(t, ns, "app", reasonRestored, 10*time.Second)
	s.assertStillRunning(t, ns, "app")
}

// ---------------------------------------------------------------------------------------------
// 4. The source Secret updated: a running pod sees the new bytes, switched atomically; a
// refreshResource: "false" pod keeps the bytes it started with.

// readerScript loops over the volume and logs what it sees:
//
//	SEEN <version> pass=<n>   the first pass that saw a version
//	MIX pass=<n> ...          one snapshot of the volume held files of two versions
//	TORN pass=<n> ...         a single file held lines of two versions (written in place)
//
// A snapshot is both files read through one resolution of the ..data link, the consistent view
// the atomic writer promises (the kubelet's secret volumes make the same promise): opening
// /v/a and then /v/b resolves ..data twice and can straddle an update with any
// symlink-swapping writer. Each key is also read by its own name, which must always be whole.
const readerScript = `
i=0; last=
while :; do
  i=$((i+1))
  d=$(readlink /v/..data) || { sleep 0.05; continue; }
  # The old directory is removed after a swap: a snapshot that lost it is simply retried.
  cat "/v/$d/a" "/v/$d/b" >/tmp/snap 2>/dev/null || continue
  n=$(uniq /tmp/snap | wc -l)
  [ "$n" -eq 1 ] || echo "MIX pass=$i $(uniq /tmp/snap | tr '\n' ' ')"
  for k in a b; do
    cat "/v/$k" >/tmp/one 2>/dev/null || { echo "UNREADABLE pass=$i $k"; continue; }
    [ "$(uniq /tmp/one | wc -l)" -eq 1 ] || echo "TORN pass=$i $k"
  done
  v=$(head -n 1 /tmp/snap)
  [ "$v" = "$last" ] || { echo "SEEN $v pass=$i"; last=$v; }
done
`

// versioned is the Secret's data at one version: both keys hold the same marker line, many
// times (a larger file makes a non-atomic writer's podsWindow wider).
func versioned(v string) map[string][]byte {
	line := "version=" + v + "\n"
	return map[string][]byte{"a": bytes.Repeat([]byte(line), 4096), "b": bytes.Repeat([]byte(line), 4096)}
}

func TestPodsSeeSourceUpdatesAtomicallyUnlessRefreshFalse(t *testing.T) {
	s := podsEnv(t, podsShared)
	tag := randSuffix()
	version := func(i int) string { return fmt.Sprintf("%d-%s", i, tag) }
	f := s.newShare(t, versioned(version(1)))
	ns := s.podNamespace(t, "refresh")
	s.grant(t, ns, kindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	s.createPod(t, ns, "follower", consumerSpec{attrs: f.attrs(), script: readerScript})
	s.createPod(t, ns, "pinned", consumerSpec{attrs: map[string]string{"sharedSecret": f.share, "refreshResource": "false"}})
	s.waitRunning(t, ns, "follower", 60*time.Second)
	s.waitRunning(t, ns, "pinned", 60*time.Second)
	s.waitFiles(t, ns, "pinned", versioned(version(1)), 10*time.Second)

	seen := func(v string) error {
		log, err := s.podLog(context.Background(), ns, "follower")
		if err != nil {
			return err
		}
		if !strings.Contains(log, "SEEN version="+v+" ") {
			return fmt.Errorf("the reader has not seen version %s yet; its log:\n%s", v, log)
		}
		return nil
	}
	eventually(t, 10*time.Second, func() error { return seen(version(1)) })

	// Three updates, each seen by the reader before the next.
	const updates = 3
	for i := 2; i <= updates+1; i++ {
		start := time.Now()
		s.updateSecret(t, f.platform, f.secret, versioned(version(i)))
		s.waitFiles(t, ns, "follower", versioned(version(i)), podsRelist+podsRelistSlack)
		eventually(t, 5*time.Second, func() error { return seen(version(i)) })
		t.Logf("update to version %d seen by the running pod after %v", i, time.Since(start).Round(100*time.Millisecond))
	}
	s.waitEvent(t, ns, "follower", reasonRefreshed, 10*time.Second)

	log, err := s.podLog(context.Background(), ns, "follower")
	if err != nil {
		t.Fatal(err)
	}
	passes := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "MIX") || strings.HasPrefix(line, "TORN") || strings.HasPrefix(line, "UNREADABLE") {
			t.Errorf("the reader saw an inconsistent volume: %s", line)
		}
		if strings.HasPrefix(line, "SEEN") {
			if n, err := strconv.Atoi(line[strings.LastIndex(line, "=")+1:]); err == nil {
				passes = n
			}
		}
	}
	t.Logf("reader: %d passes up to the last update, no mixed or torn read", passes)

	// The pinned pod has been through at least one relist since the last update.
	time.Sleep(podsRelist)
	got, err := s.podFiles(ns, "pinned")
	if err != nil {
		t.Fatal(err)
	}
	if d := sameFiles(got, versioned(version(1))); d != nil {
		t.Errorf("the refreshResource=false pod no longer shows the data it started with: %s", d)
	}
	if evs, err := s.podEvents(ns, "pinned", reasonRefreshed); err != nil || len(evs) != 0 {
		t.Errorf("the refreshResource=false pod got %d %s events (err %v), want none", len(evs), reasonRefreshed, err)
	}
	s.assertStillRunning(t, ns, "follower")
}

// ---------------------------------------------------------------------------------------------
// 5. A pod that asks for a writable volume is refused, as OpenShift's driver refuses it: the
// container runtime makes its own bind of the volume for the container, and runc 1.2 and later
// make that bind writable when the kubelet does not ask for read-only, whatever the driver's bind
// is (on runc 1.5.2 the pod's writes reached the share's files). A pod that asks for it
// read-only cannot write by any path: EROFS.
func TestPodsWritableVolumeIsRefusedAndAReadOnlyOneCannotBeWritten(t *testing.T) {
	s := podsEnv(t, podsShared)
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	f := s.newShare(t, data)
	ns := s.podNamespace(t, "writer")
	s.grant(t, ns, kindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})

	s.createPod(t, ns, "writer", consumerSpec{attrs: f.attrs(), writable: true})
	ev := s.waitEvent(t, ns, "writer", "FailedMount", 60*time.Second, "InvalidArgument", "set `readOnly: true`")
	t.Logf("writable: %s", ev.Message)

	s.createPod(t, ns, "reader", consumerSpec{attrs: f.attrs()})
	s.waitRunning(t, ns, "reader", 60*time.Second)
	for _, script := range []string{
		"echo x > /v/new-file",
		"echo x >> /v/ca.crt",
		"echo x > /v/..data/ca.crt",
		"rm /v/ca.crt",
		"mkdir /v/dir",
		"mv /v/ca.crt /v/other",
		"chmod 777 /v/ca.crt",
		"touch /v/ca.crt",
	} {
		_, stderr, err := s.exec(ns, "reader", "sh", "-c", script)
		if err == nil {
			t.Errorf("%q succeeded in a shared volume", script)
		} else if !strings.Contains(string(stderr), "Read-only file system") {
			t.Errorf("%q failed with %q, want EROFS (Read-only file system)", script, stderr)
		}
	}
	out, _, err := s.exec(ns, "reader", "grep", " "+podMount+" ", "/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if mnt := strings.Fields(string(out)); len(mnt) < 4 || !hasOption(mnt[3], "ro") {
		t.Errorf("the pod's mount %q is not read-only", strings.TrimSpace(string(out)))
	}
	t.Logf("the pod's mount: %s", strings.TrimSpace(string(out)))
	s.waitFiles(t, ns, "reader", data, 5*time.Second)
	if p, err := s.kube.CoreV1().Pods(ns).Get(context.Background(), "writer", metav1.GetOptions{}); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("the writable pod: %v, phase %v; want it never Running", err, p.Status.Phase)
	}
}

// ---------------------------------------------------------------------------------------------
// 6. The driver pod is deleted and the DaemonSet recreates it while consumer pods run: their
// data stays readable throughout, and revocation and refresh still reach them afterwards.

func TestPodsDriverRecreated(t *testing.T) {
	s := podsEnv(t, podsAlone)
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	f := s.newShare(t, data)
	ns := s.podNamespace(t, "restart")
	s.createServiceAccount(t, ns, "app")
	revoke := s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitRunning(t, ns, "app", 60*time.Second)
	s.waitFiles(t, ns, "app", data, 10*time.Second)

	upgrade, err := s.prepareUpgrade()
	if err != nil {
		t.Fatal(err)
	}
	// The driver pod is replaced twice: deleted (a crash, an eviction), then rolled by an upgrade
	// (`helm upgrade`: to a newer release from the cluster's registry, or, without one, with a
	// changed value, as a new deploy.yaml would).
	for _, replacement := range []struct {
		how     string
		replace func(old *corev1.Pod) error
	}{
		{"pod deleted", func(old *corev1.Pod) error {
			return s.kube.CoreV1().Pods(podsDriverNS).Delete(context.Background(), old.Name, metav1.DeleteOptions{})
		}},
		{"helm upgrade", func(*corev1.Pod) error {
			return upgrade()
		}},
	} {
		s.replaceDriverWhileReading(t, ns, "app", data, replacement.how, replacement.replace)
	}
	if s.release != nil {
		// The upgraded driver runs the newer release, pulled from the registry.
		pod, err := s.driverPod(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.checkPulledFromRelease(pod); err != nil {
			t.Error(err)
		}
	}

	// Refresh still works for the pod published by the old driver...
	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + randSuffix())}
	s.updateSecret(t, f.platform, f.secret, updated)
	s.waitFiles(t, ns, "app", updated, podsRelist+podsRelistSlack)
	// ...and so do revocation and re-grant.
	revoke()
	s.waitFiles(t, ns, "app", map[string][]byte{}, podsRelist+podsRelistSlack)
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	s.waitFiles(t, ns, "app", updated, podsRelist+podsRelistSlack)
	// A new pod mounts through the new driver.
	s.createPod(t, ns, "app2", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitRunning(t, ns, "app2", 60*time.Second)
	s.waitFiles(t, ns, "app2", updated, 10*time.Second)
	s.assertStillRunning(t, ns, "app")
}

// replaceDriverWhileReading replaces the driver pod with replace while the consumer pod reads its
// volume again and again: every read must succeed, and the new driver must resume the volume.
func (s *podSuite) replaceDriverWhileReading(t *testing.T, ns, pod string, data map[string][]byte, how string, replace func(old *corev1.Pod) error) {
	t.Helper()
	old, err := s.driverPod(context.Background())
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
			got, err := s.podFiles(ns, pod)
			reads++
			msg := ""
			if err == nil {
				err = sameFiles(got, data)
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
	newPod, err := s.waitDriver(context.Background(), old.UID, 2*time.Minute)
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
	if m := regexp.MustCompile(`"Recovered volumes" resumed=(\d+)`).FindStringSubmatch(s.driverLog(t)); m == nil || m[1] == "0" {
		t.Errorf("%s: the new driver pod did not resume the running pod's volume (log: %q)", how, m)
	}
	s.assertStillRunning(t, ns, pod)

}

// helm runs the helm binary against the cluster.
func (s *podSuite) helm(args ...string) error {
	out, err := exec.Command(os.Getenv("HELM"), append([]string{"--kubeconfig", s.kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// 7. Pod deleted: the kubelet calls NodeUnpublishVolume and nothing of the volume is left on
// the node: no mount, no directory, no record.

func TestPodsDeletedLeaveNothingOnTheNode(t *testing.T) {
	s := podsEnv(t, podsShared)
	f := s.newShare(t, map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())})
	ns := s.podNamespace(t, "gone")
	s.grant(t, ns, kindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	s.createPod(t, ns, "app", consumerSpec{attrs: f.attrs()})
	pod := s.waitRunning(t, ns, "app", 60*time.Second)

	v := s.nodeVolume(t, pod)
	// While the pod runs, all of it is there: the checks below can see it.
	if len(v.mounts()) < 2 {
		t.Fatalf("expected the volume's tmpfs and the pod's bind mount, found %q", v.mounts())
	}
	for _, p := range []string{v.volumeDir, filepath.Join(v.volumeDir, recordFile), v.podDir} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("expected %s while the pod runs: %v", p, err)
		}
	}

	unpublishes := s.scrape(t).sum(metricCSIOperations, map[string]string{"method": "NodeUnpublishVolume", "code": "OK"})
	start := time.Now()
	if err := s.kube.CoreV1().Pods(ns).Delete(context.Background(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		_, err := s.kube.CoreV1().Pods(ns).Get(context.Background(), "app", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (err %v)", err)
		}
		if m := v.mounts(); len(m) > 0 {
			return fmt.Errorf("mounts left: %q", m)
		}
		for _, p := range []string{v.volumeDir, v.podDir} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s left", p)
			}
		}
		return nil
	})
	t.Logf("pod deleted; nothing left on the node %v later", time.Since(start).Round(100*time.Millisecond))
	// It was the kubelet's NodeUnpublishVolume that removed it, not the relist's cleanup of
	// volumes whose pod vanished.
	if log := s.driverLog(t); !strings.Contains(log, `"Unpublished volume" volumeID="`+v.id+`"`) {
		t.Errorf("the driver log has no NodeUnpublishVolume of %s", v.id)
	}
	if n := s.scrape(t).sum(metricCSIOperations, map[string]string{"method": "NodeUnpublishVolume", "code": "OK"}); n <= unpublishes {
		t.Errorf("the driver counted no successful NodeUnpublishVolume (%v before, %v after)", unpublishes, n)
	}
}

// nodeVolume is one pod's volume as it exists on the node.
type nodeVolume struct {
	id        string // the kubelet's volume handle: the driver's volume id
	podDir    string // <kubelet>/pods/<uid>
	target    string // the pod's volume mount point
	volumeDir string // the driver's tmpfs for it
}

func (s *podSuite) nodeVolume(t *testing.T, pod *corev1.Pod) *nodeVolume {
	t.Helper()
	v := &nodeVolume{podDir: filepath.Join(s.kubelet, "pods", string(pod.UID))}
	csiDir := filepath.Join(v.podDir, "volumes", "kubernetes.io~csi", podVolName)
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
	v.id = vd.VolumeHandle
	v.volumeDir = filepath.Join(s.kubelet, "plugins", driverName, "volumes", v.id)
	return v
}

// mounts lists the mount points of the volume on the node (its tmpfs, its binds, anything in
// the pod's dir).
func (v *nodeVolume) mounts() []string {
	var out []string
	for _, m := range mountsUnder(filepath.Dir(v.volumeDir)) {
		if m == v.volumeDir || strings.HasPrefix(m, v.volumeDir+"/") {
			out = append(out, m)
		}
	}
	return append(out, mountsUnder(v.podDir)...)
}

// ---------------------------------------------------------------------------------------------
// 8. 100 pods on one share on the node at once: all Running, and the driver's API requests do
// not grow with the number of pods. Counted from the API server's audit log (every request the
// driver's service account made), and cross-checked with the driver's own /metrics.

func TestPodsHundredOnOneShare(t *testing.T) {
	const pods = 100
	s := podsEnv(t, podsAlone)
	// Volumes of earlier tests' pods that are still going away would make the measured windows
	// unequal: wait until the driver holds only the volumes of running pods (none in CI; after
	// `make up`, the example's).
	eventually(t, 2*time.Minute, func() error {
		want, err := s.runningVolumes()
		if err != nil {
			return err
		}
		if n := s.scrape(t).sum(metricVolumes, nil); int(n) != want {
			return fmt.Errorf("the driver has %v volumes, running pods mount %d", n, want)
		}
		return nil
	})
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	f := s.newShare(t, data)
	ns := s.podNamespace(t, "hundred")
	s.grant(t, ns, kindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	name := func(i int) string { return fmt.Sprintf("app-%03d", i) }
	s.createPod(t, ns, name(0), consumerSpec{attrs: f.attrs()})
	s.waitRunning(t, ns, name(0), 60*time.Second)

	// Relist cost with one volume, over whole cycles.
	const cycles = 3
	one := s.measureCycles(t, cycles)

	// 99 more pods at once.
	burst := s.startWindow(t)
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	sem := make(chan struct{}, 20)
	for i := 1; i < pods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := s.kube.CoreV1().Pods(ns).Create(context.Background(), s.consumerPod(ns, name(i), consumerSpec{attrs: f.attrs()}), metav1.CreateOptions{})
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	created := time.Since(burst.start)
	eventually(t, 5*time.Minute, func() error {
		list, err := s.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for i := range list.Items {
			if p := &list.Items[i]; p.Status.Phase == corev1.PodRunning && podReady(p) {
				running++
			}
		}
		if running != pods {
			return fmt.Errorf("%d of %d pods Running", running, pods)
		}
		return nil
	})
	b := burst.end(t)
	t.Logf("%d pods Running %v after the first create (creates took %v); the driver made %d API requests meanwhile "+
		"(%v; its /metrics counted %v) over %d relist cycles", pods, b.duration.Round(100*time.Millisecond),
		created.Round(100*time.Millisecond), b.requests, b.byKind, b.metered, b.cycles)

	// Relist cost with 100 volumes.
	hundred := s.measureCycles(t, cycles)
	t.Logf("relist: %d requests over %d cycles with 1 volume (%v), %d with %d volumes (%v)",
		one.requests, cycles, one.byKind, hundred.requests, pods, hundred.byKind)
	if hundred.requests > one.requests {
		t.Errorf("relisting %d volumes of one share cost %d requests over %d cycles, more than the %d for one volume",
			pods, hundred.requests, cycles, one.requests)
	}
	// Publishing: everything beyond the burst's relist cycles. Within one cache TTL a share
	// costs one review and one source GET, however many pods mount it.
	perCycle := float64(one.requests) / float64(one.cycles)
	publish := max(0, float64(b.requests)-perCycle*float64(b.cycles))
	limit := 2 * (float64(b.duration/podsCacheTTL) + 2)
	t.Logf("publishing %d pods cost about %.0f requests (at most %.0f allowed: 2 per %v cache TTL)", pods-1, publish, limit, podsCacheTTL)
	if publish > limit {
		t.Errorf("publishing %d pods cost about %.0f API requests, more than %.0f: requests grow with pods", pods-1, publish, limit)
	}

	// All volumes go away with their pods.
	var podUIDs []string
	list, err := s.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		podUIDs = append(podUIDs, string(p.UID))
	}
	start := time.Now()
	if err := s.kube.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, func() error {
		list, err := s.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods left", len(list.Items))
		}
		others, err := s.runningVolumes()
		if err != nil {
			return err
		}
		if n := s.scrape(t).sum(metricVolumes, nil); int(n) != others {
			return fmt.Errorf("the driver still has %v volumes, running pods mount %d", n, others)
		}
		return nil
	})
	t.Logf("%d pods deleted and all their volumes unpublished in %v", pods, time.Since(start).Round(100*time.Millisecond))
	if m := mountsUnder(filepath.Join(s.kubelet, "pods")); len(m) > 0 {
		for _, uid := range podUIDs {
			for _, mp := range m {
				if strings.Contains(mp, uid) {
					t.Errorf("mount left in a deleted pod's dir: %s", mp)
				}
			}
		}
	}
}

// runningVolumes counts the volumes of this driver in running pods that are not being deleted.
func (s *podSuite) runningVolumes() (int, error) {
	list, err := s.kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.CSI != nil && v.CSI.Driver == driverName {
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
	s       *podSuite
	start   time.Time
	audit   *auditMark // nil without an audit log
	metrics scrapedMetrics
}

type windowResult struct {
	duration time.Duration
	requests int            // from the audit log if there is one, else from /metrics
	byKind   map[string]int // verb/resource -> count, Leases included
	metered  int            // the driver's own count (sharedresource_api_requests_total)
	cycles   int            // relist cycles completed
}

func (s *podSuite) startWindow(t *testing.T) *podsWindow {
	t.Helper()
	w := &podsWindow{s: s, start: time.Now(), metrics: s.scrape(t)}
	if s.auditLog != "" {
		m, err := markAudit(s.auditLog)
		if err != nil {
			t.Fatal(err)
		}
		w.audit = &m
	}
	return w
}

func (w *podsWindow) end(t *testing.T) windowResult {
	t.Helper()
	m := w.s.scrape(t)
	r := windowResult{duration: time.Since(w.start)}
	r.cycles = int(m.sum(metricRelistCycles, nil) - w.metrics.sum(metricRelistCycles, nil))
	metered := m.requests().minus(w.metrics.requests())
	r.metered = metered.total()
	if w.audit == nil {
		r.requests, r.byKind = r.metered, metered
		return r
	}
	// Every request of the driver's service account, whatever stage it got to.
	audited, err := w.audit.requests(func(ev auditEvent) bool {
		return ev.User.Username == driverUser
	})
	if err != nil {
		t.Fatal(err)
	}
	r.requests, r.byKind = audited.total(), audited
	return r
}

// measureCycles counts the requests of exactly n relist cycles: from just after one cycle ends
// to just after the n-th next one ends.
func (s *podSuite) measureCycles(t *testing.T, n int) windowResult {
	t.Helper()
	s.waitCycles(t, 1)
	w := s.startWindow(t)
	s.waitCycles(t, n)
	r := w.end(t)
	r.cycles = n
	return r
}

func (s *podSuite) waitCycles(t *testing.T, n int) {
	t.Helper()
	c0 := s.scrape(t).sum(metricRelistCycles, nil)
	eventually(t, time.Duration(n+1)*(podsRelist+podsRelistSlack), func() error {
		if c := s.scrape(t).sum(metricRelistCycles, nil); c < c0+float64(n) {
			return fmt.Errorf("%v of %d relist cycles", c-c0, n)
		}
		return nil
	})
}

const (
	metricRelistCycles  = "sharedresource_relist_cycle_duration_seconds_count"
	metricVolumes       = "sharedresource_volumes"
	metricCSIOperations = "sharedresource_csi_operations_total"
)

// scrape reads the driver pod's /metrics (it is on the node's network).
func (s *podSuite) scrape(t *testing.T) scrapedMetrics {
	t.Helper()
	m, err := scrapeMetrics("http://" + s.nodeIP + ":" + driverMetricsPort + "/metrics")
	if err != nil {
		t.Fatalf("the driver's /metrics: %v", err)
	}
	if !m.has(metricRelistCycles, nil) {
		t.Fatalf("the driver's /metrics has no %s", metricRelistCycles)
	}
	return m
}
