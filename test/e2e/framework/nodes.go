package framework

// The nodes of a multi-node cluster (test/e2e/nodes), as the other suites also look at them: what
// each node holds (volumes, mounts), pods placed on a node, the status controller's Lease.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ClusterNode is one node of the local cluster, as hack/cluster.sh records it ($SRCSI_NODES_FILE).
type ClusterNode struct {
	Name, IP string
	Mntns    string // its mount namespace; "-": the machine's (the first node)
}

// ClusterNodes reads the cluster's nodes from $SRCSI_NODES_FILE (hack/cluster.sh up: a line a node,
// its name, IP, network namespace, mount namespace and suffix), or fails the test.
func ClusterNodes(t *testing.T) []ClusterNode {
	t.Helper()
	b, err := os.ReadFile(os.Getenv("SRCSI_NODES_FILE"))
	if err != nil {
		t.Fatalf("the cluster's nodes file ($SRCSI_NODES_FILE, written by hack/cluster.sh up): %v", err)
	}
	var nodes []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("nodes file line %q: want name, IP, netns, mount namespace, suffix", line)
		}
		nodes = append(nodes, ClusterNode{Name: f[0], IP: f[1], Mntns: f[3]})
	}
	return nodes
}

// Run runs a command on the node: in its mount namespace (its /var/lib/kubelet, its mounts).
func (n ClusterNode) Run(args ...string) ([]byte, error) {
	if n.Mntns != "-" {
		args = append([]string{"nsenter", "--mount=" + n.Mntns, "--"}, args...)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("on node %s: %s: %v: %s", n.Name, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// DriverVolumesDir is where the driver keeps its volumes on every node (docs/how-it-works.md, "The volume on disk").
var DriverVolumesDir = filepath.Join("/var/lib/kubelet/plugins", DriverName, "volumes")

// nodeState is what the driver and the kubelet hold on one node: the driver's volume dirs with
// the namespace of the pod each record names, and the mount points under the driver's volumes
// dir and the kubelet's pods dir.
type nodeState struct {
	Volumes map[string]string // volume id -> the record's pod namespace ("" without a record)
	Mounts  []string
}

// State reads, on the node, the driver's volumes (each with its pod's namespace) and its mounts.
func (n ClusterNode) State() (nodeState, error) {
	st := nodeState{Volumes: map[string]string{}}
	out, err := n.Run("sh", "-c", `cd `+DriverVolumesDir+` 2>/dev/null && for v in *; do [ -d "$v" ] || continue; `+
		`printf '%s ' "$v"; cat "$v/`+RecordFile+`" 2>/dev/null | tr -d '\n'; echo; done`)
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, rec, _ := strings.Cut(line, " ")
		if id == "" {
			continue
		}
		var r volumeRecord
		_ = json.Unmarshal([]byte(rec), &r) // no record or a broken one: ""
		st.Volumes[id] = r.PodNamespace
	}
	mi, err := n.Run("cat", "/proc/self/mountinfo")
	if err != nil {
		return st, err
	}
	entries, err := parseMountInfo(bufio.NewReader(bytes.NewReader(mi)))
	if err != nil {
		return st, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.MountPoint, DriverVolumesDir+"/") || strings.HasPrefix(e.MountPoint, "/var/lib/kubelet/pods/") {
			st.Mounts = append(st.Mounts, e.MountPoint)
		}
	}
	return st, nil
}

// VolumesOf lists the node's volumes whose record names a pod in ns.
func (st nodeState) VolumesOf(ns string) []string {
	var ids []string
	for id, pns := range st.Volumes {
		if pns == ns {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// MountsOf lists the node's mounts of one volume (its tmpfs and what is below) and of one pod.
func (st nodeState) MountsOf(volumeID string, podUID string) []string {
	var out []string
	for _, m := range st.Mounts {
		if (volumeID != "" && (m == filepath.Join(DriverVolumesDir, volumeID) || strings.HasPrefix(m, filepath.Join(DriverVolumesDir, volumeID)+"/"))) ||
			(podUID != "" && strings.HasPrefix(m, "/var/lib/kubelet/pods/"+podUID+"/")) {
			out = append(out, m)
		}
	}
	return out
}

// VolumeID is the driver's volume id of the pod's share volume, from the kubelet's record on the
// pod's node.
func (n ClusterNode) VolumeID(podUID string) (string, error) {
	b, err := n.Run("cat", filepath.Join("/var/lib/kubelet/pods", podUID, "volumes/kubernetes.io~csi", PodVolName, "vol_data.json"))
	if err != nil {
		return "", err
	}
	var vd struct {
		VolumeHandle string `json:"volumeHandle"`
	}
	if err := json.Unmarshal(b, &vd); err != nil || vd.VolumeHandle == "" {
		return "", fmt.Errorf("vol_data.json of pod %s on %s: %v (%s)", podUID, n.Name, err, b)
	}
	return vd.VolumeHandle, nil
}

// CreatePodOn creates a consumer pod bound to node (no scheduler).
func (s *PodSuite) CreatePodOn(t *testing.T, ns, name, node string, c ConsumerSpec) {
	t.Helper()
	p := s.ConsumerPod(ns, name, c)
	p.Spec.NodeName = node
	if _, err := s.Kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s on %s: %v", ns, name, node, err)
	}
}

// WaitAllFiles polls every pod's view at once until each equals want; it returns how long each
// took from now (pod name -> time), or fails the test with what each pod saw last.
func (s *PodSuite) WaitAllFiles(t *testing.T, ns string, pods []string, want map[string][]byte, timeout time.Duration) map[string]time.Duration {
	t.Helper()
	start := time.Now()
	took := map[string]time.Duration{}
	last := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := s.PodFiles(ns, p)
				if err == nil {
					err = SameFiles(got, want)
				}
				mu.Lock()
				if err == nil {
					took[p] = time.Since(start)
				} else {
					last[p] = err.Error()
				}
				mu.Unlock()
				if err == nil || time.Since(start) > timeout {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for _, p := range pods {
		if _, ok := took[p]; !ok {
			t.Fatalf("pod %s/%s: not the expected files after %v: %s", ns, p, timeout, last[p])
		}
	}
	return took
}

// ReadersOnEveryNode shares data and starts, on each node, a pod "reader-<node>" of service
// account "app" mounting the share and running script; it returns the share, the pods'
// namespace, the pods (in the nodes' order) and the function that revokes their grant.
func (s *PodSuite) ReadersOnEveryNode(t *testing.T, nodes []ClusterNode, prefix string, data map[string][]byte, script string) (f *ShareFixture, ns string, pods []string, revoke func()) {
	t.Helper()
	f = s.NewShare(t, data)
	ns = s.PodNamespace(t, prefix)
	s.CreateServiceAccount(t, ns, "app")
	revoke = s.Grant(t, ns, KindSecret, f.Share, ServiceAccount(ns, "app"))
	for _, n := range nodes {
		name := "reader-" + n.Name
		s.CreatePodOn(t, ns, name, n.Name, ConsumerSpec{Sa: "app", Attrs: f.Attrs(), Script: script})
		pods = append(pods, name)
	}
	for _, p := range pods {
		s.WaitRunning(t, ns, p, 90*time.Second)
	}
	return f, ns, pods, revoke
}

// WaitDeploymentPod waits for the Deployment's one Running, Ready pod that is not notName.
func (s *PodSuite) WaitDeploymentPod(t *testing.T, ns, notName string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	Eventually(t, timeout, func() error {
		list, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=drain-reader"})
		if err != nil {
			return err
		}
		for i, p := range list.Items {
			if p.Name != notName && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && PodReady(&p) {
				pod = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no Ready pod of the Deployment but %q yet (%d pods)", notName, len(list.Items))
	})
	return pod
}

// StatusPodHolding returns the status controller's pod whose identity holder is (the pod's name,
// "_", a per-process suffix).
func (s *PodSuite) StatusPodHolding(ctx context.Context, holder string) (*corev1.Pod, error) {
	list, err := s.Kube.CoreV1().Pods(PodsDriverNS).List(ctx, metav1.ListOptions{LabelSelector: statusSelector})
	if err != nil {
		return nil, err
	}
	for i, p := range list.Items {
		if strings.HasPrefix(holder, p.Name+"_") {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("the status Lease holder %q is no pod of the status controller (%d pods)", holder, len(list.Items))
}

// LeaseHolder is the status Lease's holder identity (the status controller's pod name, "_", a
// per-process suffix).
func (s *PodSuite) LeaseHolder(t *testing.T) string {
	t.Helper()
	l, err := s.Kube.CoordinationV1().Leases(PodsDriverNS).Get(context.Background(), StatusLeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// GoodReads is the reader pod's last logged count of good reads, and its log.
func (s *PodSuite) GoodReads(t *testing.T, ns, pod string) (int, string) {
	t.Helper()
	log, err := s.PodLog(context.Background(), ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	oks := regexp.MustCompile(`OK (\d+)`).FindAllStringSubmatch(log, -1)
	if len(oks) == 0 {
		return 0, log
	}
	n, _ := strconv.Atoi(oks[len(oks)-1][1])
	return n, log
}
