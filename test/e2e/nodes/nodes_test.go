package nodes

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
//     share status Lease moves to a live node's driver within the bound docs/scale.md states and status is
//     still written; back, the node's driver keeps the volumes of pods still bound there,
//     the volume of a pod deleted meanwhile goes, and nothing leaks.
//   - Rolling upgrade: `helm upgrade` to a new release replaces the driver one node at a time
//     while a pod on each node reads its volume: not one failed read; refresh and revocation
//     work on every node afterwards.
//   - The API requests of the three drivers, from the audit log, against docs/scale.md's model.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

// nodesEnv is the pod suite on a cluster of three nodes, or fails the test.
func nodesEnv(t *testing.T) (*framework.PodSuite, []framework.ClusterNode) {
	t.Helper()
	s := framework.PodsEnv(t, framework.PodsAlone)
	nodes := framework.ClusterNodes(t)
	if len(nodes) < nodesWanted || len(s.Nodes) != len(nodes) {
		t.Fatalf("the multi-node suite needs %d nodes; the cluster has %d (run it with `make test`, or "+
			"`NODES=3 hack/cluster.sh up` then `hack/cluster.sh exec -- go -C test test -run '^TestNodes' ./e2e/nodes`)", nodesWanted, len(nodes))
	}
	return s, nodes
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
	ds, err := s.Kube.AppsV1().DaemonSets(framework.PodsDriverNS).Get(ctx, framework.DriverDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := ds.Status; st.DesiredNumberScheduled != int32(len(nodes)) || st.NumberReady != int32(len(nodes)) {
		t.Errorf("DaemonSet: %d desired, %d Ready; want %d", st.DesiredNumberScheduled, st.NumberReady, len(nodes))
	}
	for _, n := range nodes {
		pod, err := s.DriverPodOn(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DriverPodReady(ctx, n.Name, pod); err != nil {
			t.Error(err)
		}
		if s.Release == nil {
			t.Fatal("the suite did not install the driver from the cluster's registry ($SRCSI_REGISTRY unset: a cluster of `make up`, which starts none? `NODES=3 hack/cluster.sh up` does)")
		}
		if err := s.CheckPulledFromRelease(pod); err != nil {
			t.Errorf("node %s: %v", n.Name, err)
		}
		csiNode, err := s.Kube.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == framework.DriverName && d.NodeID != n.Name {
				t.Errorf("CSINode %s lists the driver with node id %q", n.Name, d.NodeID)
			}
		}
		m, err := framework.ScrapeMetrics("http://" + n.IP + ":" + framework.DriverMetricsPort + "/metrics")
		if err != nil {
			t.Errorf("node %s: the driver's /metrics: %v", n.Name, err)
		} else if !m.Has(framework.MetricRelistCycles, nil) {
			t.Errorf("node %s: /metrics has no %s", n.Name, framework.MetricRelistCycles)
		}
		// Each node has its own kubelet dir: the driver's socket is there, in that node's mount
		// namespace.
		if _, err := n.Run("test", "-S", filepath.Join("/var/lib/kubelet/plugins", framework.DriverName, "csi.sock")); err != nil {
			t.Errorf("node %s: no driver socket in its kubelet dir: %v", n.Name, err)
		}
		t.Logf("node %s: driver pod %s Ready, registered, image %s", n.Name, pod.Name, pod.Status.ContainerStatuses[0].ImageID)
	}
}

// ---------------------------------------------------------------------------------------------
// 1b. The cluster's network: a pod on each node serves a page; every pod fetches every other
// node's pod's page by its pod IP, and reaches the API server through the `kubernetes` Service.

func TestNodesPodsReachEachOtherAndTheAPIServer(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	ns := s.PodNamespace(t, "network")
	grace, no := int64(1), false
	ips := map[string]string{}
	for _, n := range nodes {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + n.Name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName: n.Name, TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
				Containers: []corev1.Container{{Name: "app", Image: s.Busybox, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", "mkdir -p /tmp/www && echo served-by-" + n.Name + " >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"}}},
			},
		}
		if _, err := s.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		ips[n.Name] = s.WaitRunning(t, ns, "web-"+n.Name, 90*time.Second).Status.PodIP
	}
	for _, from := range nodes {
		for _, to := range nodes {
			out, stderr, err := s.Exec(ns, "web-"+from.Name, "timeout", "5", "wget", "-qO-", "http://"+ips[to.Name]+":8080/")
			if err != nil || strings.TrimSpace(string(out)) != "served-by-"+to.Name {
				t.Errorf("pod on %s fetching the pod on %s (%s): %q, %v %s", from.Name, to.Name, ips[to.Name], out, err, stderr)
			}
		}
		// A TCP connection through the Service's address, answered by the API server's port. Not
		// an HTTPS request: busybox's own TLS client shares no cipher suite with the API server's
		// EC certificate (on 1.37.2 wget fails with alert 40, handshake failure; an openssl
		// s_server with that certificate says "no shared cipher" to it). The pods that do speak
		// to the API server through it are the status controller's (TestPodsStatusWrittenBy...).
		out, stderr, err := s.Exec(ns, "web-"+from.Name, "sh", "-c", "nc -w 3 10.0.0.1 443 </dev/null && echo connected")
		if err != nil || strings.TrimSpace(string(out)) != "connected" {
			t.Errorf("pod on %s connecting to the API server (the kubernetes Service, 10.0.0.1:443): %q, %v %s", from.Name, out, err, stderr)
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

func TestNodesShareReadOnEveryNode(t *testing.T) {
	s, nodes := nodesEnv(t)
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	f, ns, pods, revoke := s.ReadersOnEveryNode(t, nodes, "every-node", data, "")
	s.WaitAllFiles(t, ns, pods, data, 10*time.Second)
	for i, n := range nodes {
		st, err := n.State()
		if err != nil {
			t.Fatal(err)
		}
		if got := st.VolumesOf(ns); len(got) != 1 {
			t.Errorf("node %s holds %d volumes of the test's pods, want its own pod's one: %v", n.Name, len(got), got)
		}
		t.Logf("node %s: pod %s reads the share; the node holds its volume %v", n.Name, pods[i], st.VolumesOf(ns))
	}

	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + framework.RandSuffix())}
	s.UpdateSecret(t, f.Platform, f.Secret, updated)
	took := s.WaitAllFiles(t, ns, pods, updated, framework.PodsRelist+framework.PodsRelistSlack)
	t.Logf("source changed: every node's pod reads the new bytes after %s (relist interval %v)", formatTimes(took), framework.PodsRelist)
	for _, p := range pods {
		s.WaitEvent(t, ns, p, framework.ReasonRefreshed, 10*time.Second)
	}

	revoke()
	took = s.WaitAllFiles(t, ns, pods, map[string][]byte{}, framework.PodsRelist+framework.PodsRelistSlack)
	t.Logf("revoked: every node's volume empty after %s", formatTimes(took))
	for _, p := range pods {
		s.WaitEvent(t, ns, p, framework.ReasonRevoked, 10*time.Second, "may not use SharedSecret "+framework.Quote(f.Share))
		s.AssertStillRunning(t, ns, p)
	}
}

// ---------------------------------------------------------------------------------------------
// 3. Drain: `kubectl drain` of the node a Deployment's pod runs on. The pod is recreated on
// another node and reads the share there; on the drained node nothing of the volume is left.

func TestNodesDrainMovesTheReaderAndLeavesNothing(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	f := s.NewShare(t, data)
	ns := s.PodNamespace(t, "drain")
	s.Grant(t, ns, framework.KindSecret, f.Share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	tmpl := s.ConsumerPod(ns, "", framework.ConsumerSpec{Attrs: f.Attrs()})
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
	if _, err := s.Kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := s.WaitDeploymentPod(t, ns, "", 90*time.Second)
	s.WaitFiles(t, ns, first.Name, data, 10*time.Second)
	var drained framework.ClusterNode
	for _, n := range nodes {
		if n.Name == first.Spec.NodeName {
			drained = n
		}
	}
	id, err := drained.VolumeID(string(first.UID))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := drained.State(); err != nil || len(st.MountsOf(id, string(first.UID))) < 2 {
		t.Fatalf("before the drain, node %s should hold the volume's tmpfs and the pod's bind mount: %v %v", drained.Name, st.MountsOf(id, string(first.UID)), err)
	}

	t.Cleanup(func() { _ = exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, "uncordon", drained.Name).Run() })
	start := time.Now()
	out, err := exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, "drain", drained.Name, "--ignore-daemonsets",
		"--delete-emptydir-data", "--force", "--timeout=120s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", drained.Name, err, out)
	}
	drainTook := time.Since(start)
	moved := s.WaitDeploymentPod(t, ns, first.Name, 90*time.Second)
	if moved.Spec.NodeName == drained.Name {
		t.Fatalf("the new pod %s runs on the drained node %s", moved.Name, drained.Name)
	}
	s.WaitFiles(t, ns, moved.Name, data, 10*time.Second)
	reading := time.Since(start)

	// The drained node: no tmpfs, no bind mount, no volume dir, no record, no pod dir, and no
	// volume of any pod (every pod but the DaemonSet's left it; the driver pod's own mounts, its
	// service account token, stay).
	driver, err := s.DriverPodOn(ctx, drained.Name)
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		st, err := drained.State()
		if err != nil {
			return err
		}
		var mounts []string
		for _, m := range st.Mounts {
			if !strings.HasPrefix(m, "/var/lib/kubelet/pods/"+string(driver.UID)+"/") {
				mounts = append(mounts, m)
			}
		}
		if len(st.Volumes) > 0 || len(mounts) > 0 {
			return fmt.Errorf("node %s still holds volumes %v and mounts %v", drained.Name, st.Volumes, mounts)
		}
		if _, err := drained.Run("test", "!", "-e", filepath.Join("/var/lib/kubelet/pods", string(first.UID))); err != nil {
			return fmt.Errorf("the pod's dir is still on the node: %v", err)
		}
		return nil
	})
	t.Logf("drain of %s: %v; the Deployment's pod %s reads the share on %s %v after the drain began; the drained node holds no volume, mount or record",
		drained.Name, drainTook.Round(100*time.Millisecond), moved.Name, moved.Spec.NodeName, reading.Round(100*time.Millisecond))
}

// ---------------------------------------------------------------------------------------------
// 4. Node lost: the node where the status controller replica holding the status Lease runs loses
// its kubelet, containerd, driver and that replica at once (SIGKILL). It goes NotReady; the Lease
// moves to the other replica (on another node: the chart's anti-affinity) within docs/scale.md's
// bound (--status-lease-duration + 2 relist intervals) and share status is still written. A pod
// bound to the node is deleted while it is away. Back, the node's driver keeps the volume of the
// pod still bound there (it reads on, and refreshes), the deleted pod's volume goes, and nothing
// is left over.

func TestNodesLostNodeComesBack(t *testing.T) {
	s, nodes := nodesEnv(t)
	ctx := context.Background()
	holder := s.LeaseHolder(t)
	holderPod, err := s.StatusPodHolding(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	var lost framework.ClusterNode
	for _, n := range nodes {
		if holderPod.Spec.NodeName == n.Name {
			lost = n
		}
	}
	if lost.Name == "" {
		t.Fatalf("the status Lease holder %s runs on %q, no node of the cluster", holderPod.Name, holderPod.Spec.NodeName)
	}
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	f := s.NewShare(t, data)
	ns := s.PodNamespace(t, "lost")
	s.CreateServiceAccount(t, ns, "app")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "app"))
	for _, p := range []string{"stays", "deleted"} {
		s.CreatePodOn(t, ns, p, lost.Name, framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	}
	stays := s.WaitRunning(t, ns, "stays", 90*time.Second)
	deleted := s.WaitRunning(t, ns, "deleted", 90*time.Second)
	s.WaitAllFiles(t, ns, []string{"stays", "deleted"}, data, 10*time.Second)
	staysID, err := lost.VolumeID(string(stays.UID))
	if err != nil {
		t.Fatal(err)
	}
	deletedID, err := lost.VolumeID(string(deleted.UID))
	if err != nil {
		t.Fatal(err)
	}
	driverBefore, err := s.DriverPodOn(ctx, lost.Name)
	if err != nil {
		t.Fatal(err)
	}

	// Power loss of the node's daemons.
	start := time.Now()
	if out, err := exec.Command("hack/cluster.sh", "node-kill", lost.Name).CombinedOutput(); err != nil {
		t.Fatalf("hack/cluster.sh node-kill %s: %v\n%s", lost.Name, err, out)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted { // leave the cluster whole for the next test, whatever failed
			_ = exec.Command("hack/cluster.sh", "node-start", lost.Name).Run()
		}
	})

	var notReady, takeover time.Duration
	var newHolder string
	framework.Eventually(t, nodesMonitorGrace+nodesStatusLease+2*framework.PodsRelist+framework.PodsRelistSlack+5*time.Second, func() error {
		if notReady == 0 {
			node, err := s.Kube.CoreV1().Nodes().Get(ctx, lost.Name, metav1.GetOptions{})
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
			if h := s.LeaseHolder(t); h != "" && !strings.HasPrefix(h, holderPod.Name+"_") {
				takeover, newHolder = time.Since(start), h
			}
		}
		if notReady == 0 || takeover == 0 {
			return fmt.Errorf("node %s NotReady after %v, Lease taken over after %v (0: not yet)", lost.Name, notReady, takeover)
		}
		return nil
	})
	bound := nodesStatusLease + 2*framework.PodsRelist
	t.Logf("node %s lost: NotReady after %v (grace period %v); the status Lease moved from %s to %s after %v (docs/scale.md's bound: lease duration + 2 relist intervals = %v)",
		lost.Name, notReady.Round(100*time.Millisecond), nodesMonitorGrace, holder, newHolder, takeover.Round(100*time.Millisecond), bound)
	if takeover > bound+framework.PodsRelistSlack {
		t.Errorf("the Lease moved after %v, beyond docs/scale.md's bound of %v", takeover, bound)
	}
	// Status is still written: a share made now gets its Ready condition from the new holder.
	f2 := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())})
	statusStart := time.Now()
	s.WaitShareReady(t, f2.Share, metav1.ConditionTrue, "SourceAvailable")
	t.Logf("while %s is away, a new share's Ready condition is written %v after its creation", lost.Name, time.Since(statusStart).Round(100*time.Millisecond))

	// The pod "deleted" goes while its node is away: gone from the API, its containers and volume
	// still on the node.
	if err := s.Kube.CoreV1().Pods(ns).Delete(ctx, "deleted", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}

	back := time.Now()
	if out, err := exec.Command("hack/cluster.sh", "node-start", lost.Name).CombinedOutput(); err != nil {
		t.Fatalf("hack/cluster.sh node-start %s: %v\n%s", lost.Name, err, out)
	}
	restarted = true
	var driverAfter *corev1.Pod
	framework.Eventually(t, 2*time.Minute, func() error {
		p, err := s.DriverPodOn(ctx, lost.Name)
		if err != nil {
			return err
		}
		if err := s.DriverPodReady(ctx, lost.Name, p); err != nil {
			return err
		}
		if p.UID == driverBefore.UID && p.Status.ContainerStatuses[0].RestartCount == driverBefore.Status.ContainerStatuses[0].RestartCount {
			return fmt.Errorf("driver pod %s not restarted yet", p.Name)
		}
		driverAfter = p
		return nil
	})
	driverBack := time.Since(back)
	log, err := s.PodLog(ctx, framework.PodsDriverNS, driverAfter.Name)
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
	s.WaitFiles(t, ns, "stays", data, 10*time.Second)
	framework.Eventually(t, 90*time.Second, func() error {
		st, err := lost.State()
		if err != nil {
			return err
		}
		if got := st.VolumesOf(ns); len(got) != 1 || got[0] != staysID {
			return fmt.Errorf("the node holds the test's volumes %v, want only %s (the deleted pod's was %s)", got, staysID, deletedID)
		}
		if left := st.MountsOf(deletedID, string(deleted.UID)); len(left) > 0 {
			return fmt.Errorf("the deleted pod's mounts are left: %v", left)
		}
		if len(st.MountsOf(staysID, string(stays.UID))) < 2 {
			return fmt.Errorf("the remaining pod's tmpfs or bind mount is gone: %v", st.MountsOf(staysID, string(stays.UID)))
		}
		// Nothing leaks: every mount under the driver's volumes dir belongs to a volume it records.
		for _, mp := range st.Mounts {
			if rest, ok := strings.CutPrefix(mp, framework.DriverVolumesDir+"/"); ok {
				if _, known := st.Volumes[strings.Split(rest, "/")[0]]; !known {
					return fmt.Errorf("mount %s of no recorded volume", mp)
				}
			}
		}
		if _, err := lost.Run("test", "!", "-e", filepath.Join("/var/lib/kubelet/pods", string(deleted.UID))); err != nil {
			return fmt.Errorf("the deleted pod's dir is left: %v", err)
		}
		return nil
	})
	if log, err := s.PodLog(ctx, framework.PodsDriverNS, driverAfter.Name); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(log, `"Unpublished volume" volumeID="`+deletedID+`"`) {
		t.Errorf("the node's driver did not unpublish the deleted pod's volume %s (NodeUnpublishVolume)", deletedID)
	}
	t.Logf("node %s back: its driver %s Ready and registered %v after the restart began; the bound pod's volume kept, the deleted pod's gone, nothing left over %v after it began",
		lost.Name, driverAfter.Name, driverBack.Round(100*time.Millisecond), time.Since(back).Round(100*time.Millisecond))

	// The kept volume still follows its source.
	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + framework.RandSuffix())}
	s.UpdateSecret(t, f.Platform, f.Secret, updated)
	s.WaitFiles(t, ns, "stays", updated, framework.PodsRelist+framework.PodsRelistSlack)
	s.AssertStillRunning(t, ns, "stays")
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
	want := "ca-" + framework.RandSuffix()
	f, ns, pods, revoke := s.ReadersOnEveryNode(t, nodes, "rolling", map[string][]byte{"ca.crt": []byte(want)}, "WANT="+want+"\n"+rollReaderScript)
	old := map[string]*corev1.Pod{}
	for _, n := range nodes {
		p, err := s.DriverPodOn(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		old[n.Name] = p
	}

	if s.Release == nil {
		t.Fatal("the suite did not install the driver from the cluster's registry ($SRCSI_REGISTRY unset?): no release to upgrade from")
	}
	upgrade, err := s.PrepareUpgrade()
	if err != nil {
		t.Fatal(err)
	}
	readsBefore := map[string]int{}
	for _, p := range pods {
		readsBefore[p], _ = s.GoodReads(t, ns, p)
	}
	start := time.Now()
	if err := upgrade(); err != nil {
		t.Fatal(err)
	}
	// Watch the rollout: when each node's old driver pod went and its new one was Ready, and how
	// many nodes were ever without a Ready driver at once.
	gone, ready := map[string]time.Duration{}, map[string]time.Duration{}
	maxDown := 0
	framework.Eventually(t, 4*time.Minute, func() error {
		list, err := s.Kube.CoreV1().Pods(framework.PodsDriverNS).List(ctx, metav1.ListOptions{LabelSelector: framework.DriverSelector})
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
				if p.DeletionTimestamp == nil && framework.PodReady(&p) {
					readyOn[n] = true
				}
				continue
			}
			if p.DeletionTimestamp == nil && framework.PodReady(&p) && p.Spec.Containers[0].Image == s.Image {
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
	if _, err := s.WaitDriver(ctx, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	rolled := time.Since(start)
	var order []string
	for _, n := range nodes {
		order = append(order, fmt.Sprintf("%s: old pod deleted at %v, new Ready at %v (%v down)", n.Name,
			gone[n.Name].Round(100*time.Millisecond), ready[n.Name].Round(100*time.Millisecond), (ready[n.Name]-gone[n.Name]).Round(100*time.Millisecond)))
	}
	t.Logf("helm upgrade to %s rolled all %d nodes in %v; %s", s.Release.Version, len(nodes), rolled.Round(100*time.Millisecond), strings.Join(order, "; "))
	if maxDown > 1 {
		t.Errorf("%d nodes were without a Ready driver at once; the rollout should take one at a time", maxDown)
	}
	for _, n := range nodes {
		p, err := s.DriverPodOn(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CheckPulledFromRelease(p); err != nil {
			t.Errorf("node %s: %v", n.Name, err)
		}
	}

	// Not one failed read on any node, and each reader kept reading through the rollout.
	for _, p := range pods {
		reads, log := s.GoodReads(t, ns, p)
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
		s.AssertStillRunning(t, ns, p)
	}

	// Refresh and revocation, on every node, by the new drivers.
	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + framework.RandSuffix())}
	s.UpdateSecret(t, f.Platform, f.Secret, updated)
	took := s.WaitAllFiles(t, ns, pods, updated, framework.PodsRelist+framework.PodsRelistSlack)
	t.Logf("after the upgrade: refreshed on every node after %s", formatTimes(took))
	revoke()
	took = s.WaitAllFiles(t, ns, pods, map[string][]byte{}, framework.PodsRelist+framework.PodsRelistSlack)
	t.Logf("after the upgrade: revoked on every node after %s", formatTimes(took))
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
	if s.AuditLog == "" {
		t.Fatal("$SRCSI_AUDIT_LOG is not set: hack/cluster.sh writes it")
	}
	// On each node: pods of 2 service accounts on 2 shares, so A = 4 reviews and S = 2 sources.
	shares := []*framework.ShareFixture{s.NewShare(t, map[string][]byte{"ca.crt": []byte("a-" + framework.RandSuffix())}),
		s.NewShare(t, map[string][]byte{"ca.crt": []byte("b-" + framework.RandSuffix())})}
	ns := s.PodNamespace(t, "model")
	sas := []string{"app-a", "app-b"}
	for _, sa := range sas {
		s.CreateServiceAccount(t, ns, sa)
		for _, f := range shares {
			s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, sa))
		}
	}
	var pods []string
	for _, n := range nodes {
		for i, sa := range sas {
			for j, f := range shares {
				name := fmt.Sprintf("p%d%d-%s", i, j, n.Name)
				s.CreatePodOn(t, ns, name, n.Name, framework.ConsumerSpec{Sa: sa, Attrs: f.Attrs()})
				pods = append(pods, name)
			}
		}
	}
	for _, p := range pods {
		s.WaitRunning(t, ns, p, 90*time.Second)
	}
	const a, src = 4, 2
	// Earlier tests' volumes would add to A and S: wait until the test's are the only ones.
	framework.Eventually(t, 90*time.Second, func() error {
		for _, n := range nodes {
			st, err := n.State()
			if err != nil {
				return err
			}
			if len(st.Volumes) != len(st.VolumesOf(ns)) || len(st.VolumesOf(ns)) != a {
				return fmt.Errorf("node %s holds %d volumes, %d of them the test's (want %d, and no other)", n.Name, len(st.Volumes), len(st.VolumesOf(ns)), a)
			}
		}
		return nil
	})

	scrapeAll := func() []framework.ScrapedMetrics {
		var out []framework.ScrapedMetrics
		for _, n := range nodes {
			m, err := framework.ScrapeMetrics("http://" + n.IP + ":" + framework.DriverMetricsPort + "/metrics")
			if err != nil {
				t.Fatalf("node %s: %v", n.Name, err)
			}
			out = append(out, m)
		}
		return out
	}
	const intervals = 8
	s.WaitCycles(t, 1)
	mark, err := framework.MarkAudit(s.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	before, start := scrapeAll(), time.Now()
	time.Sleep(intervals * framework.PodsRelist)
	// The audit log is written after the response: a request of the window's last moment is in it
	// a little later.
	time.Sleep(500 * time.Millisecond)
	after, window := scrapeAll(), time.Since(start)
	events, err := mark.Events(func(ev framework.AuditEvent) bool {
		return (ev.User.Username == framework.DriverUser || ev.User.Username == framework.StatusUser) && strings.HasPrefix(ev.UserAgent, "shared-resource-csi/")
	})
	if err != nil {
		t.Fatal(err)
	}
	nShares := 0
	for _, k := range []framework.ShareKind{framework.KindSecret, framework.KindConfigMap} {
		l, err := s.Dyn.Resource(framework.ShareGVR(k)).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nShares += len(l.Items)
	}

	// The Lease holder renews every --status-lease-duration x 2/15
	// (internal/sharestatus/writer.go): 2 s; each other replica reads the Lease once an interval.
	renewals := float64(framework.PodsRelist) / float64(nodesStatusLease*2/15)
	dep, err := s.Kube.AppsV1().Deployments(framework.PodsDriverNS).Get(ctx, framework.StatusDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	candidates := float64(ptr.Deref(dep.Spec.Replicas, 1) - 1)
	var cycles float64
	var lines []string
	for i, n := range nodes {
		c := after[i].Sum(framework.MetricRelistCycles, nil) - before[i].Sum(framework.MetricRelistCycles, nil)
		cycles += c
		byKind, all := framework.RequestCounts{}, 0
		for _, ev := range events {
			if ev.User.Username == framework.DriverUser && len(ev.SourceIPs) > 0 && ev.SourceIPs[0] == n.IP {
				byKind[ev.Verb+"/"+ev.ObjectRef.Resource]++
				all++
			}
		}
		// Each node on its own: its volumes' reviews and sources, nothing of status.
		model, role := c*float64(a+src), "node plugin"
		nodeDiff := (float64(all) - model) / model
		lines = append(lines, fmt.Sprintf("%s (%s): %d requests in %.0f cycles, model %.1f (%+.0f%%) %v", n.Name, role, all, c, model, nodeDiff*100, byKind))
		if nodeDiff > 0.2 || nodeDiff < -0.2 {
			t.Errorf("node %s (%s): %d requests, the model %.1f: %+.0f%%, beyond 20%%", n.Name, role, all, model, nodeDiff*100)
		}
	}
	model := float64(a+src) + (float64(nShares)+renewals+candidates)/float64(len(nodes))
	measured := float64(len(events)) / cycles
	diff := (measured - model) / model
	t.Logf("%d nodes, %v window (%d relist intervals of %v): %d driver requests at the API server over %.0f cycles = %.1f per node per cycle;"+
		" model A + S + (shares + interval/2s + other status replicas)/nodes = %d + %d + (%d + %.1f + %.0f)/%d = %.1f; difference %+.0f%%\n  %s",
		len(nodes), window.Round(100*time.Millisecond), intervals, framework.PodsRelist, len(events), cycles, measured,
		a, src, nShares, renewals, candidates, len(nodes), model, diff*100, strings.Join(lines, "\n  "))
	if diff > 0.2 || diff < -0.2 {
		t.Errorf("measured %.1f requests per node per cycle, the model %.1f: %+.0f%%, beyond 20%%", measured, model, diff*100)
	}
	if out := os.Getenv("SRCSI_NODES_API_OUT"); out != "" {
		line := fmt.Sprintf("nodes=%d interval=%v shares=%d A=%d S=%d cycles=%.0f requests=%d measured=%.2f model=%.2f diff=%+.1f%%\n",
			len(nodes), framework.PodsRelist, nShares, a, src, cycles, len(events), measured, model, diff*100)
		if err := os.WriteFile(out, []byte(line), 0o644); err != nil {
			t.Error(err)
		}
	}
}
