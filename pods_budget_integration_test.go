//go:build integration

package main

// Specification of the node's volume budget with real pods (budget.go): the driver, given a
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
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// budgetValues give the driver a small container: budget = 96Mi - 8Mi - 64Mi = 24Mi.
var budgetValues = []string{"--set", "resources.limits.memory=96Mi", "--set", "driver.cacheMaxBytes=8388608"}

const budgetBytes = 24 << 20

// useSmallDriver gives the driver the small container of budgetValues for the test, and its
// usual one back when the test ends.
func (s *podSuite) useSmallDriver(t *testing.T) {
	t.Helper()
	upgrade := func(values ...string) {
		t.Helper()
		before, err := s.driverPod(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.helmUpgrade(values...); err != nil {
			t.Fatal(err)
		}
		if _, err := s.waitDriver(context.Background(), before.UID, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	upgrade(budgetValues...)
	t.Cleanup(func() { upgrade("--set", "resources.limits.memory=256Mi", "--set", "driver.cacheMaxBytes=67108864") })
	if got := s.scrape(t).sum("sharedresource_volume_bytes_budget", nil); got != budgetBytes {
		t.Fatalf("budget %v bytes, want %d (derived from the container's 96Mi limit)", got, budgetBytes)
	}
}

func TestPodsVolumeBudgetKeepsTheDriverAlive(t *testing.T) {
	s := podsEnv(t, podsAlone)
	ctx := context.Background()
	s.useSmallDriver(t)

	// A small share on the node first, to revoke once the node is full.
	small := s.newShare(t, map[string][]byte{"ca.crt": []byte("small")})
	revNS := s.podNamespace(t, "budget-rev")
	revoke := s.grant(t, revNS, kindSecret, small.share, serviceAccount(revNS, "default"))
	s.createPod(t, revNS, "reader", consumerSpec{attrs: small.attrs()})
	s.waitRunning(t, revNS, "reader", 60*time.Second)

	// Pods of fifteen 1 MiB volumes each, 90 MiB in all: more than the budget, and more than the
	// container holds beside the driver itself (without the budget it was OOM-killed).
	big := s.newShare(t, map[string][]byte{"blob": podsRandomBytes(1 << 20)})
	ns := s.podNamespace(t, "budget")
	s.grant(t, ns, kindSecret, big.share, serviceAccount(ns, "default"))
	const pods, perPod = 6, 15
	for i := range pods {
		p := s.consumerPod(ns, fmt.Sprintf("fill-%d", i), consumerSpec{attrs: big.attrs()})
		for j := 1; j < perPod; j++ {
			// The kubelet mounts only the volumes a container mounts.
			v := p.Spec.Volumes[0].DeepCopy()
			v.Name = fmt.Sprintf("%s-%d", podVolName, j)
			p.Spec.Volumes = append(p.Spec.Volumes, *v)
			c := &p.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: fmt.Sprintf("%s-%d", podMount, j), ReadOnly: true})
		}
		if _, err := s.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The first pod alone, so that it gets all its volumes; the others then share what is
		// left (the kubelet mounts a pod's volumes in parallel, and a pod that cannot start
		// keeps the ones it got).
		if i == 0 {
			s.waitRunning(t, ns, p.Name, 2*time.Minute)
		}
	}
	var running, refused []string
	eventually(t, 2*time.Minute, func() error {
		running, refused = nil, nil
		for i := range pods {
			name := fmt.Sprintf("fill-%d", i)
			p, err := s.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, name)
				continue
			}
			evs, err := s.podEvents(ns, name, "FailedMount")
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
	m := s.scrape(t)
	used, volumes := m.sum("sharedresource_volume_bytes", nil), m.sum("sharedresource_volumes", nil)
	t.Logf("budget %d MiB: %d pods of %d x 1 MiB volumes running %v, %d refused %v; %v volumes holding %.1f MiB",
		budgetBytes>>20, len(running), perPod, running, len(refused), refused, volumes, used/(1<<20))
	if used > budgetBytes {
		t.Errorf("volumes hold %v bytes, more than the budget %d", used, budgetBytes)
	}
	driver, err := s.driverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.logCharged(t, driver, "node full")
	assertNotOOMKilled(t, driver)

	// A revocation on the full node lands within the bound.
	revoke()
	took := s.waitFiles(t, revNS, "reader", map[string][]byte{}, podsRelist*16/10+podsRelistSlack)
	t.Logf("revoked on the full node: files gone after %v", took.Round(100*time.Millisecond))

	// The driver restarted on the full node resumes every volume within the same memory. The
	// volumes counted are this test's, read from their records on the node: the node-wide gauge
	// may still include a pod of an earlier test whose namespace is being deleted, and whose
	// volume the kubelet unpublishes before the restart.
	ours, oursBytes := s.volumesOfNamespaces(t, ns, revNS)
	if err := s.kube.CoreV1().Pods(podsDriverNS).Delete(ctx, driver.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restarted, err := s.waitDriver(ctx, driver.UID, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	logText, err := s.podLog(ctx, podsDriverNS, restarted.Name)
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
	eventually(t, 30*time.Second, func() error {
		// At least this test's volumes (their records' bytes, taken before the restart), and
		// within the budget. (Not the node-wide gauge from before: it may still have counted a
		// volume of an earlier test, unpublished since.)
		if got := s.scrape(t).sum("sharedresource_volume_bytes", nil); got > budgetBytes || got < float64(oursBytes) {
			return fmt.Errorf("after the restart volumes hold %v bytes, this test's %d before it (node-wide %v; budget %d)", got, oursBytes, used, budgetBytes)
		}
		return nil
	})
	s.logCharged(t, restarted, "after the driver pod was replaced")
	time.Sleep(2 * podsRelist) // a relist or two over every volume
	if p, err := s.driverPod(ctx); err != nil {
		t.Fatal(err)
	} else {
		assertNotOOMKilled(t, p)
	}
	for _, name := range running {
		s.assertStillRunning(t, ns, name)
	}
}

// The review's volumes of many entries, with real pods on the small driver: a thousand items
// sixteen segments deep (16,000 files and directories, about 40 MiB of kernel memory, which
// were charged 4 MiB) and a share of 20,000 empty values (no data pages: it was charged a page,
// and unbounded) are refused with messages naming the bound, before anything is written. A
// share of 4,000 empty values, within the bounds, runs and is charged its entries (over 16 MiB
// of the 24 MiB budget), so a second such pod is refused by the budget. The driver's container
// never restarts.
func TestPodsVolumeBudgetChargesAndBoundsEntries(t *testing.T) {
	s := podsEnv(t, podsAlone)
	ctx := context.Background()
	s.useSmallDriver(t)
	ns := s.podNamespace(t, "entries")
	emptyValues := func(n int) map[string][]byte {
		data := map[string][]byte{}
		for i := range n {
			data[fmt.Sprintf("k%d", i)] = nil
		}
		return data
	}

	// A key with an empty value, a thousand times, each sixteen segments deep.
	deep := s.newShare(t, map[string][]byte{"k": nil})
	s.grant(t, ns, kindSecret, deep.share, serviceAccount(ns, "default"))
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprintf("k=d%d/a/b/c/d/e/f/g/h/i/j/k/l/m/n/f", i)
	}
	deepAttrs := deep.attrs()
	deepAttrs[attrItems] = strings.Join(items, ",")
	s.createPod(t, ns, "deep", consumerSpec{attrs: deepAttrs})
	ev := s.waitEvent(t, ns, "deep", "FailedMount", 2*time.Minute, "InvalidArgument", "16000 files and directories",
		fmt.Sprintf("a volume holds at most %d", maxVolumeEntries))
	t.Logf("deep items: %s", ev.Message)

	// Twenty thousand empty values.
	many := s.newShare(t, emptyValues(20000))
	s.grant(t, ns, kindSecret, many.share, serviceAccount(ns, "default"))
	s.createPod(t, ns, "empty", consumerSpec{attrs: many.attrs()})
	ev = s.waitEvent(t, ns, "empty", "FailedMount", 2*time.Minute, "ResourceExhausted", "20000 files and directories", attrItems)
	t.Logf("empty values: %s", ev.Message)

	// Four thousand empty values: within the bounds, and charged for them.
	before := s.scrape(t).sum("sharedresource_volume_bytes", nil)
	within := s.newShare(t, emptyValues(4000))
	s.grant(t, ns, kindSecret, within.share, serviceAccount(ns, "default"))
	s.createPod(t, ns, "within-0", consumerSpec{attrs: within.attrs()})
	s.waitRunning(t, ns, "within-0", 2*time.Minute)
	charged := s.scrape(t).sum("sharedresource_volume_bytes", nil) - before
	if want := float64(4000 * 4 * entryBytes); charged < want {
		t.Errorf("a volume of 4000 empty files is charged %.1f MiB, want at least %.1f MiB (each file and its link, in the copy and the view)", charged/(1<<20), want/(1<<20))
	}
	s.createPod(t, ns, "within-1", consumerSpec{attrs: within.attrs()})
	ev = s.waitEvent(t, ns, "within-1", "FailedMount", 2*time.Minute, "ResourceExhausted", "--volume-bytes-budget")
	t.Logf("4000 empty files charged %.1f MiB; a second such volume: %s", charged/(1<<20), ev.Message)

	driver, err := s.driverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.logCharged(t, driver, "volumes of many entries")
	assertNotOOMKilled(t, driver) // restartCount 0
	s.assertStillRunning(t, ns, "within-0")
}

// volumesOfNamespaces counts the volumes on the node whose records name a pod of one of the
// namespaces, and the bytes the budget charges for them (budget.go's volumeBytes).
func (s *podSuite) volumesOfNamespaces(t *testing.T, namespaces ...string) (n int, bytes int64) {
	t.Helper()
	records, err := filepath.Glob(filepath.Join(s.kubelet, "plugins", driverName, "volumes", "*", "record.json"))
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
			bytes += volumeBytes(rec)
		}
	}
	return n, bytes
}

func assertNotOOMKilled(t *testing.T, p *corev1.Pod) {
	t.Helper()
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 || (cs.LastTerminationState.Terminated != nil && cs.LastTerminationState.Terminated.Reason == "OOMKilled") {
			t.Errorf("driver pod %s: container %s restarted %d times (last: %+v)", p.Name, cs.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
		}
	}
}

// logCharged logs where the kernel charges the volumes' pages: the shmem (tmpfs) bytes of the
// driver container's memory cgroup and of its pod's, and the container's usage against its limit.
func (s *podSuite) logCharged(t *testing.T, p *corev1.Pod, when string) {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		return
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	id = id[strings.Index(id, "://")+3:]
	matches, _ := filepath.Glob("/sys/fs/cgroup/memory/kubepods*/*/pod" + string(p.UID) + "/" + id)
	if len(matches) == 0 {
		matches, _ = filepath.Glob("/sys/fs/cgroup/memory/kubepods*/pod" + string(p.UID) + "/" + id)
	}
	if len(matches) == 0 {
		t.Logf("%s: no memory cgroup found for container %s of pod %s", when, id, p.UID)
		return
	}
	container, pod := matches[0], filepath.Dir(matches[0])
	qos := filepath.Dir(pod) // kubepods/burstable: where a deleted pod's charges go
	stat := func(dir, key string) float64 {
		b, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == key {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v
			}
		}
		return -1
	}
	usage, _ := os.ReadFile(filepath.Join(container, "memory.usage_in_bytes"))
	u, _ := strconv.ParseFloat(strings.TrimSpace(string(usage)), 64)
	t.Logf("%s: tmpfs pages (shmem) charged to the driver container's cgroup %.1f MiB, to its pod's own %.1f MiB (with its containers' %.1f MiB), "+
		"to %s's %.1f MiB with its pods' (removed ones included); container usage %.1f MiB of 96 MiB",
		when, stat(container, "shmem")/(1<<20), stat(pod, "shmem")/(1<<20), stat(pod, "total_shmem")/(1<<20),
		filepath.Base(qos), stat(qos, "total_shmem")/(1<<20), u/(1<<20))
}
