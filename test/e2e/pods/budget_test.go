package pods

// Specification of the node's volume budget with real pods (internal/volume): the driver, given a
// small container (a 96Mi memory limit, an 8Mi source cache: a budget of 24Mi derived from
// them), is filled past its budget by pods with many 1 MiB volumes. The pods that fit run; the
// others wait with a FailedMount event naming the budget; the driver is never OOM-killed; a
// revocation on the full node still lands within the relist bound; and a driver restarted on
// the full node resumes every volume within the same memory. Where the kernel charges the
// volumes' pages (the driver container's cgroup, and after a restart its pod's) is logged.
// Volumes of many files and directories are charged for each and bounded: a pod whose items
// make 16,000 of them, or a share of 20,000 empty values, is refused; one within the bounds is
// charged what its entries hold, and the driver's container never restarts.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsVolumeBudgetKeepsTheDriverAlive(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	ctx := context.Background()
	s.UseSmallDriver(t)

	// A small share on the node first, to revoke once the node is full.
	small := s.NewShare(t, map[string][]byte{"ca.crt": []byte("small")})
	revNS := s.PodNamespace(t, "budget-rev")
	revoke := s.Grant(t, revNS, framework.KindSecret, small.Share, framework.ServiceAccount(revNS, "default"))
	s.CreatePod(t, revNS, "reader", framework.ConsumerSpec{Attrs: small.Attrs()})
	s.WaitRunning(t, revNS, "reader", 60*time.Second)

	// Pods of fifteen 1 MiB volumes each, 90 MiB in all: more than the budget, and more than the
	// container holds beside the driver itself (without the budget it was OOM-killed).
	big := s.NewShare(t, map[string][]byte{"blob": framework.PodsRandomBytes(1 << 20)})
	ns := s.PodNamespace(t, "budget")
	s.Grant(t, ns, framework.KindSecret, big.Share, framework.ServiceAccount(ns, "default"))
	const pods, perPod = 6, 15
	for i := range pods {
		p := s.ConsumerPod(ns, fmt.Sprintf("fill-%d", i), framework.ConsumerSpec{Attrs: big.Attrs()})
		for j := 1; j < perPod; j++ {
			// The kubelet mounts only the volumes a container mounts.
			v := p.Spec.Volumes[0].DeepCopy()
			v.Name = fmt.Sprintf("%s-%d", framework.PodVolName, j)
			p.Spec.Volumes = append(p.Spec.Volumes, *v)
			c := &p.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: fmt.Sprintf("%s-%d", framework.PodMount, j), ReadOnly: true})
		}
		if _, err := s.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The first pod alone, so that it gets all its volumes; the others then share what is
		// left (the kubelet mounts a pod's volumes in parallel, and a pod that cannot start
		// keeps the ones it got).
		if i == 0 {
			s.WaitRunning(t, ns, p.Name, 2*time.Minute)
		}
	}
	var running, refused []string
	framework.Eventually(t, 2*time.Minute, func() error {
		running, refused = nil, nil
		for i := range pods {
			name := fmt.Sprintf("fill-%d", i)
			p, err := s.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, name)
				continue
			}
			evs, err := s.PodEvents(ns, name, "FailedMount")
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if strings.Contains(ev.Message, "ResourceExhausted") && strings.Contains(ev.Message, "--volume-bytes-budget") {
					refused = append(refused, name)
					break
				}
			}
		}
		if len(running)+len(refused) < pods || len(running) < 1 {
			return fmt.Errorf("%d pods running %v, %d refused with the budget's message %v, of %d", len(running), running, len(refused), refused, pods)
		}
		return nil
	})
	m := s.Scrape(t)
	used, volumes := m.Sum("sharedresource_volume_bytes", nil), m.Sum("sharedresource_volumes", nil)
	t.Logf("budget %d MiB: %d pods of %d x 1 MiB volumes running %v, %d refused %v; %v volumes holding %.1f MiB",
		framework.BudgetBytes>>20, len(running), perPod, running, len(refused), refused, volumes, used/(1<<20))
	if used > framework.BudgetBytes {
		t.Errorf("volumes hold %v bytes, more than the budget %d", used, framework.BudgetBytes)
	}
	driver, err := s.DriverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.LogCharged(t, driver, "node full")
	assertNotOOMKilled(t, driver)

	// A revocation on the full node lands within the bound.
	revoke()
	took := s.WaitFiles(t, revNS, "reader", map[string][]byte{}, framework.PodsRelist*16/10+framework.PodsRelistSlack)
	t.Logf("revoked on the full node: files gone after %v", took.Round(100*time.Millisecond))

	// The driver restarted on the full node resumes every volume within the same memory. The
	// volumes counted are this test's, read from their records on the node: the node-wide gauge
	// may still include a pod of an earlier test whose namespace is being deleted, and whose
	// volume the kubelet unpublishes before the restart.
	ours, oursBytes := s.VolumesOfNamespaces(t, ns, revNS)
	if err := s.Kube.CoreV1().Pods(framework.PodsDriverNS).Delete(ctx, driver.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted, err := s.WaitDriver(ctx, driver.UID, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	logText, err := s.PodLog(ctx, framework.PodsDriverNS, restarted.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Every volume is resumed or, if a pending pod's publish was left half-done, cleaned; the
	// running pods' volumes are all resumed.
	mres := regexp.MustCompile(`"Recovered volumes" resumed=(\d+) cleaned=(\d+)`).FindStringSubmatch(logText)
	resumed, cleaned := 0, 0
	if mres != nil {
		resumed, _ = strconv.Atoi(mres[1])
		cleaned, _ = strconv.Atoi(mres[2])
	}
	if resumed+cleaned < ours || resumed < len(running)*perPod+1 {
		t.Errorf("the restarted driver resumed %d and cleaned %d volumes, want at least the %d this test's pods held (%v on the node), the running pods' %d among the resumed (log: %q)",
			resumed, cleaned, ours, volumes, len(running)*perPod+1, mres)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		// At least this test's volumes (their records' bytes, taken before the restart), and
		// within the budget. (Not the node-wide gauge from before: it may still have counted a
		// volume of an earlier test, unpublished since.)
		if got := s.Scrape(t).Sum("sharedresource_volume_bytes", nil); got > framework.BudgetBytes || got < float64(oursBytes) {
			return fmt.Errorf("after the restart volumes hold %v bytes, this test's %d before it (node-wide %v; budget %d)", got, oursBytes, used, framework.BudgetBytes)
		}
		return nil
	})
	s.LogCharged(t, restarted, "after the driver pod was replaced")
	time.Sleep(2 * framework.PodsRelist) // a relist or two over every volume
	if p, err := s.DriverPod(ctx); err != nil {
		t.Fatal(err)
	} else {
		assertNotOOMKilled(t, p)
	}
	for _, name := range running {
		s.AssertStillRunning(t, ns, name)
	}
}

// Volumes of many entries, with real pods on the small driver: a thousand items
// sixteen segments deep (16,000 files and directories, about 40 MiB of kernel memory, which
// were charged 4 MiB) and a share of 20,000 empty values (no data pages: it was charged a page,
// and unbounded) are refused with messages naming the bound, before anything is written. A
// share of 4,000 empty values, within the bounds, runs and is charged its entries (over 16 MiB
// of the 24 MiB budget), so a second such pod is refused by the budget. The driver's container
// never restarts.
func TestPodsVolumeBudgetChargesAndBoundsEntries(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	ctx := context.Background()
	s.UseSmallDriver(t)
	ns := s.PodNamespace(t, "entries")
	emptyValues := func(n int) map[string][]byte {
		data := map[string][]byte{}
		for i := range n {
			data[fmt.Sprintf("k%d", i)] = nil
		}
		return data
	}

	// A key with an empty value, a thousand times, each sixteen segments deep.
	deep := s.NewShare(t, map[string][]byte{"k": nil})
	s.Grant(t, ns, framework.KindSecret, deep.Share, framework.ServiceAccount(ns, "default"))
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf("k=d%d/a/b/c/d/e/f/g/h/i/j/k/l/m/n/f", i)
	}
	deepAttrs := deep.Attrs()
	deepAttrs[framework.AttrItems] = strings.Join(items, ",")
	s.CreatePod(t, ns, "deep", framework.ConsumerSpec{Attrs: deepAttrs})
	ev := s.WaitEvent(t, ns, "deep", "FailedMount", 2*time.Minute, "InvalidArgument", "16000 files and directories",
		fmt.Sprintf("a volume holds at most %d", framework.MaxVolumeEntries))
	t.Logf("deep items: %s", ev.Message)

	// Twenty thousand empty values.
	many := s.NewShare(t, emptyValues(20000))
	s.Grant(t, ns, framework.KindSecret, many.Share, framework.ServiceAccount(ns, "default"))
	s.CreatePod(t, ns, "empty", framework.ConsumerSpec{Attrs: many.Attrs()})
	ev = s.WaitEvent(t, ns, "empty", "FailedMount", 2*time.Minute, "ResourceExhausted", "20000 files and directories", framework.AttrItems)
	t.Logf("empty values: %s", ev.Message)

	// Four thousand empty values: within the bounds, and charged for them.
	before := settledVolumeBytes(t, s)
	within := s.NewShare(t, emptyValues(4000))
	s.Grant(t, ns, framework.KindSecret, within.Share, framework.ServiceAccount(ns, "default"))
	s.CreatePod(t, ns, "within-0", framework.ConsumerSpec{Attrs: within.Attrs()})
	s.WaitRunning(t, ns, "within-0", 2*time.Minute)
	charged := settledVolumeBytes(t, s) - before
	if want := float64(4000 * 4 * framework.EntryBytes); charged < want {
		t.Errorf("a volume of 4000 empty files is charged %.1f MiB, want at least %.1f MiB (each file and its link, in the copy and the view)", charged/(1<<20), want/(1<<20))
	}
	s.CreatePod(t, ns, "within-1", framework.ConsumerSpec{Attrs: within.Attrs()})
	ev = s.WaitEvent(t, ns, "within-1", "FailedMount", 2*time.Minute, "ResourceExhausted", "--volume-bytes-budget")
	t.Logf("4000 empty files charged %.1f MiB; a second such volume: %s", charged/(1<<20), ev.Message)

	driver, err := s.DriverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.LogCharged(t, driver, "volumes of many entries")
	assertNotOOMKilled(t, driver) // restartCount 0
	s.AssertStillRunning(t, ns, "within-0")
}

func assertNotOOMKilled(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 || (cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Reason == "OOMKilled") {
			t.Errorf("driver pod %s: container %s restarted %d times (last: %+v)", p.Name, cs.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
		}
	}
}

// Long names, with real pods on the small driver: a pod's items name 300 files of
// 253 bytes each (one key of a byte), so each volume holds a page for every top-level link's
// target (in the copy and the view) and a name allocation for every entry: some 3.6 MiB of tmpfs
// pages and 1.7 MiB of kernel memory, which were charged 2.5 MiB. Pods of such volumes fill the
// budget: what the driver's container is charged for them by the kernel (tmpfs pages and kernel
// memory, grown from before the first) stays within what the budget counts for them, the pods
// beyond it are refused naming the budget, and the driver's container never restarts.
func TestPodsVolumeBudgetChargesLongNames(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	ctx := context.Background()
	s.UseSmallDriver(t)
	ns := s.PodNamespace(t, "longnames")
	share := s.NewShare(t, map[string][]byte{"k": []byte("x")})
	s.Grant(t, ns, framework.KindSecret, share.Share, framework.ServiceAccount(ns, "default"))
	items := make([]string, 300)
	for i := range items {
		items[i] = fmt.Sprintf("k=%03d%s", i, strings.Repeat("n", 250))
	}
	attrs := share.Attrs()
	attrs[framework.AttrItems] = strings.Join(items, ",")

	driver, err := s.DriverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shmem0, kmem0, _, ok := s.DriverKernelMemory(driver)
	if !ok {
		t.Fatalf("no memory cgroup found for the driver pod %s", driver.Name)
	}
	charged0 := s.Scrape(t).Sum("sharedresource_volume_bytes", nil)

	// One pod at a time, so that each volume is charged before the next publish asks.
	const pods = 8
	running, refused := 0, 0
	for i := range pods {
		name := fmt.Sprintf("long-%d", i)
		s.CreatePod(t, ns, name, framework.ConsumerSpec{Attrs: attrs})
		var state string
		framework.Eventually(t, 2*time.Minute, func() error {
			p, err := s.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodRunning {
				state = "running"
				return nil
			}
			evs, err := s.PodEvents(ns, name, "FailedMount")
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if strings.Contains(ev.Message, "ResourceExhausted") && strings.Contains(ev.Message, "--volume-bytes-budget") {
					state = "refused"
					return nil
				}
			}
			return fmt.Errorf("pod %s neither running nor refused by the budget", name)
		})
		if state == "running" {
			running++
		} else {
			refused++
		}
	}
	driver, err = s.DriverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shmem, kmem, usage, ok := s.DriverKernelMemory(driver)
	if !ok || shmem < 0 || kmem < 0 || shmem0 < 0 || kmem0 < 0 {
		t.Fatalf("the driver pod %s's memory cgroup could not be read (shmem %v then %v, kernel %v then %v)", driver.Name, shmem0, shmem, kmem0, kmem)
	}
	charged := s.Scrape(t).Sum("sharedresource_volume_bytes", nil)
	held := (shmem - shmem0) + (kmem - kmem0)
	t.Logf("budget %d MiB: %d pods of 300 253-byte names running, %d refused; charged %.1f MiB for them; the kernel holds %.1f MiB of tmpfs pages and %.1f MiB of kernel memory more (%.1f MiB); container usage %.1f MiB of 96 MiB",
		framework.BudgetBytes>>20, running, refused, (charged-charged0)/(1<<20), (shmem-shmem0)/(1<<20), (kmem-kmem0)/(1<<20), held/(1<<20), usage/(1<<20))
	s.LogCharged(t, driver, "long names")
	if running == 0 || refused == 0 {
		t.Errorf("%d pods running, %d refused: want the budget filled, and the pods beyond it refused", running, refused)
	}
	if held > charged-charged0 {
		t.Errorf("the kernel holds %.1f MiB more for the volumes of long names, the budget counts %.1f MiB for them", held/(1<<20), (charged-charged0)/(1<<20))
	}
	assertNotOOMKilled(t, driver)
	time.Sleep(2 * framework.PodsRelist) // a relist or two over every volume
	if p, err := s.DriverPod(ctx); err != nil {
		t.Fatal(err)
	} else {
		assertNotOOMKilled(t, p)
	}
}

// settledVolumeBytes is what the driver's volumes are charged once none is coming or going: the
// same before and after two relist cycles. A volume of an earlier test may still be unpublishing
// when a test starts, and its charge leaving between two readings would be taken off the figure
// the test measures.
func settledVolumeBytes(t *testing.T, s *framework.PodSuite) float64 {
	t.Helper()
	var now float64
	framework.Eventually(t, time.Minute, func() error {
		then := s.Scrape(t).Sum("sharedresource_volume_bytes", nil)
		s.WaitCycles(t, 2)
		if now = s.Scrape(t).Sum("sharedresource_volume_bytes", nil); now != then {
			return fmt.Errorf("the volumes' charge moved from %.0f to %.0f bytes over two relist cycles", then, now)
		}
		return nil
	})
	return now
}
