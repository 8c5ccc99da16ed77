package pods

// The real-pod suite: the driver installed as users install it, with the Helm chart (deploy.yaml
// is that chart rendered), only the image and a short relist interval set, a real kubelet
// calling it, real pods reading their volumes. Each test is one user story (docs/local-cluster.md
// lists them). They run in the local cluster's network namespace (hack/test.sh, or
// `hack/cluster.sh exec -- go -C test test -run TestPods ./e2e/pods`), on the node itself as
// root, so they can also look at what the volumes leave on the node.
//
// All run after the package's other tests; TestPodsDriverRecreated and TestPodsHundredOnOneShare
// run alone (they restart the driver and count its API requests), the others in parallel.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ---------------------------------------------------------------------------------------------
// 1. A CA bundle shared from a platform namespace to pods in two other namespaces.

func TestPodsReadCABundleSharedFromPlatformNamespace(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	marker := "s3cr3t-" + framework.RandSuffix()
	data := map[string][]byte{
		"ca.crt": []byte("-----BEGIN CERTIFICATE-----\n" + marker + "\n-----END CERTIFICATE-----\n"),
		// Binary, with NULs and no trailing newline: the pods must read exactly these bytes.
		"ca.der": framework.PodsRandomBytes(4096),
	}
	f := s.NewShare(t, data)
	teamA, teamB := s.PodNamespace(t, "team-a"), s.PodNamespace(t, "team-b")
	// team-a grants its whole namespace (the group of its service accounts), team-b one account.
	s.Grant(t, teamA, framework.KindSecret, f.Share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + teamA})
	s.CreateServiceAccount(t, teamB, "web")
	s.Grant(t, teamB, framework.KindSecret, f.Share, framework.ServiceAccount(teamB, "web"))

	s.CreatePod(t, teamA, "reader", framework.ConsumerSpec{Attrs: f.Attrs()})
	s.CreatePod(t, teamB, "reader", framework.ConsumerSpec{Sa: "web", Attrs: f.Attrs()})
	for _, ns := range []string{teamA, teamB} {
		s.WaitRunning(t, ns, "reader", 60*time.Second)
		got, err := s.PodFiles(ns, "reader")
		if err != nil {
			t.Fatal(err)
		}
		if d := framework.SameFiles(got, data); d != nil {
			t.Errorf("pod %s/reader does not read the CA bundle exactly: %s", ns, d)
		}
	}
	s.AssertNotLogged(t, []byte(marker))
}

// ---------------------------------------------------------------------------------------------
// 2. Without a `use` grant the pod stays ContainerCreating, and its FailedMount event says which
// RBAC rule is missing. Granting it lets the same pod start (denials are not cached).

func TestPodsWithoutUseGrantStayContainerCreating(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())})
	ns := s.PodNamespace(t, "no-grant")
	s.CreateServiceAccount(t, ns, "app")
	s.CreatePod(t, ns, "denied", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})

	ev := s.WaitEvent(t, ns, "denied", "FailedMount", 60*time.Second,
		"PermissionDenied",
		fmt.Sprintf("service account %s/app may not use SharedSecret %q", ns, f.Share),
		fmt.Sprintf("{apiGroups: [sharedresource.openshift.io], resources: [sharedsecrets], resourceNames: [%s], verbs: [use]}", f.Share),
		"bound to ServiceAccount app in namespace "+ns)
	t.Logf("FailedMount event: %s", ev.Message)

	// Still not started a few kubelet retries later.
	time.Sleep(3 * time.Second)
	p, err := s.Kube.CoreV1().Pods(ns).Get(context.Background(), "denied", metav1.GetOptions{})
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
	if n := framework.EvCount(ev); n < 2 {
		// Not an error: the kubelet's backoff decides; logged to show the retries.
		t.Logf("FailedMount seen %d time(s) so far", n)
	}

	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "app"))
	start := time.Now()
	s.WaitRunning(t, ns, "denied", 90*time.Second)
	t.Logf("granted: pod Running %v later (the kubelet's mount retry backoff)", time.Since(start).Round(100*time.Millisecond))
}

// ---------------------------------------------------------------------------------------------
// 3. Access revoked while the pod runs: within one relist interval the files are gone, the pod
// keeps running and gets a Warning event; granted again, the files come back.

func TestPodsRevokedWhileRunningThenRegranted(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix()), "tls.key": framework.PodsRandomBytes(512)}
	f := s.NewShare(t, data)
	ns := s.PodNamespace(t, "revoke")
	s.CreateServiceAccount(t, ns, "app")
	revoke := s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "app"))
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "app", 60*time.Second)
	s.WaitFiles(t, ns, "app", data, 10*time.Second)

	revoke()
	took := s.WaitFiles(t, ns, "app", map[string][]byte{}, framework.PodsRelist+framework.PodsRelistSlack)
	t.Logf("revoked: files gone from the running pod after %v (relist interval %v)", took.Round(100*time.Millisecond), framework.PodsRelist)
	if _, stderr, err := s.Exec(ns, "app", "cat", framework.PodMount+"/ca.crt"); err == nil || !strings.Contains(string(stderr), "No such file") {
		t.Errorf("cat of a revoked file: err %v, stderr %q; want No such file", err, stderr)
	}
	s.WaitEvent(t, ns, "app", framework.ReasonRevoked, 10*time.Second, "may not use SharedSecret "+framework.Quote(f.Share))
	s.AssertStillRunning(t, ns, "app")

	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "app"))
	took = s.WaitFiles(t, ns, "app", data, framework.PodsRelist+framework.PodsRelistSlack)
	t.Logf("re-granted: files back after %v", took.Round(100*time.Millisecond))
	s.WaitEvent(t, ns, "app", framework.ReasonRestored, 10*time.Second)
	s.AssertStillRunning(t, ns, "app")
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
	s := framework.PodsEnv(t, framework.PodsShared)
	tag := framework.RandSuffix()
	version := func(i int) string { return fmt.Sprintf("%d-%s", i, tag) }
	f := s.NewShare(t, versioned(version(1)))
	ns := s.PodNamespace(t, "refresh")
	s.Grant(t, ns, framework.KindSecret, f.Share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	s.CreatePod(t, ns, "follower", framework.ConsumerSpec{Attrs: f.Attrs(), Script: readerScript})
	s.CreatePod(t, ns, "pinned", framework.ConsumerSpec{Attrs: map[string]string{"sharedSecret": f.Share, "refreshResource": "false"}})
	s.WaitRunning(t, ns, "follower", 60*time.Second)
	s.WaitRunning(t, ns, "pinned", 60*time.Second)
	s.WaitFiles(t, ns, "pinned", versioned(version(1)), 10*time.Second)

	seen := func(v string) error {
		log, err := s.PodLog(context.Background(), ns, "follower")
		if err != nil {
			return err
		}
		if !strings.Contains(log, "SEEN version="+v+" ") {
			return fmt.Errorf("the reader has not seen version %s yet; its log:\n%s", v, log)
		}
		return nil
	}
	framework.Eventually(t, 10*time.Second, func() error { return seen(version(1)) })

	// Three updates, each seen by the reader before the next.
	const updates = 3
	for i := 2; i <= updates+1; i++ {
		start := time.Now()
		s.UpdateSecret(t, f.Platform, f.Secret, versioned(version(i)))
		s.WaitFiles(t, ns, "follower", versioned(version(i)), framework.PodsRelist+framework.PodsRelistSlack)
		framework.Eventually(t, 5*time.Second, func() error { return seen(version(i)) })
		t.Logf("update to version %d seen by the running pod after %v", i, time.Since(start).Round(100*time.Millisecond))
	}
	s.WaitEvent(t, ns, "follower", framework.ReasonRefreshed, 10*time.Second)

	log, err := s.PodLog(context.Background(), ns, "follower")
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
	time.Sleep(framework.PodsRelist)
	got, err := s.PodFiles(ns, "pinned")
	if err != nil {
		t.Fatal(err)
	}
	if d := framework.SameFiles(got, versioned(version(1))); d != nil {
		t.Errorf("the refreshResource=false pod no longer shows the data it started with: %s", d)
	}
	if evs, err := s.PodEvents(ns, "pinned", framework.ReasonRefreshed); err != nil || len(evs) != 0 {
		t.Errorf("the refreshResource=false pod got %d %s events (err %v), want none", len(evs), framework.ReasonRefreshed, err)
	}
	s.AssertStillRunning(t, ns, "follower")
}

// ---------------------------------------------------------------------------------------------
// 5. A pod that asks for a writable volume is refused, as OpenShift's driver refuses it: the
// container runtime makes its own bind of the volume for the container, and runc 1.2 and later
// make that bind writable when the kubelet does not ask for read-only, whatever the driver's bind
// is (on runc 1.5.2 the pod's writes reached the share's files). A pod that asks for it
// read-only cannot write by any path: EROFS.
func TestPodsWritableVolumeIsRefusedAndAReadOnlyOneCannotBeWritten(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	f := s.NewShare(t, data)
	ns := s.PodNamespace(t, "writer")
	s.Grant(t, ns, framework.KindSecret, f.Share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})

	s.CreatePod(t, ns, "writer", framework.ConsumerSpec{Attrs: f.Attrs(), Writable: true})
	ev := s.WaitEvent(t, ns, "writer", "FailedMount", 60*time.Second, "InvalidArgument", "set `readOnly: true`")
	t.Logf("writable: %s", ev.Message)

	s.CreatePod(t, ns, "reader", framework.ConsumerSpec{Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "reader", 60*time.Second)
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
		_, stderr, err := s.Exec(ns, "reader", "sh", "-c", script)
		if err == nil {
			t.Errorf("%q succeeded in a shared volume", script)
		} else if !strings.Contains(string(stderr), "Read-only file system") {
			t.Errorf("%q failed with %q, want EROFS (Read-only file system)", script, stderr)
		}
	}
	out, _, err := s.Exec(ns, "reader", "grep", " "+framework.PodMount+" ", "/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if mnt := strings.Fields(string(out)); len(mnt) < 4 || !framework.HasOption(mnt[3], "ro") {
		t.Errorf("the pod's mount %q is not read-only", strings.TrimSpace(string(out)))
	}
	t.Logf("the pod's mount: %s", strings.TrimSpace(string(out)))
	s.WaitFiles(t, ns, "reader", data, 5*time.Second)
	if p, err := s.Kube.CoreV1().Pods(ns).Get(context.Background(), "writer", metav1.GetOptions{}); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("the writable pod: %v, phase %v; want it never Running", err, p.Status.Phase)
	}
}

// ---------------------------------------------------------------------------------------------
// 6. The driver pod is deleted and the DaemonSet recreates it while consumer pods run: their
// data stays readable throughout, and revocation and refresh still reach them afterwards.

func TestPodsDriverRecreated(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	f := s.NewShare(t, data)
	ns := s.PodNamespace(t, "restart")
	s.CreateServiceAccount(t, ns, "app")
	revoke := s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "app"))
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "app", 60*time.Second)
	s.WaitFiles(t, ns, "app", data, 10*time.Second)

	upgrade, err := s.PrepareUpgrade()
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
			return s.Kube.CoreV1().Pods(framework.PodsDriverNS).Delete(context.Background(), old.Name, metav1.DeleteOptions{})
		}},
		{"helm upgrade", func(*corev1.Pod) error {
			return upgrade()
		}},
	} {
		s.ReplaceDriverWhileReading(t, ns, "app", data, replacement.how, replacement.replace)
	}
	if s.Release != nil {
		// The upgraded driver runs the newer release, pulled from the registry.
		pod, err := s.DriverPod(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CheckPulledFromRelease(pod); err != nil {
			t.Error(err)
		}
	}

	// Refresh still works for the pod published by the old driver...
	updated := map[string][]byte{"ca.crt": []byte("ca-rotated-" + framework.RandSuffix())}
	s.UpdateSecret(t, f.Platform, f.Secret, updated)
	s.WaitFiles(t, ns, "app", updated, framework.PodsRelist+framework.PodsRelistSlack)
	// ...and so do revocation and re-grant.
	revoke()
	s.WaitFiles(t, ns, "app", map[string][]byte{}, framework.PodsRelist+framework.PodsRelistSlack)
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "app"))
	s.WaitFiles(t, ns, "app", updated, framework.PodsRelist+framework.PodsRelistSlack)
	// A new pod mounts through the new driver.
	s.CreatePod(t, ns, "app2", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "app2", 60*time.Second)
	s.WaitFiles(t, ns, "app2", updated, 10*time.Second)
	s.AssertStillRunning(t, ns, "app")
}

// ---------------------------------------------------------------------------------------------
// 7. Pod deleted: the kubelet calls NodeUnpublishVolume and nothing of the volume is left on
// the node: no mount, no directory, no record.

func TestPodsDeletedLeaveNothingOnTheNode(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())})
	ns := s.PodNamespace(t, "gone")
	s.Grant(t, ns, framework.KindSecret, f.Share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Attrs: f.Attrs()})
	pod := s.WaitRunning(t, ns, "app", 60*time.Second)

	v := s.NodeVolume(t, pod)
	// While the pod runs, all of it is there: the checks below can see it.
	if len(v.Mounts()) < 2 {
		t.Fatalf("expected the volume's tmpfs and the pod's bind mount, found %q", v.Mounts())
	}
	for _, p := range []string{v.VolumeDir, filepath.Join(v.VolumeDir, framework.RecordFile), v.PodDir} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("expected %s while the pod runs: %v", p, err)
		}
	}

	unpublishes := s.Scrape(t).Sum(framework.MetricCSIOperations, map[string]string{"method": "NodeUnpublishVolume", "code": "OK"})
	start := time.Now()
	if err := s.Kube.CoreV1().Pods(ns).Delete(context.Background(), "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, func() error {
		_, err := s.Kube.CoreV1().Pods(ns).Get(context.Background(), "app", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (err %v)", err)
		}
		if m := v.Mounts(); len(m) > 0 {
			return fmt.Errorf("mounts left: %q", m)
		}
		for _, p := range []string{v.VolumeDir, v.PodDir} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s left", p)
			}
		}
		return nil
	})
	t.Logf("pod deleted; nothing left on the node %v later", time.Since(start).Round(100*time.Millisecond))
	// It was the kubelet's NodeUnpublishVolume that removed it, not the relist's cleanup of
	// volumes whose pod vanished.
	if log := s.DriverLog(t); !strings.Contains(log, `"Unpublished volume" volumeID="`+v.ID+`"`) {
		t.Errorf("the driver log has no NodeUnpublishVolume of %s", v.ID)
	}
	if n := s.Scrape(t).Sum(framework.MetricCSIOperations, map[string]string{"method": "NodeUnpublishVolume", "code": "OK"}); n <= unpublishes {
		t.Errorf("the driver counted no successful NodeUnpublishVolume (%v before, %v after)", unpublishes, n)
	}
}

// ---------------------------------------------------------------------------------------------
// 8. 100 pods on one share on the node at once: all Running, and the driver's API requests do
// not grow with the number of pods. Counted from the API server's audit log (every request the
// driver's service account made), and cross-checked with the driver's own /metrics.

func TestPodsHundredOnOneShare(t *testing.T) {
	const pods = 100
	s := framework.PodsEnv(t, framework.PodsAlone)
	// Volumes of earlier tests' pods that are still going away would make the measured windows
	// unequal: wait until the driver holds only the volumes of running pods (none in CI; after
	// `make up`, the example's).
	framework.Eventually(t, 2*time.Minute, func() error {
		want, err := s.RunningVolumes()
		if err != nil {
			return err
		}
		if n := s.Scrape(t).Sum(framework.MetricVolumes, nil); int(n) != want {
			return fmt.Errorf("the driver has %v volumes, running pods mount %d", n, want)
		}
		return nil
	})
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	f := s.NewShare(t, data)
	ns := s.PodNamespace(t, "hundred")
	s.Grant(t, ns, framework.KindSecret, f.Share, rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns})
	name := func(i int) string { return fmt.Sprintf("app-%03d", i) }
	s.CreatePod(t, ns, name(0), framework.ConsumerSpec{Attrs: f.Attrs()})
	s.WaitRunning(t, ns, name(0), 60*time.Second)

	// Relist cost with one volume, over whole cycles.
	const cycles = 3
	one := s.MeasureCycles(t, cycles)

	// 99 more pods at once.
	burst := s.StartWindow(t)
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	sem := make(chan struct{}, 20)
	for i := 1; i < pods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := s.Kube.CoreV1().Pods(ns).Create(context.Background(), s.ConsumerPod(ns, name(i), framework.ConsumerSpec{Attrs: f.Attrs()}), metav1.CreateOptions{})
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
	created := time.Since(burst.Start)
	framework.Eventually(t, 5*time.Minute, func() error {
		list, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for i := range list.Items {
			if p := &list.Items[i]; p.Status.Phase == corev1.PodRunning && framework.PodReady(p) {
				running++
			}
		}
		if running != pods {
			return fmt.Errorf("%d of %d pods Running", running, pods)
		}
		return nil
	})
	b := burst.End(t)
	t.Logf("%d pods Running %v after the first create (creates took %v); the driver made %d API requests meanwhile "+
		"(%v; its /metrics counted %v) over %d relist cycles", pods, b.Duration.Round(100*time.Millisecond),
		created.Round(100*time.Millisecond), b.Requests, b.ByKind, b.Metered, b.Cycles)

	// Relist cost with 100 volumes.
	hundred := s.MeasureCycles(t, cycles)
	t.Logf("relist: %d requests over %d cycles with 1 volume (%v), %d with %d volumes (%v)",
		one.Requests, cycles, one.ByKind, hundred.Requests, pods, hundred.ByKind)
	if hundred.Requests > one.Requests {
		t.Errorf("relisting %d volumes of one share cost %d requests over %d cycles, more than the %d for one volume",
			pods, hundred.Requests, cycles, one.Requests)
	}
	// Publishing: everything beyond the burst's relist cycles. Within one cache TTL a share
	// costs one review and one source GET, however many pods mount it.
	perCycle := float64(one.Requests) / float64(one.Cycles)
	publish := max(0, float64(b.Requests)-perCycle*float64(b.Cycles))
	limit := 2 * (float64(b.Duration/framework.PodsCacheTTL) + 2)
	t.Logf("publishing %d pods cost about %.0f requests (at most %.0f allowed: 2 per %v cache TTL)", pods-1, publish, limit, framework.PodsCacheTTL)
	if publish > limit {
		t.Errorf("publishing %d pods cost about %.0f API requests, more than %.0f: requests grow with pods", pods-1, publish, limit)
	}

	// All volumes go away with their pods.
	var podUIDs []string
	list, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		podUIDs = append(podUIDs, string(p.UID))
	}
	start := time.Now()
	if err := s.Kube.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 5*time.Minute, func() error {
		list, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods left", len(list.Items))
		}
		others, err := s.RunningVolumes()
		if err != nil {
			return err
		}
		if n := s.Scrape(t).Sum(framework.MetricVolumes, nil); int(n) != others {
			return fmt.Errorf("the driver still has %v volumes, running pods mount %d", n, others)
		}
		return nil
	})
	t.Logf("%d pods deleted and all their volumes unpublished in %v", pods, time.Since(start).Round(100*time.Millisecond))
	if m := framework.MountsUnder(filepath.Join(s.Kubelet, "pods")); len(m) > 0 {
		for _, uid := range podUIDs {
			for _, mp := range m {
				if strings.Contains(mp, uid) {
					t.Errorf("mount left in a deleted pod's dir: %s", mp)
				}
			}
		}
	}
}
