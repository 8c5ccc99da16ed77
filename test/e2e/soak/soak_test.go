package soak

// The soak: on the three-node cluster (hack/cluster.sh NODES=3), with the driver installed as in
// the pod suite, a workload drawn from a seed runs for SOAK_DURATION while faults are injected,
// then the checker (checker.go) judges every read every consumer made.
//
//   - Workload: consumer Deployments in three namespaces, each pod mounting one or two shares
//     (some with spec.items, some with refreshResource "false"), scaled up and down, their pods
//     deleted; shares deleted and re-created; grants removed and given again; every source
//     updated on a schedule with versioned content (checker.go: VersionData).
//   - Faults, each recorded with its start and the moment the cluster had recovered: SIGKILL of a
//     node's driver; the kubelet and containerd of a node killed and started again at once; the
//     API server and etcd killed and started again; a node lost (kubelet, containerd, driver
//     killed) for longer than the node monitor's grace, then back; a node drained, then
//     uncordoned; the status controller's replicas SIGKILLed.
//   - Readers: each consumer's busybox loop reads k1, k2, k1 of each volume through the key
//     links (and so `..data`) as fast as its CPU limit lets it, and logs, with the time, every
//     read that differs from the one before, and a heartbeat every second. The log goes to a
//     hostPath under the run's output dir, so it survives the pod's deletion, its node's loss and
//     the API server's.
//   - At the end, every consumer gone: no volume dir, record or mount of a gone pod on any node;
//     each driver's RSS, goroutines and open fds against their values after the warm-up.
//
// Environment: SOAK_DURATION (default 3m), SOAK_SEED (default: from the clock; printed),
// SOAK_OUT (default _output/soak/<time>-seed<seed>): history.json, report.txt, readers/*.log,
// metrics.tsv, drivers/*.log. hack/soak.sh (`make soak`) sets them.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/test/e2e/framework"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	soakShares     = 4
	soakNamespaces = 3
	soakDeploys    = 2 // per namespace
	// The node monitor's grace with several nodes (hack/cluster.sh): a lost node stays away longer.
	soakNodeGrace = 20 * time.Second
)

// soakBounds: the relist interval of the pod suite (3 s) varied by ±10% and spread over
// --relist-spread (docs/security.md: within 1.6 intervals), plus the pod suite's slack for a
// cycle's own API calls; after a fault the same again once the driver is back.
var soakBounds = Bounds{
	Refresh:  framework.PodsRelist*16/10 + framework.PodsRelistSlack,
	Revoke:   framework.PodsRelist*16/10 + framework.PodsRelistSlack,
	Recovery: framework.PodsRelist*16/10 + framework.PodsRelistSlack,
}

// soakMargins: how far a driver may end above its figures after the warm-up.
var soakMargins = Margins{RSSFactor: 1.5, RSSBytes: 16 << 20, Goroutines: 25, FDs: 10}

// readerScript is the consumer's reader (busybox sh, no process forked per read). $VOLS names the
// volumes mounted at /v/<name>; $SPEC is the header's volume list.
const readerScript = `LOG=/soaklog/$NS.$POD.$PODUID.log
echo "H $EPOCHREALTIME $NS $POD $NODE $SPEC" >>$LOG
n=0; hb=
while :; do
  n=$((n+1))
  for v in $VOLS; do
    r=
    for k in k1 k2 k1; do
      x=-
      { read -r x </v/$v/$k; } 2>/dev/null
      r="$r|$x"
    done
    r=${r#|}
    eval "l=\$L_$v"
    if [ "$r" != "$l" ]; then echo "C $EPOCHREALTIME $v $n $r" >>$LOG; eval "L_$v=\$r"; fi
  done
  s=${EPOCHREALTIME%.*}
  if [ "$s" != "$hb" ]; then hb=$s; echo "B $EPOCHREALTIME $n" >>$LOG; fi
done`

type soakRun struct {
	t     *testing.T
	s     *framework.PodSuite
	nodes []framework.ClusterNode
	rng   *rand.Rand
	out   string
	ctx   context.Context

	mu        sync.Mutex
	hist      History
	granted   map[string]bool // namespace/share
	exists    map[string]bool // share
	allowed   map[string]bool // namespace/share, as last recorded
	version   map[string]int  // share
	srcNS     string
	shares    []string
	items     map[string]bool
	nss       []string
	deploys   []*appsv1.Deployment
	actions   map[string]int
	problems  []string // what went wrong in the harness (a fault that did not recover...)
	leftovers []Violation
	series    []string // metrics.tsv lines
}

func (r *soakRun) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%s "+format, append([]any{time.Now().UTC().Format("15:04:05.000")}, args...)...)
}

func (r *soakRun) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.problems = append(r.problems, time.Now().UTC().Format("15:04:05.000")+" "+msg)
	r.mu.Unlock()
	r.t.Log("harness: " + msg)
}

// retry calls f until it succeeds or the timeout passes (the API server may be down).
func retry(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func TestSoak(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	nodes := clusterNodes(t, s)
	duration := envDuration("SOAK_DURATION", 3*time.Minute)
	seed := uint64(time.Now().UnixNano() % 1_000_000)
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	out := os.Getenv("SOAK_OUT")
	if out == "" {
		out = filepath.Join("_output", "soak", time.Now().UTC().Format("20060102-150405")+"-seed"+strconv.FormatUint(seed, 10))
	}
	out, _ = filepath.Abs(out)
	if err := os.MkdirAll(filepath.Join(out, "readers"), 0o755); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("soak: seed %d, duration %v, %d nodes, output %s\n", seed, duration, len(nodes), out)
	r := &soakRun{t: t, s: s, nodes: nodes, rng: rand.New(rand.NewPCG(seed, 0x50a4)), out: out, ctx: context.Background(),
		granted: map[string]bool{}, exists: map[string]bool{}, allowed: map[string]bool{}, version: map[string]int{},
		items: map[string]bool{}, actions: map[string]int{}}
	r.hist = History{Start: time.Now(), Versions: map[string][]SourceVersion{}, Access: map[string][]AccessChange{}}
	if err := os.WriteFile(filepath.Join(out, "seed"), []byte(fmt.Sprintf("%d\nduration %v\n", seed, duration)), 0o644); err != nil {
		t.Fatal(err)
	}

	r.setup()
	warm := r.waitWarm()
	r.logf("warm-up done: %d consumer pods running", r.runningConsumers())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); r.updateSources(stop) }()
	go func() { defer wg.Done(); r.churn(stop) }()
	go func() { defer wg.Done(); r.sampleMetrics(stop, 15*time.Second) }()
	r.injectFaults(duration)
	close(stop)
	wg.Wait()
	// The last changes settle before the readers stop.
	time.Sleep(soakBounds.Refresh)
	r.hist.End = time.Now()

	// Every consumer goes; then the nodes must hold nothing of them.
	r.teardownConsumers()
	r.checkNodesClean()
	end := r.sampleAll("end")
	r.saveDriverLogs()

	logs := r.readLogs()
	rep := Check(&r.hist, soakBounds, logs)
	rep.Violations = append(rep.Violations, r.leftovers...)
	rep.Violations = append(rep.Violations, CheckResources(warm, end, soakMargins)...)
	r.report(rep, seed, duration, warm, end)
	for k, n := range rep.ByKind() {
		if n > 0 {
			t.Errorf("%d %s violations (seed %d; details in %s/report.txt)", n, k, seed, out)
		}
	}
	if len(r.problems) > 0 {
		t.Errorf("the harness could not do what the seed asked (%d problems; %s/report.txt): %s", len(r.problems), out, strings.Join(r.problems, "; "))
	}
}

// clusterNodes is the cluster's nodes, from $SRCSI_NODES_FILE (hack/cluster.sh up).
func clusterNodes(t *testing.T, s *framework.PodSuite) []framework.ClusterNode {
	nodes := framework.ClusterNodes(t)
	if len(nodes) < 2 || len(s.Nodes) != len(nodes) {
		t.Fatalf("the soak needs several nodes; the cluster has %d (run it with `make soak`)", len(nodes))
	}
	return nodes
}

// ---------------------------------------------------------------------------------------------
// The history: every change of access or of a source, with its time.

func (r *soakRun) recordAccess(ns, share string) {
	key := AccessKey(ns, share)
	a := r.granted[key] && r.exists[share]
	if a != r.allowed[key] || len(r.hist.Access[key]) == 0 {
		r.allowed[key] = a
		r.hist.Access[key] = append(r.hist.Access[key], AccessChange{At: time.Now(), Allowed: a})
	}
}

func (r *soakRun) setup() {
	t, s := r.t, r.s
	r.srcNS = s.SourceNamespace(t, "soak-src")
	suffix := framework.RandSuffix()
	for i := 0; i < soakShares; i++ {
		name := fmt.Sprintf("soak-%s-%d", suffix, i)
		r.shares = append(r.shares, name)
		r.items[name] = i%2 == 1
		s.CreateSecret(t, r.srcNS, name, VersionData(name, 1))
		r.version[name] = 1
		r.hist.Versions[name] = []SourceVersion{{N: 1, At: time.Now()}}
		if err := r.createShare(name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.DeleteShare(t, framework.KindSecret, name) })
	}
	for i := 0; i < soakNamespaces; i++ {
		ns := s.PodNamespace(t, fmt.Sprintf("soak-%c", 'a'+i))
		s.CreateServiceAccount(t, ns, "app")
		r.nss = append(r.nss, ns)
		for _, sh := range r.shares {
			r.createRole(ns, sh)
			if err := r.grant(ns, sh); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ns := range r.nss {
		for _, sh := range r.shares {
			s.WaitAccess(t, ns, framework.KindSecret, sh, framework.ServiceAccount(ns, "app"), true)
		}
	}
	for _, ns := range r.nss {
		for d := 0; d < soakDeploys; d++ {
			dep := r.consumerDeployment(ns, fmt.Sprintf("reader-%d", d))
			if _, err := s.Kube.AppsV1().Deployments(ns).Create(r.ctx, dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			r.deploys = append(r.deploys, dep)
		}
	}
}

func (r *soakRun) createShare(name string) error {
	u := framework.ShareObject(framework.KindSecret, name, r.srcNS, name)
	if r.items[name] {
		u = framework.ListedShareObject(framework.KindSecret, name, r.srcNS, name, framework.SharedKeys("k1", "k2"))
	}
	_, err := r.s.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Create(r.ctx, u, metav1.CreateOptions{})
	if err == nil {
		r.mu.Lock()
		r.exists[name] = true
		for _, ns := range r.nss {
			r.recordAccess(ns, name)
		}
		r.mu.Unlock()
	}
	return err
}

func (r *soakRun) deleteShare(name string) error {
	err := r.s.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Delete(r.ctx, name, metav1.DeleteOptions{})
	if err == nil {
		r.mu.Lock()
		r.exists[name] = false
		for _, ns := range r.nss {
			r.recordAccess(ns, name)
		}
		r.mu.Unlock()
	}
	return err
}

func grantName(share string) string { return "use-" + share }

func (r *soakRun) createRole(ns, share string) {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: grantName(share), Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{framework.ShareGroup}, Resources: []string{framework.KindSecret.ShareResource()},
			ResourceNames: []string{share}, Verbs: []string{"use"}}},
	}
	if _, err := r.s.Kube.RbacV1().Roles(ns).Create(r.ctx, role, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

// grant and revoke write the RoleBinding; the change is recorded when the write returned (the
// authorizer applies it a moment later: within the bounds).
func (r *soakRun) grant(ns, share string) error {
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: grantName(share), Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: grantName(share)},
		Subjects:   []rbacv1.Subject{framework.ServiceAccount(ns, "app")},
	}
	_, err := r.s.Kube.RbacV1().RoleBindings(ns).Create(r.ctx, rb, metav1.CreateOptions{})
	if err == nil {
		r.mu.Lock()
		r.granted[AccessKey(ns, share)] = true
		r.recordAccess(ns, share)
		r.mu.Unlock()
	}
	return err
}

func (r *soakRun) revoke(ns, share string) error {
	// Recorded before the write: from the moment it may take effect.
	r.mu.Lock()
	r.granted[AccessKey(ns, share)] = false
	r.recordAccess(ns, share)
	r.mu.Unlock()
	err := r.s.Kube.RbacV1().RoleBindings(ns).Delete(r.ctx, grantName(share), metav1.DeleteOptions{})
	if err != nil {
		r.mu.Lock()
		r.granted[AccessKey(ns, share)] = true
		r.recordAccess(ns, share)
		r.mu.Unlock()
	}
	return err
}

// consumerDeployment: one or two shares, each with refreshResource "false" one time in four,
// mounted at /v/a and /v/b; the reader's log in the run's readers dir on the host.
func (r *soakRun) consumerDeployment(ns, name string) *appsv1.Deployment {
	nv := 1 + r.rng.IntN(2)
	perm := r.rng.Perm(len(r.shares))
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	var spec, names []string
	ro := true
	for i := 0; i < nv; i++ {
		v := string(rune('a' + i))
		sh := r.shares[perm[i]]
		attrs := map[string]string{framework.AttrSharedSecret: sh}
		refresh := "true"
		if r.rng.IntN(4) == 0 {
			refresh = "false"
			attrs[framework.AttrRefreshResource] = "false"
		}
		vols = append(vols, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: framework.DriverName, ReadOnly: &ro, VolumeAttributes: attrs}}})
		mounts = append(mounts, corev1.VolumeMount{Name: v, MountPath: "/v/" + v, ReadOnly: true})
		spec = append(spec, v+"="+sh+":"+refresh)
		names = append(names, v)
	}
	hostDir := corev1.HostPathDirectoryOrCreate
	vols = append(vols, corev1.Volume{Name: "soaklog", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: filepath.Join(r.out, "readers"), Type: &hostDir}}})
	mounts = append(mounts, corev1.VolumeMount{Name: "soaklog", MountPath: "/soaklog"})
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	labels := map[string]string{"app": "soak-" + name}
	grace, no := int64(1), false
	cpu := os.Getenv("SOAK_READER_CPU")
	if cpu == "" {
		cpu = "100m"
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1 + r.rng.IntN(2))),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "app", TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken: &no, EnableServiceLinks: &no,
					Containers: []corev1.Container{{
						Name: "reader", Image: r.s.Busybox, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", readerScript},
						Env: []corev1.EnvVar{field("NS", "metadata.namespace"), field("POD", "metadata.name"), field("PODUID", "metadata.uid"),
							field("NODE", "spec.nodeName"), {Name: "VOLS", Value: strings.Join(names, " ")}, {Name: "SPEC", Value: strings.Join(spec, " ")}},
						VolumeMounts: mounts,
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
						},
					}},
					Volumes: vols,
				},
			},
		},
	}
}

// waitWarm waits until every Deployment's pods run, then samples the drivers: the warm-up values.
func (r *soakRun) waitWarm() map[string]Sample {
	framework.Eventually(r.t, 3*time.Minute, func() error {
		for _, d := range r.deploys {
			got, err := r.s.Kube.AppsV1().Deployments(d.Namespace).Get(r.ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.Status.ReadyReplicas != *d.Spec.Replicas {
				return fmt.Errorf("%s/%s: %d of %d Ready", d.Namespace, d.Name, got.Status.ReadyReplicas, *d.Spec.Replicas)
			}
		}
		return nil
	})
	time.Sleep(2 * framework.PodsRelist)
	return r.sampleAll("warm")
}

func (r *soakRun) runningConsumers() int {
	n := 0
	for _, ns := range r.nss {
		list, err := r.s.Kube.CoreV1().Pods(ns).List(r.ctx, metav1.ListOptions{})
		if err == nil {
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					n++
				}
			}
		}
	}
	return n
}

// ---------------------------------------------------------------------------------------------
// The workload.

// updateSources writes the next version of a random source every second or two.
func (r *soakRun) updateSources(stop chan struct{}) {
	for {
		r.mu.Lock()
		wait := time.Duration(1000+r.rng.IntN(1000)) * time.Millisecond
		sh := r.shares[r.rng.IntN(len(r.shares))]
		n := r.version[sh] + 1
		r.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		err := retry(30*time.Second, func() error {
			sec, err := r.s.Kube.CoreV1().Secrets(r.srcNS).Get(r.ctx, sh, metav1.GetOptions{})
			if err != nil {
				return err
			}
			sec.Data = VersionData(sh, n)
			_, err = r.s.Kube.CoreV1().Secrets(r.srcNS).Update(r.ctx, sec, metav1.UpdateOptions{})
			return err
		})
		// Recorded when the write returned; written or not, the checker knows only what the
		// API server acknowledged (a version the reader shows unrecorded is a torn read).
		r.mu.Lock()
		if err == nil {
			r.version[sh] = n
			r.hist.Versions[sh] = append(r.hist.Versions[sh], SourceVersion{N: n, At: time.Now()})
			r.actions["source updated"]++
		} else {
			// An update whose answer was lost may still have been written: the version is known
			// to the checker with the time of this attempt's end.
			r.version[sh] = n
			r.hist.Versions[sh] = append(r.hist.Versions[sh], SourceVersion{N: n, At: time.Now()})
			r.actions["source update failed"]++
		}
		r.mu.Unlock()
	}
}

// churn does one of: scale a Deployment, delete a pod, revoke or give back a grant, delete or
// re-create a share; every 2 to 5 s.
func (r *soakRun) churn(stop chan struct{}) {
	for {
		r.mu.Lock()
		wait := time.Duration(2000+r.rng.IntN(3000)) * time.Millisecond
		pick := r.rng.IntN(100)
		d := r.deploys[r.rng.IntN(len(r.deploys))]
		ns := r.nss[r.rng.IntN(len(r.nss))]
		sh := r.shares[r.rng.IntN(len(r.shares))]
		replicas := int32(r.rng.IntN(3))
		podPick := r.rng.IntN(1000)
		granted, exists := r.granted[AccessKey(ns, sh)], r.exists[sh]
		r.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		var what string
		var err error
		switch {
		case pick < 30:
			what = "deployment scaled"
			err = retry(20*time.Second, func() error {
				sc, err := r.s.Kube.AppsV1().Deployments(d.Namespace).GetScale(r.ctx, d.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				sc.Spec.Replicas = replicas
				_, err = r.s.Kube.AppsV1().Deployments(d.Namespace).UpdateScale(r.ctx, d.Name, sc, metav1.UpdateOptions{})
				return err
			})
		case pick < 55:
			what = "pod deleted"
			list, lerr := r.s.Kube.CoreV1().Pods(ns).List(r.ctx, metav1.ListOptions{})
			err = lerr
			if lerr == nil && len(list.Items) > 0 {
				p := list.Items[podPick%len(list.Items)]
				err = r.s.Kube.CoreV1().Pods(ns).Delete(r.ctx, p.Name, metav1.DeleteOptions{})
			}
		case pick < 80:
			if granted {
				what, err = "grant removed", r.revoke(ns, sh)
			} else {
				what, err = "grant given", retry(20*time.Second, func() error { return r.grant(ns, sh) })
			}
		default:
			if exists {
				what, err = "share deleted", r.deleteShare(sh)
			} else {
				what, err = "share re-created", retry(20*time.Second, func() error { return r.createShare(sh) })
			}
		}
		r.mu.Lock()
		if err != nil {
			r.actions[what+" (failed)"]++
		} else {
			r.actions[what]++
		}
		r.mu.Unlock()
	}
}

// ---------------------------------------------------------------------------------------------
// Faults.

var faultKinds = []string{"driver-sigkill", "kubelet-containerd-restart", "apiserver-etcd-restart", "node-lost", "node-drained", "status-controller-sigkill"}

// injectFaults injects faults until the duration has passed and every kind was injected at least
// once (a short soak is one round): every kind once, in an order drawn from the seed, then again,
// with a pause of 3 to 10 s between two.
func (r *soakRun) injectFaults(duration time.Duration) {
	deadline := time.Now().Add(duration)
	var order []string
	rounds := 0
	for rounds == 0 || time.Now().Before(deadline) {
		if len(order) == 0 {
			if rounds > 0 && !time.Now().Before(deadline) {
				break
			}
			order = append([]string{}, faultKinds...)
			r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		node := r.nodes[r.rng.IntN(len(r.nodes))]
		pause := time.Duration(3+r.rng.IntN(8)) * time.Second
		time.Sleep(pause)
		if len(order) == 0 {
			rounds++ // this is the round's last fault
		}
		f := Fault{Kind: kind, Node: node.Name, Start: time.Now()}
		var err error
		switch kind {
		case "driver-sigkill":
			err = r.killDriver(node)
		case "kubelet-containerd-restart":
			err = r.nodeKill(node, 0)
		case "node-lost":
			err = r.nodeKill(node, soakNodeGrace+10*time.Second)
		case "apiserver-etcd-restart":
			f.Node = ""
			err = run("hack/cluster.sh", "restart-control-plane")
		case "node-drained":
			err = r.drain(node)
		case "status-controller-sigkill":
			f.Node = "status" // serves no volume: excuses nothing on any node
			err = r.killStatusControllers()
		}
		if err != nil {
			r.problem("fault %s on %s: %v", kind, node.Name, err)
		}
		if err := r.waitRecovered(3 * time.Minute); err != nil {
			r.problem("after %s on %s: not recovered: %v", kind, node.Name, err)
		}
		f.Recovered = time.Now()
		r.mu.Lock()
		r.hist.Faults = append(r.hist.Faults, f)
		r.mu.Unlock()
		r.logf("fault %s on %s: recovered after %v", kind, f.Node, f.Recovered.Sub(f.Start).Round(100*time.Millisecond))
	}
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// driverPIDs finds the processes of the pods with these UIDs: the driver binary, by its cgroup.
func driverPIDs(uids ...string) []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + d.Name() + "/comm")
		if !strings.HasPrefix(string(comm), "shared-resourc") {
			continue
		}
		cg, _ := os.ReadFile("/proc/" + d.Name() + "/cgroup")
		for _, uid := range uids {
			// cgroup v1's kubepods/…/podUID, or the systemd driver's …-podUID.slice with underscores.
			if strings.Contains(string(cg), "pod"+uid) || strings.Contains(string(cg), "pod"+strings.ReplaceAll(uid, "-", "_")) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func (r *soakRun) killDriver(n framework.ClusterNode) error {
	var pod *corev1.Pod
	if err := retry(30*time.Second, func() (err error) { pod, err = r.s.DriverPodOn(r.ctx, n.Name); return err }); err != nil {
		return err
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("driver pod %s has no container status", pod.Name)
	}
	pids := driverPIDs(string(pod.UID))
	if len(pids) == 0 {
		return fmt.Errorf("no driver process of pod %s found", pod.Name)
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL) // gone already: nothing to kill
	}
	// The kubelet must notice before "Ready" means the new process.
	return retry(60*time.Second, func() error {
		p, err := r.s.Kube.CoreV1().Pods(framework.PodsDriverNS).Get(r.ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > pod.Status.ContainerStatuses[0].RestartCount {
			return nil
		}
		return fmt.Errorf("driver pod %s not restarted yet", pod.Name)
	})
}

func (r *soakRun) killStatusControllers() error {
	list, err := r.s.Kube.CoreV1().Pods(framework.PodsDriverNS).List(r.ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=status-controller"})
	if err != nil {
		return err
	}
	var uids []string
	for _, p := range list.Items {
		uids = append(uids, string(p.UID))
	}
	pids := driverPIDs(uids...)
	if len(pids) == 0 {
		return fmt.Errorf("no status controller process found (%d pods)", len(uids))
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL) // gone already: nothing to kill
	}
	time.Sleep(3 * time.Second)
	return nil
}

// nodeKill: the node's kubelet, containerd and driver SIGKILLed, back after away.
func (r *soakRun) nodeKill(n framework.ClusterNode, away time.Duration) error {
	if err := run("hack/cluster.sh", "node-kill", n.Name); err != nil {
		return err
	}
	time.Sleep(away)
	return run("hack/cluster.sh", "node-start", n.Name)
}

func (r *soakRun) drain(n framework.ClusterNode) error {
	kc := []string{"--kubeconfig", r.s.Kubeconfig}
	err := run(r.s.Kubectl, append(kc, "drain", n.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--grace-period=1", "--timeout=120s")...)
	time.Sleep(5 * time.Second)
	if uerr := retry(30*time.Second, func() error { return run(r.s.Kubectl, append(kc, "uncordon", n.Name)...) }); uerr != nil && err == nil {
		err = uerr
	}
	return err
}

// waitRecovered: the API server answers, every node is Ready, every driver Ready and registered,
// the status controller's replicas Ready.
func (r *soakRun) waitRecovered(timeout time.Duration) error {
	return retry(timeout, func() error {
		for _, n := range r.nodes {
			node, err := r.s.Kube.CoreV1().Nodes().Get(r.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, c := range node.Status.Conditions {
				ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
			if !ready {
				return fmt.Errorf("node %s not Ready", n.Name)
			}
		}
		_, err := r.s.WaitDriver(r.ctx, "", time.Second)
		return err
	})
}

// ---------------------------------------------------------------------------------------------
// Metrics, the end, the report.

func (r *soakRun) sample(n framework.ClusterNode) (Sample, error) {
	m, err := framework.ScrapeMetrics("http://" + n.IP + ":" + framework.DriverMetricsPort + "/metrics")
	if err != nil {
		return Sample{}, err
	}
	return Sample{At: time.Now(), RSS: m.Sum("process_resident_memory_bytes", nil), Goroutines: m.Sum("go_goroutines", nil),
		FD: m.Sum("process_open_fds", nil)}, nil
}

func (r *soakRun) sampleAll(label string) map[string]Sample {
	out := map[string]Sample{}
	for _, n := range r.nodes {
		var sm Sample
		err := retry(30*time.Second, func() (err error) { sm, err = r.sample(n); return err })
		if err != nil {
			r.problem("metrics of %s (%s): %v", n.Name, label, err)
			continue
		}
		out[n.Name] = sm
		r.mu.Lock()
		r.series = append(r.series, fmt.Sprintf("%s\t%s\t%s\t%.1f\t%.0f\t%.0f", sm.At.UTC().Format(time.RFC3339), label, n.Name, sm.RSS/(1<<20), sm.Goroutines, sm.FD))
		r.mu.Unlock()
	}
	return out
}

func (r *soakRun) sampleMetrics(stop chan struct{}, every time.Duration) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(every):
		}
		for _, n := range r.nodes {
			if sm, err := r.sample(n); err == nil {
				r.mu.Lock()
				r.series = append(r.series, fmt.Sprintf("%s\t%s\t%s\t%.1f\t%.0f\t%.0f", sm.At.UTC().Format(time.RFC3339), "run", n.Name, sm.RSS/(1<<20), sm.Goroutines, sm.FD))
				r.mu.Unlock()
			}
		}
	}
}

func (r *soakRun) teardownConsumers() {
	for _, d := range r.deploys {
		if err := retry(30*time.Second, func() error {
			return r.s.Kube.AppsV1().Deployments(d.Namespace).Delete(r.ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		}); err != nil {
			r.problem("deleting %s/%s: %v", d.Namespace, d.Name, err)
		}
	}
	err := retry(2*time.Minute, func() error {
		for _, ns := range r.nss {
			list, err := r.s.Kube.CoreV1().Pods(ns).List(r.ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(list.Items) > 0 {
				return fmt.Errorf("%d pods left in %s", len(list.Items), ns)
			}
		}
		return nil
	})
	if err != nil {
		r.problem("consumers not gone: %v", err)
	}
}

// checkNodesClean: no volume dir (with its record) and no mount of a pod that no longer exists,
// on any node, within a relist after the last pod went.
func (r *soakRun) checkNodesClean() {
	var last []string
	err := retry(soakBounds.Revoke+30*time.Second, func() error {
		live := map[string]bool{}
		list, err := r.s.Kube.CoreV1().Pods("").List(r.ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			live[string(p.UID)] = true
		}
		last = nil
		for _, n := range r.nodes {
			st, err := n.State()
			if err != nil {
				return err
			}
			for id := range st.Volumes {
				last = append(last, n.Name+": volume dir "+id)
			}
			for _, m := range st.Mounts {
				if rest, ok := strings.CutPrefix(m, "/var/lib/kubelet/pods/"); ok {
					if uid, _, _ := strings.Cut(rest, "/"); live[uid] {
						continue
					}
				}
				last = append(last, n.Name+": mount "+m)
			}
		}
		if len(last) > 0 {
			return fmt.Errorf("%d left", len(last))
		}
		return nil
	})
	if err != nil {
		for _, l := range last {
			node, what, _ := strings.Cut(l, ": ")
			r.leftovers = append(r.leftovers, Violation{Kind: Leftover, Pod: node, At: time.Now(), Detail: what})
		}
	}
}

func (r *soakRun) saveDriverLogs() {
	dir := filepath.Join(r.out, "drivers")
	_ = os.MkdirAll(dir, 0o755) // best effort: the logs help a post-mortem, the run does not need them
	list, err := r.s.Kube.CoreV1().Pods(framework.PodsDriverNS).List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range list.Items {
		for _, prev := range []bool{false, true} {
			b, err := r.s.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Previous: prev}).DoRaw(r.ctx)
			if err == nil {
				name := p.Spec.NodeName + "." + p.Name
				if prev {
					name += ".previous"
				}
				_ = os.WriteFile(filepath.Join(dir, name+".log"), b, 0o644)
			}
		}
	}
}

func (r *soakRun) readLogs() []*PodLog {
	files, _ := filepath.Glob(filepath.Join(r.out, "readers", "*.log"))
	var logs []*PodLog
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			r.problem("reader log %s: %v", f, err)
			continue
		}
		p, err := ParseLog(fh)
		fh.Close()
		if err != nil {
			r.problem("reader log %s: %v", filepath.Base(f), err)
			continue
		}
		p.File = filepath.Base(f)
		logs = append(logs, p)
	}
	return logs
}

func (r *soakRun) report(rep *Report, seed uint64, duration time.Duration, warm, end map[string]Sample) {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: seed %d, duration %v (workload %v), %d nodes\n", seed, duration, r.hist.End.Sub(r.hist.Start).Round(time.Second), len(r.nodes))
	fmt.Fprintf(&b, "bounds: refresh %v, revocation %v, after a fault's recovery %v more\n", soakBounds.Refresh, soakBounds.Revoke, soakBounds.Recovery)
	fmt.Fprintf(&b, "reads checked: %d (k1,k2,k1 each) by %d pods over %d volumes; %d distinct views\n", rep.Reads, rep.Pods, rep.Volumes, rep.Segments)
	byKind := map[string][]time.Duration{}
	for _, f := range r.hist.Faults {
		byKind[f.Kind] = append(byKind[f.Kind], f.Recovered.Sub(f.Start))
	}
	fmt.Fprintf(&b, "faults (count, recovery min/median/max):\n")
	for _, k := range faultKinds {
		ds := byKind[k]
		if len(ds) == 0 {
			fmt.Fprintf(&b, "  %-28s 0\n", k)
			continue
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Fprintf(&b, "  %-28s %d  %v / %v / %v\n", k, len(ds), ds[0].Round(100*time.Millisecond), ds[len(ds)/2].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond))
	}
	var acts []string
	for k, n := range r.actions {
		acts = append(acts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(acts)
	fmt.Fprintf(&b, "workload: %s\n", strings.Join(acts, ", "))
	fmt.Fprintf(&b, "violations:")
	for _, k := range Kinds {
		fmt.Fprintf(&b, " %s %d,", k, rep.ByKind()[k])
	}
	fmt.Fprintf(&b, "\n")
	for _, n := range r.nodes {
		w, e := warm[n.Name], end[n.Name]
		fmt.Fprintf(&b, "driver on %s: RSS %.1f -> %.1f MiB, goroutines %.0f -> %.0f, open fds %.0f -> %.0f (after warm-up -> at the end)\n",
			n.Name, w.RSS/(1<<20), e.RSS/(1<<20), w.Goroutines, e.Goroutines, w.FD, e.FD)
	}
	for _, v := range rep.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	for _, p := range r.problems {
		fmt.Fprintf(&b, "harness problem: %s\n", p)
	}
	fmt.Print(b.String())
	_ = os.WriteFile(filepath.Join(r.out, "report.txt"), []byte(b.String()), 0o644) // also printed below
	keepFile(filepath.Join(r.out, "metrics.tsv"), []byte("time\tphase\tnode\trss_mib\tgoroutines\topen_fds\n"+strings.Join(r.series, "\n")+"\n"))
	hb, _ := json.MarshalIndent(r.hist, "", " ")
	keepFile(filepath.Join(r.out, "history.json"), hb)
}

// keepFile writes one of the files a failed run is understood by; a failure to keep it is said,
// not fatal: the report is printed as well.
func keepFile(path string, b []byte) {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "soak: could not keep %s: %v\n", path, err)
	}
}
