//go:build integration

package main

// The multi-node suite: what only shows across nodes, on a local cluster of three real nodes
// (hack/cluster.sh NODES=3: one control plane; per node its own kubelet and containerd, network
// namespace and mount namespace, so each node's driver pod sees only its node's
// /var/lib/kubelet). The driver is installed from the cluster's registry as in the pod suite,
// every node pulling its image. hack/test.sh runs these tests in a phase of their own, on a
// cluster of their own (`-run '^TestNodes'`); each runs alone.
//
//   - The DaemonSet runs a Ready driver on every node, each registered with its kubelet.
//   - Pods on different nodes reach each other, and the API server.
//   - One share read by pods on every node: a change of the source reaches them all, a
//     revocation empties them all, each within the relist bound, with an event on each pod.
//   - Drain: a Deployment's pod moves to another node and reads the share there; the drained
//     node keeps nothing of its volume (no tmpfs, no dir, no record).
//   - Node lost (SIGKILL to its kubelet, containerd and driver): the node goes NotReady, the
//     share status Lease moves to a live node's driver within the README's bound and status is
//     still written; back, the node's driver keeps the volumes of pods still bound there,
//     the volume of a pod deleted meanwhile goes, and nothing leaks.
//   - Rolling upgrade: `helm upgrade` to a new release replaces the driver one node at a time
//     while a pod on each node reads its volume: not one failed read; refresh and revocation
//     work on every node afterwards.
//   - The API requests of the three drivers, from the audit log, against docs/scale.md's model.

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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// nodesWanted is the size of the suite's cluster (hack/test.sh: NODES=3).
	nodesWanted = 3
	// nodesStatusLease is the chart's --status-lease-duration (the driver's default).
	nodesStatusLease = 15 * time.Second
	// nodesMonitorGrace is the controller manager's --node-monitor-grace-period in hack/cluster.sh
	// with several nodes.
	nodesMonitorGrace = 20 * time.Second
)

// clusterNode is one node of the local cluster, as hack/cluster.sh records it ($SRCSI_NODES_FILE).
type clusterNode struct {
	name, ip string
	mntns    string // its mount namespace; "-": the machine's (the first node)
}

// nodesEnv is the pod suite on a cluster of three nodes, or fails the test.
func nodesEnv(t *testing.T) (*podSuite, []clusterNode) {
	t.Helper()
	s := podsEnv(t, podsAlone)
	b, err := os.ReadFile(os.Getenv("SRCSI_NODES_FILE"))
	if err != nil {
		t.Fatalf("the cluster's nodes file ($SRCSI_NODES_FILE, written by hack/cluster.sh up): %v", err)
	}
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("nodes file line %q: want name, IP, netns, mount namespace, suffix", line)
		}
		nodes = append(nodes, clusterNode{name: f[0], ip: f[1], mntns: f[3]})
	}
	if len(nodes) < nodesWanted || len(s.nodes) != len(nodes) {
		t.Fatalf("the multi-node suite needs %d nodes; the cluster has %d (run it with `make test`, or "+
			"`NODES=3 hack/cluster.sh up` then `hack/cluster.sh exec -- go test -tags integration -run '^TestNodes' .`)", nodesWanted, len(nodes))
	}
	return s, nodes
}

// run runs a command on the node: in its mount namespace (its /var/lib/kubelet, its mounts).
func (n clusterNode) run(args ...string) ([]byte, error) {
	if n.mntns != "-" {
		args = append([]string{"nsenter", "--mount=" + n.mntns, "--"}, args...)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("on node %s: %s: %v: %s", n.name, strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// driverVolumesDir is where the driver keeps its volumes on every node (README: "On the node").
var driverVolumesDir = filepath.Join("/var/lib/kubelet/plugins", driverName, "volumes")

// nodeState is what the driver and the kubelet hold on one node: the driver's volume dirs with
// the namespace of the pod each record names, and the mount points under the driver's volumes
// dir and the kubelet's pods dir.
type nodeState struct {
	volumes map[string]string // volume id -> the record's pod namespace ("" without a record)
	mounts  []string
}

func (n clusterNode) state() (nodeState, error) {
	st := nodeState{volumes: map[string]string{}}
	out, err := n.run("sh", "-c", `cd `+driverVolumesDir+` 2>/dev/null && for v in *; do [ -d "$v" ] || continue; `+
		`printf '%s ' "$v"; cat "$v/`+recordFile+`" 2>/dev/null | tr -d '\n'; echo; done`)
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
		st.volumes[id] = r.PodNamespace
	}
	mi, err := n.run("cat", "/proc/self/mountinfo")
	if err != nil {
		return st, err
	}
	entries, err := parseMountInfo(bufio.NewReader(bytes.NewReader(mi)))
	if err != nil {
		return st, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.MountPoint, driverVolumesDir+"/") || strings.HasPrefix(e.MountPoint, "/var/lib/kubelet/pods/") {
			st.mounts = append(st.mounts, e.MountPoint)
		}
	}
	return st, nil
}

// volumesOf lists the node's volumes whose record names a pod in ns.
func (st nodeState) volumesOf(ns string) []string {
	var ids []string
	for id, pns := range st.volumes {
		if pns == ns {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// mountsOf lists the node's mounts of one volume (its tmpfs and what is below) and of one pod.
func (st nodeState) mountsOf(volumeID string, podUID string) []string {
	var out []string
	for _, m := range st.mounts {
		if (volumeID != "" && (m == filepath.Join(driverVolumesDir, volumeID) || strings.HasPrefix(m, filepath.Join(driverVolumesDir, volumeID)+"/"))) ||
			(podUID != "" && strings.HasPrefix(m, "/var/lib/kubelet/pods/"+podUID+"/")) {
			out = append(out, m)
		}
	}
	return out
}

// volumeID is the driver's volume id of the pod's share volume, from the kubelet's record on the
// pod's node.
func (n clusterNode) volumeID(podUID string) (string, error) {
	b, err := n.run("cat", filepath.Join("/var/lib/kubelet/pods", podUID, "volumes/kubernetes.io~csi", podVolName, "vol_data.json"))
	if err != nil {
		return "", err
	}
	var vd struct {
		VolumeHandle string `json:"volumeHandle"`
	}
	if err := json.Unmarshal(b, &vd); err != nil || vd.VolumeHandle == "" {
		return "", fmt.Errorf("vol_data.json of pod %s on %s: %v (%s)", podUID, n.name, err, b)
	}
	return vd.VolumeHandle, nil
}

// createPodOn creates a consumer pod bound to node (no scheduler).
func (s *podSuite) createPodOn(t *testing.T, ns, name, node string, c consumerSpec) {
	t.Helper()
	p := s.consumerPod(ns, name, c)
	p.Spec.NodeName = node
	if _, err := s.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s on %s: %v", ns, name, node, err)
	}
}

// waitAllFiles polls every pod's view at once until each equals want; it returns how long each
// took from now (pod name -> time), or fails the test with what each pod saw last.
func (s *podSuite) waitAllFiles(t *testing.T, ns string, pods []string, want map[string][]byte, timeout time.Duration) map[string]time.Duration {
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
				got, err := s.podFiles(ns, p)
				if err == nil {
					err = sameFiles(got, want)
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

func formatTimes(took map[string]time.Duration) string {
	var parts []string
	for p, d := range took {
		parts = append(parts, fmt.Sprintf("%s %v", p, d.Round(100*time.Millisecond)))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------------------------------------
// 1. The DaemonSet runs a Ready driver on every node, each listed in its node's CSINode with the
// node's own name, each serving its metrics on its node's address.

func TestNodesDriverRunsOnEveryNode(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	ds, err := s.kube.AppsV1().DaemonSets(podsDriverNS).Get(ctx, driverDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := ds.Status; st.DesiredNumberScheduled != int32(len(nodes)) || st.NumberReady != int32(len(nodes)) {
		t.Errorf("DaemonSet: %d desired, %d Ready; want %d", st.DesiredNumberScheduled, st.NumberReady, len(nodes))
	}
	for _, n := range nodes {
		pod, err := s.driverPodOn(ctx, n.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.driverPodReady(ctx, n.name, pod); err != nil {
			t.Error(err)
		}
		if s.release == nil {
			t.Fatal("the suite did not install the driver from the cluster's registry ($SRCSI_REGISTRY unset?)")
		}
		if err := s.checkPulledFromRelease(pod); err != nil {
			t.Errorf("node %s: %v", n.name, err)
		}
		csiNode, err := s.kube.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == driverName && d.NodeID != n.name {
				t.Errorf("CSINode %s lists the driver with node id %q", n.name, d.NodeID)
			}
		}
		m, err := scrapeMetrics("http://" + n.ip + ":" + driverMetricsPort + "/metrics")
		if err != nil {
			t.Errorf("node %s: the driver's /metrics: %v", n.name, err)
		} else if !m.has(metricRelistCycles, nil) {
			t.Errorf("node %s: /metrics has no %s", n.name, metricRelistCycles)
		}
		// Each node has its own kubelet dir: the driver's socket is there, in that node's mount
		// namespace.
		if _, err := n.run("test", "-S", filepath.Join("/var/lib/kubelet/plugins", driverName, "csi.sock")); err != nil {
			t.Errorf("node %s: no driver socket in its kubelet dir: %v", n.name, err)
		}
		t.Logf("node %s: driver pod %s Ready, registered, image %s", n.name, pod.Name, pod.Status.ContainerStatuses[0].ImageID)
	}
}

// ---------------------------------------------------------------------------------------------
// 1b. The cluster's network: a pod on each node serves a page; every pod fetches every other
// node's pod's page by its pod IP, and reaches the API server through the `kubernetes` Service.

func TestNodesPodsReachEachOtherAndTheAPIServer(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	ns := s.podNamespace(t, "network")
	grace, no := int64(1), false
	ips := map[string]string{}
	for _, n := range nodes {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + n.name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName: n.name, TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
				Containers: []corev1.Container{{Name: "app", Image: s.busybox, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", "mkdir -p /tmp/www && echo served-by-" + n.name + " >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"}}},
			},
		}
		if _, err := s.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		ips[n.name] = s.waitRunning(t, ns, "web-"+n.name, 90*time.Second).Status.PodIP
	}
	for _, from := range nodes {
		for _, to := range nodes {
			out, stderr, err := s.exec(ns, "web-"+from.name, "timeout", "5", "wget", "-qO-", "http://"+ips[to.name]+":8080/")
			if err != nil || strings.TrimSpace(string(out)) != "served-by-"+to.name {
				t.Errorf("pod on %s fetching the pod on %s (%s): %q, %v %s", from.name, to.name, ips[to.name], out, err, stderr)
			}
		}
		// A TCP connection through the Service's address, answered by the API server's port. Not
		// an HTTPS request: busybox's own TLS client shares no cipher suite with the API server's
		// EC certificate (on 1.37.2 wget fails with alert 40, handshake failure; an openssl
		// s_server with that certificate says "no shared cipher" to it). The pods that do speak
		// to the API server through it are the status controller's (TestPodsStatusWrittenBy...).
		out, stderr, err := s.exec(ns, "web-"+from.name, "sh", "-c", "nc -w 3 10.0.0.1 443 </dev/null && echo connected")
		if err != nil || strings.TrimSpace(string(out)) != "connected" {
			t.Errorf("pod on %s connecting to the API server (the kubernetes Service, 10.0.0.1:443): %q, %v %s", from.name, out, err, stderr)
		}
	}
	if !t.Failed() {
		t.Logf("pod IPs %v: each pod fetched every node's pod's page and connected to the API server's Service", ips)
	}
}

// ---------------------------------------------------------------------------------------------
// 2. One share, one pod on each node: all read it; a change of the source reaches every node,
// and a revocation empties every node's volume, each within the relist bound, with an event
// on each pod. Each node holds the volume of its own pod only.

// readersOnEveryNode shares data and starts, on each node, a pod "reader-<node>" of service
// account "app" mounting the share and running script; it returns the share, the pods'
// namespace, the pods (in the nodes' order) and the function that revokes their grant.
func (s *podSuite) readersOnEveryNode(t *testing.T, nodes []clusterNode, prefix string, data map[string][]byte, script string) (f *shareFixture, ns string, pods []string, revoke func()) {
	t.Helper()
	f = s.newShare(t, data)
	ns = s.podNamespace(t, prefix)
	s.createServiceAccount(t, ns, "app")
	revoke = s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	for _, n := range nodes {
		name := "reader-" + n.name
		s.createPodOn(t, ns, name, n.name, consumerSpec{sa: "app", attrs: f.attrs(), script: script})
		pods = append(pods, name)
	}
	for _, p := range pods {
		s.waitRunning(t, ns, p, 90*time.Second)
	}
	return f, ns, pods, revoke
}

func TestNodesShareReadOnEveryNode(t *testing.T) {
	s, nodes := nodesEnv(t)
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	f, ns, pods, revoke := s.readersOnEveryNode(t, nodes, "every-node", data, "")
	s.waitAllFiles(t, ns, pods, data, 10*time.Second)
	for i, n := range nodes {
		st, err := n.state()
		if err != nil {
			t.Fatal(err)
		}
		if got := st.volumesOf(ns); len(got) != 1 {
			t.Errorf("node %s holds %d volumes of the test's pods, want its own pod's one: %v", n.name, len(got), got)
		}
		t.Logf("node %s: pod %s reads the share; the node holds its volume %v", n.name, pods[i], st.volumesOf(ns))
	}

	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + randSuffix())}
	s.updateSecret(t, f.platform, f.secret, updated)
	took := s.waitAllFiles(t, ns, pods, updated, podsRelist+podsRelistSlack)
	t.Logf("source changed: every node's pod reads the new bytes after %s (relist interval %v)", formatTimes(took), podsRelist)
	for _, p := range pods {
		s.waitEvent(t, ns, p, reasonRefreshed, 10*time.Second)
	}

	revoke()
	took = s.waitAllFiles(t, ns, pods, map[string][]byte{}, podsRelist+podsRelistSlack)
	t.Logf("revoked: every node's volume empty after %s", formatTimes(took))
	for _, p := range pods {
		s.waitEvent(t, ns, p, reasonRevoked, 10*time.Second, "may not use SharedSecret "+quote(f.share))
		s.assertStillRunning(t, ns, p)
	}
}

// ---------------------------------------------------------------------------------------------
// 3. Drain: `kubectl drain` of the node a Deployment's pod runs on. The pod is recreated on
// another node and reads the share there; on the drained node nothing of the volume is left.

func TestNodesDrainMovesTheReaderAndLeavesNothing(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	f := s.newShare(t, data)
	ns := s.podNamespace(t, "drain")
	s.grant(t, ns, kindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	tmpl := s.consumerPod(ns, "", consumerSpec{attrs: f.attrs()})
	labels := map[string]string{"app": "drain-reader"}
	tmpl.ObjectMeta = metav1.ObjectMeta{Labels: labels}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := s.waitDeploymentPod(t, ns, "", 90*time.Second)
	s.waitFiles(t, ns, first.Name, data, 10*time.Second)
	var drained clusterNode
	for _, n := range nodes {
		if n.name == first.Spec.NodeName {
			drained = n
		}
	}
	id, err := drained.volumeID(string(first.UID))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := drained.state(); err != nil || len(st.mountsOf(id, string(first.UID))) < 2 {
		t.Fatalf("before the drain, node %s should hold the volume's tmpfs and the pod's bind mount: %v %v", drained.name, st.mountsOf(id, string(first.UID)), err)
	}

	t.Cleanup(func() { _ = exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "uncordon", drained.name).Run() })
	start := time.Now()
	out, err := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "drain", drained.name, "--ignore-daemonsets",
		"--delete-emptydir-data", "--force", "--timeout=120s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", drained.name, err, out)
	}
	drainTook := time.Since(start)
	moved := s.waitDeploymentPod(t, ns, first.Name, 90*time.Second)
	if moved.Spec.NodeName == drained.name {
		t.Fatalf("the new pod %s runs on the drained node %s", moved.Name, drained.name)
	}
	s.waitFiles(t, ns, moved.Name, data, 10*time.Second)
	reading := time.Since(start)

	// The drained node: no tmpfs, no bind mount, no volume dir, no record, no pod dir, and no
	// volume of any pod (every pod but the DaemonSet's left it; the driver pod's own mounts, its
	// service account token, stay).
	driver, err := s.driverPodOn(ctx, drained.name)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		st, err := drained.state()
		if err != nil {
			return err
		}
		var mounts []string
		for _, m := range st.mounts {
			if !strings.HasPrefix(m, "/var/lib/kubelet/pods/"+string(driver.UID)+"/") {
				mounts = append(mounts, m)
			}
		}
		if len(st.volumes) > 0 || len(mounts) > 0 {
			return fmt.Errorf("node %s still holds volumes %v and mounts %v", drained.name, st.volumes, mounts)
		}
		if _, err := drained.run("test", "!", "-e", filepath.Join("/var/lib/kubelet/pods", string(first.UID))); err != nil {
			return fmt.Errorf("the pod's dir is still on the node: %v", err)
		}
		return nil
	})
	t.Logf("drain of %s: %v; the Deployment's pod %s reads the share on %s %v after the drain began; the drained node holds no volume, mount or record",
		drained.name, drainTook.Round(100*time.Millisecond), moved.Name, moved.Spec.NodeName, reading.Round(100*time.Millisecond))
}

// waitDeploymentPod waits for the Deployment's one Running, Ready pod that is not notName.
func (s *podSuite) waitDeploymentPod(t *testing.T, ns, notName string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, timeout, func() error {
		list, err := s.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=drain-reader"})
		if err != nil {
			return err
		}
		for i, p := range list.Items {
			if p.Name != notName && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				pod = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no Ready pod of the Deployment but %q yet (%d pods)", notName, len(list.Items))
	})
	return pod
}

// ---------------------------------------------------------------------------------------------
// 4. Node lost: the node where the status controller replica holding the status Lease runs loses
// its kubelet, containerd, driver and that replica at once (SIGKILL). It goes NotReady; the Lease
// moves to the other replica (on another node: the chart's anti-affinity) within the README's
// bound (--status-lease-duration + 2 relist intervals) and share status is still written. A pod
// bound to the node is deleted while it is away. Back, the node's driver keeps the volume of the
// pod still bound there (it reads on, and refreshes), the deleted pod's volume goes, and nothing
// is left over.

func TestNodesLostNodeComesBack(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	holder := s.leaseHolder(t)
	holderPod, err := s.statusPodHolding(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	var lost clusterNode
	for _, n := range nodes {
		if holderPod.Spec.NodeName == n.name {
			lost = n
		}
	}
	if lost.name == "" {
		t.Fatalf("the status Lease holder %s runs on %q, no node of the cluster", holderPod.Name, holderPod.Spec.NodeName)
	}
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	f := s.newShare(t, data)
	ns := s.podNamespace(t, "lost")
	s.createServiceAccount(t, ns, "app")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "app"))
	for _, p := range []string{"stays", "deleted"} {
		s.createPodOn(t, ns, p, lost.name, consumerSpec{sa: "app", attrs: f.attrs()})
	}
	stays := s.waitRunning(t, ns, "stays", 90*time.Second)
	deleted := s.waitRunning(t, ns, "deleted", 90*time.Second)
	s.waitAllFiles(t, ns, []string{"stays", "deleted"}, data, 10*time.Second)
	staysID, err := lost.volumeID(string(stays.UID))
	if err != nil {
		t.Fatal(err)
	}
	deletedID, err := lost.volumeID(string(deleted.UID))
	if err != nil {
		t.Fatal(err)
	}
	driverBefore, err := s.driverPodOn(ctx, lost.name)
	if err != nil {
		t.Fatal(err)
	}

	// Power loss of the node's daemons.
	start := time.Now()
	if out, err := exec.Command("hack/cluster.sh", "node-kill", lost.name).CombinedOutput(); err != nil {
		t.Fatalf("hack/cluster.sh node-kill %s: %v\n%s", lost.name, err, out)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted { // leave the cluster whole for the next test, whatever failed
			_ = exec.Command("hack/cluster.sh", "node-start", lost.name).Run()
		}
	})

	var notReady, takeover time.Duration
	var newHolder string
	eventually(t, nodesMonitorGrace+nodesStatusLease+2*podsRelist+podsRelistSlack+5*time.Second, func() error {
		if notReady == 0 {
			node, err := s.kube.CoreV1().Nodes().Get(ctx, lost.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					notReady = time.Since(start)
				}
			}
		}
		if takeover == 0 {
			if h := s.leaseHolder(t); h != "" && !strings.HasPrefix(h, holderPod.Name+"_") {
				takeover, newHolder = time.Since(start), h
			}
		}
		if notReady == 0 || takeover == 0 {
			return fmt.Errorf("node %s NotReady after %v, Lease taken over after %v (0: not yet)", lost.name, notReady, takeover)
		}
		return nil
	})
	bound := nodesStatusLease + 2*podsRelist
	t.Logf("node %s lost: NotReady after %v (grace period %v); the status Lease moved from %s to %s after %v (README's bound: lease duration + 2 relist intervals = %v)",
		lost.name, notReady.Round(100*time.Millisecond), nodesMonitorGrace, holder, newHolder, takeover.Round(100*time.Millisecond), bound)
	if takeover > bound+podsRelistSlack {
		t.Errorf("the Lease moved after %v, beyond the README's bound of %v", takeover, bound)
	}
	// Status is still written: a share made now gets its Ready condition from the new holder.
	f2 := s.newShare(t, map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())})
	statusStart := time.Now()
	s.waitShareReady(t, f2.share, metav1.ConditionTrue, "SourceAvailable")
	t.Logf("while %s is away, a new share's Ready condition is written %v after its creation", lost.name, time.Since(statusStart).Round(100*time.Millisecond))

	// The pod "deleted" goes while its node is away: gone from the API, its containers and volume
	// still on the node.
	if err := s.kube.CoreV1().Pods(ns).Delete(ctx, "deleted", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}

	back := time.Now()
	if out, err := exec.Command("hack/cluster.sh", "node-start", lost.name).CombinedOutput(); err != nil {
		t.Fatalf("hack/cluster.sh node-start %s: %v\n%s", lost.name, err, out)
	}
	restarted = true
	var driverAfter *corev1.Pod
	eventually(t, 2*time.Minute, func() error {
		p, err := s.driverPodOn(ctx, lost.name)
		if err != nil {
			return err
		}
		if err := s.driverPodReady(ctx, lost.name, p); err != nil {
			return err
		}
		if p.UID == driverBefore.UID && p.Status.ContainerStatuses[0].RestartCount == driverBefore.Status.ContainerStatuses[0].RestartCount {
			return fmt.Errorf("driver pod %s not restarted yet", p.Name)
		}
		driverAfter = p
		return nil
	})
	driverBack := time.Since(back)
	log, err := s.podLog(ctx, podsDriverNS, driverAfter.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Both volumes were still there when the driver started again (the kubelet had not yet
	// learnt that "deleted" went): it resumes both, and unpublishes the deleted pod's when the
	// kubelet, cleaning up the orphaned pod, calls NodeUnpublishVolume.
	m := regexp.MustCompile(`"Recovered volumes" resumed=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Errorf("the node's driver did not log its recovery of volumes")
	} else if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Errorf("the node's driver resumed %d volumes; want at least the test's two", n)
	}
	s.waitFiles(t, ns, "stays", data, 10*time.Second)
	eventually(t, 90*time.Second, func() error {
		st, err := lost.state()
		if err != nil {
			return err
		}
		if got := st.volumesOf(ns); len(got) != 1 || got[0] != staysID {
			return fmt.Errorf("the node holds the test's volumes %v, want only %s (the deleted pod's was %s)", got, staysID, deletedID)
		}
		if left := st.mountsOf(deletedID, string(deleted.UID)); len(left) > 0 {
			return fmt.Errorf("the deleted pod's mounts are left: %v", left)
		}
		if len(st.mountsOf(staysID, string(stays.UID))) < 2 {
			return fmt.Errorf("the remaining pod's tmpfs or bind mount is gone: %v", st.mountsOf(staysID, string(stays.UID)))
		}
		// Nothing leaks: every mount under the driver's volumes dir belongs to a volume it records.
		for _, mp := range st.mounts {
			if rest, ok := strings.CutPrefix(mp, driverVolumesDir+"/"); ok {
				if _, known := st.volumes[strings.Split(rest, "/")[0]]; !known {
					return fmt.Errorf("mount %s of no recorded volume", mp)
				}
			}
		}
		if _, err := lost.run("test", "!", "-e", filepath.Join("/var/lib/kubelet/pods", string(deleted.UID))); err != nil {
			return fmt.Errorf("the deleted pod's dir is left: %v", err)
		}
		return nil
	})
	if log, err := s.podLog(ctx, podsDriverNS, driverAfter.Name); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(log, `"Unpublished volume" volumeID="`+deletedID+`"`) {
		t.Errorf("the node's driver did not unpublish the deleted pod's volume %s (NodeUnpublishVolume)", deletedID)
	}
	t.Logf("node %s back: its driver %s Ready and registered %v after the restart began; the bound pod's volume kept, the deleted pod's gone, nothing left over %v after it began",
		lost.name, driverAfter.Name, driverBack.Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond))

	// The kept volume still follows its source.
	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + randSuffix())}
	s.updateSecret(t, f.platform, f.secret, updated)
	s.waitFiles(t, ns, "stays", updated, podsRelist+podsRelistSlack)
	s.assertStillRunning(t, ns, "stays")
}

// statusPodHolding returns the status controller's pod whose identity holder is (the pod's name,
// "_", a per-process suffix).
func (s *podSuite) statusPodHolding(ctx context.Context, holder string) (*corev1.Pod, error) {
	list, err := s.kube.CoreV1().Pods(podsDriverNS).List(ctx, metav1.ListOptions{LabelSelector: statusSelector})
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

// leaseHolder is the status Lease's holder identity (the status controller's pod name, "_", a
// per-process suffix).
func (s *podSuite) leaseHolder(t *testing.T) string {
	t.Helper()
	l, err := s.kube.CoordinationV1().Leases(podsDriverNS).Get(context.Background(), statusLeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// ---------------------------------------------------------------------------------------------
// 5. Rolling upgrade: `helm upgrade` to a newer release rolls the DaemonSet one node at a time
// (the chart's maxUnavailable: 1) while a pod on each node reads its volume every 0.1 s: not one
// read fails. Afterwards refresh and revocation work on every node.

// rollReaderScript reads the volume every 0.1 s and logs each failure, and every 20th good read.
const rollReaderScript = `ok=0
while :; do
  if [ "$(cat /v/ca.crt 2>/dev/null)" = "$WANT" ]; then ok=$((ok+1)); else echo "FAIL after $ok good reads: $(ls /v 2>&1 | tr '\n' ' ')"; fi
  [ $((ok % 20)) -eq 1 ] && echo "OK $ok"
  sleep 0.1
done`

func TestNodesRollingUpgradeNeverFailsARead(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	want := "ca-" + randSuffix()
	f, ns, pods, revoke := s.readersOnEveryNode(t, nodes, "rolling", map[string][]byte{"ca.crt": []byte(want)}, "WANT="+want+"\n"+rollReaderScript)
	old := map[string]*corev1.Pod{}
	for _, n := range nodes {
		p, err := s.driverPodOn(ctx, n.name)
		if err != nil {
			t.Fatal(err)
		}
		old[n.name] = p
	}

	if s.release == nil {
		t.Fatal("the suite did not install the driver from the cluster's registry ($SRCSI_REGISTRY unset?): no release to upgrade from")
	}
	upgrade, err := s.prepareUpgrade()
	if err != nil {
		t.Fatal(err)
	}
	readsBefore := map[string]int{}
	for _, p := range pods {
		readsBefore[p], _ = s.goodReads(t, ns, p)
	}
	start := time.Now()
	if err := upgrade(); err != nil {
		t.Fatal(err)
	}
	// Watch the rollout: when each node's old driver pod went and its new one was Ready, and how
	// many nodes were ever without a Ready driver at once.
	gone, ready := map[string]time.Duration{}, map[string]time.Duration{}
	maxDown := 0
	eventually(t, 4*time.Minute, func() error {
		list, err := s.kube.CoreV1().Pods(podsDriverNS).List(ctx, metav1.ListOptions{LabelSelector: driverSelector})
		if err != nil {
			return err
		}
		readyOn := map[string]bool{}
		for _, p := range list.Items {
			n := p.Spec.NodeName
			was, onANode := old[n]
			if !onANode {
				// A new DaemonSet pod is created unbound and bound by the scheduler a moment
				// later: until then its node name is empty, and it counts for no node.
				continue
			}
			if p.UID == was.UID {
				if p.DeletionTimestamp != nil && gone[n] == 0 {
					gone[n] = time.Since(start)
				}
				if p.DeletionTimestamp == nil && podReady(&p) {
					readyOn[n] = true
				}
				continue
			}
			if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == s.image {
				readyOn[n] = true
				if ready[n] == 0 {
					ready[n] = time.Since(start)
				}
			}
		}
		if down := len(nodes) - len(readyOn); down > maxDown {
			maxDown = down
		}
		if len(ready) < len(nodes) {
			return fmt.Errorf("new driver Ready on %d of %d nodes", len(ready), len(nodes))
		}
		return nil
	})
	if _, err := s.waitDriver(ctx, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	rolled := time.Since(start)
	var order []string
	for _, n := range nodes {
		order = append(order, fmt.Sprintf("%s: old pod deleted at %v, new Ready at %v (%v down)", n.name,
			gone[n.name].Round(100*time.Millisecond), ready[n.name].Round(100*time.Millisecond), (ready[n.name]-gone[n.name]).Round(100*time.Millisecond)))
	}
	t.Logf("helm upgrade to %s rolled all %d nodes in %v; %s", s.release.version, len(nodes), rolled.Round(100*time.Millisecond), strings.Join(order, "; "))
	if maxDown > 1 {
		t.Errorf("%d nodes were without a Ready driver at once; the rollout should take one at a time", maxDown)
	}
	for _, n := range nodes {
		p, err := s.driverPodOn(ctx, n.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.checkPulledFromRelease(p); err != nil {
			t.Errorf("node %s: %v", n.name, err)
		}
	}

	// Not one failed read on any node, and each reader kept reading through the rollout.
	for _, p := range pods {
		reads, log := s.goodReads(t, ns, p)
		fails := strings.Count(log, "FAIL")
		during := reads - readsBefore[p]
		t.Logf("pod %s: %d good reads while the driver rolled (%d in all), %d failed reads", p, during, reads, fails)
		if fails > 0 {
			t.Errorf("pod %s failed %d reads during the rollout: %s", p, fails, firstLine(log, "FAIL"))
		}
		// One read every 0.1 s plus the read itself: at least 5 a second (less one log line's 20).
		if float64(during+20) < rolled.Seconds()*5 {
			t.Errorf("pod %s read only %d times over the %v rollout", p, during, rolled)
		}
		s.assertStillRunning(t, ns, p)
	}

	// Refresh and revocation, on every node, by the new drivers.
	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + randSuffix())}
	s.updateSecret(t, f.platform, f.secret, updated)
	took := s.waitAllFiles(t, ns, pods, updated, podsRelist+podsRelistSlack)
	t.Logf("after the upgrade: refreshed on every node after %s", formatTimes(took))
	revoke()
	took = s.waitAllFiles(t, ns, pods, map[string][]byte{}, podsRelist+podsRelistSlack)
	t.Logf("after the upgrade: revoked on every node after %s", formatTimes(took))
}

// goodReads is the reader pod's last logged count of good reads, and its log.
func (s *podSuite) goodReads(t *testing.T, ns, pod string) (int, string) {
	t.Helper()
	log, err := s.podLog(context.Background(), ns, pod)
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

func firstLine(log, substr string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}

// ---------------------------------------------------------------------------------------------
// 6. The API requests the three drivers make over several relist intervals, counted by the API
// server (its audit log: the node plugins' service account, by the node address each request came
// from, and the status controller's), against docs/scale.md's model: per node per cycle A + S
// (the node plugins no longer read the status Lease), plus per interval for the cluster the
// status controller's source checks, Lease renewals and its other replicas' Lease reads. Within
// 20%.

func TestNodesAPIRequestsMatchTheModel(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	if s.auditLog == "" {
		t.Fatal("$SRCSI_AUDIT_LOG is not set: hack/cluster.sh writes it")
	}
	// On each node: pods of 2 service accounts on 2 shares, so A = 4 reviews and S = 2 sources.
	shares := []*shareFixture{s.newShare(t, map[string][]byte{"ca.crt": []byte("a-" + randSuffix())}),
		s.newShare(t, map[string][]byte{"ca.crt": []byte("b-" + randSuffix())})}
	ns := s.podNamespace(t, "model")
	sas := []string{"app-a", "app-b"}
	for _, sa := range sas {
		s.createServiceAccount(t, ns, sa)
		for _, f := range shares {
			s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, sa))
		}
	}
	var pods []string
	for _, n := range nodes {
		for i, sa := range sas {
			for j, f := range shares {
				name := fmt.Sprintf("p%d%d-%s", i, j, n.name)
				s.createPodOn(t, ns, name, n.name, consumerSpec{sa: sa, attrs: f.attrs()})
				pods = append(pods, name)
			}
		}
	}
	for _, p := range pods {
		s.waitRunning(t, ns, p, 90*time.Second)
	}
	const a, src = 4, 2
	// Earlier tests' volumes would add to A and S: wait until the test's are the only ones.
	eventually(t, 90*time.Second, func() error {
		for _, n := range nodes {
			st, err := n.state()
			if err != nil {
				return err
			}
			if len(st.volumes) != len(st.volumesOf(ns)) || len(st.volumesOf(ns)) != a {
				return fmt.Errorf("node %s holds %d volumes, %d of them the test's (want %d, and no other)", n.name, len(st.volumes), len(st.volumesOf(ns)), a)
			}
		}
		return nil
	})

	scrapeAll := func() []scrapedMetrics {
		var out []scrapedMetrics
		for _, n := range nodes {
			m, err := scrapeMetrics("http://" + n.ip + ":" + driverMetricsPort + "/metrics")
			if err != nil {
				t.Fatalf("node %s: %v", n.name, err)
			}
			out = append(out, m)
		}
		return out
	}
	const intervals = 8
	s.waitCycles(t, 1)
	mark, err := markAudit(s.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	before, start := scrapeAll(), time.Now()
	time.Sleep(intervals * podsRelist)
	// The audit log is written after the response: a request of the window's last moment is in it
	// a little later.
	time.Sleep(500 * time.Millisecond)
	after, window := scrapeAll(), time.Since(start)
	events, err := mark.events(func(ev auditEvent) bool {
		return (ev.User.Username == driverUser || ev.User.Username == statusUser) && strings.HasPrefix(ev.UserAgent, "shared-resource-csi/")
	})
	if err != nil {
		t.Fatal(err)
	}
	nShares := 0
	for _, k := range []shareKind{kindSecret, kindConfigMap} {
		l, err := s.dyn.Resource(shareGVR(k)).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nShares += len(l.Items)
	}

	// The Lease holder renews every --status-lease-duration x 2/15 (status.go): 2 s; each other
	// replica reads the Lease once an interval.
	renewals := float64(podsRelist) / float64(nodesStatusLease*2/15)
	dep, err := s.kube.AppsV1().Deployments(podsDriverNS).Get(ctx, statusDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	candidates := float64(ptr.Deref(dep.Spec.Replicas, 1) - 1)
	var cycles float64
	var lines []string
	for i, n := range nodes {
		c := after[i].sum(metricRelistCycles, nil) - before[i].sum(metricRelistCycles, nil)
		cycles += c
		byKind, all := requestCounts{}, 0
		for _, ev := range events {
			if ev.User.Username == driverUser && len(ev.SourceIPs) > 0 && ev.SourceIPs[0] == n.ip {
				byKind[ev.Verb+"/"+ev.ObjectRef.Resource]++
				all++
			}
		}
		// Each node on its own: its volumes' reviews and sources, nothing of status.
		model, role := c*float64(a+src), "node plugin"
		nodeDiff := (float64(all) - model) / model
		lines = append(lines, fmt.Sprintf("%s (%s): %d requests in %.0f cycles, model %.1f (%+.0f%%) %v", n.name, role, all, c, model, nodeDiff*100, byKind))
		if nodeDiff > 0.2 || nodeDiff < -0.2 {
			t.Errorf("node %s (%s): %d requests, the model %.1f: %+.0f%%, beyond 20%%", n.name, role, all, model, nodeDiff*100)
		}
	}
	model := float64(a+src) + (float64(nShares)+renewals+candidates)/float64(len(nodes))
	measured := float64(len(events)) / cycles
	diff := (measured - model) / model
	t.Logf("%d nodes, %v window (%d relist intervals of %v): %d driver requests at the API server over %.0f cycles = %.1f per node per cycle;"+
		" model A + S + (shares + interval/2s + other status replicas)/nodes = %d + %d + (%d + %.1f + %.0f)/%d = %.1f; difference %+.0f%%\n  %s",
		len(nodes), window.Round(100*time.Millisecond), intervals, podsRelist, len(events), cycles, measured,
		a, src, nShares, renewals, candidates, len(nodes), model, diff*100, strings.Join(lines, "\n  "))
	if diff > 0.2 || diff < -0.2 {
		t.Errorf("measured %.1f requests per node per cycle, the model %.1f: %+.0f%%, beyond 20%%", measured, model, diff*100)
	}
	if out := os.Getenv("SRCSI_NODES_API_OUT"); out != "" {
		line := fmt.Sprintf("nodes=%d interval=%v shares=%d A=%d S=%d cycles=%.0f requests=%d measured=%.2f model=%.2f diff=%+.1f%%\n",
			len(nodes), podsRelist, nShares, a, src, cycles, len(events), measured, model, diff*100)
		if err := os.WriteFile(out, []byte(line), 0o644); err != nil {
			t.Error(err)
		}
	}
}
