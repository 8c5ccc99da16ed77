package bench

// Benchmarks of the driver's cost: the real driver binary against a real kube-apiserver + etcd,
// called over its CSI socket by the benchmark playing the kubelet, as in test/e2e/framework/harness.go. They
// measure what the design promises: publishes are fast, the API server sees one request per
// distinct question rather than one per volume, and the driver's memory does not grow with the
// cluster's Secrets.
//
// Run them with `make bench` (hack/bench.sh), which writes BENCHMARKS.md from their output
// (tools/benchtable). Each sub-benchmark is one whole scenario per run (-benchtime=1x) and
// reports its figures with b.ReportMetric; -count=N gives N runs, of which the table shows the
// median, min and max. They never fail on a number: a benchmark fails only when the scenario
// itself cannot run (no cluster, a publish that errors).
//
// API requests are counted three ways, each over a window in which nothing else asks the API
// server for SubjectAccessReviews or Secrets: at the API server (apiserver_request_total, the
// figure BENCHMARKS.md gives), by the driver itself (sharedresource_api_requests_total), and, when
// the local cluster's audit log is available ($SRCSI_AUDIT_LOG), by the audit events whose user
// agent is the driver's.
//
// BENCH_SMOKE=1 shrinks every scenario so that the whole suite runs in a minute or two (CI).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// benchScale is the size of every scenario: a full run's (BENCHMARKS.md), or a smoke run's.
type benchScale struct {
	coldSamples, warmSamples int   // publishes per latency run
	throughputVolumes        []int // volumes per throughput run
	relistVolumes            int   // over 10 shares and 50 service accounts
	memorySecrets            []int // Secrets in unrelated namespaces
	memoryVolumes            int
	leakCycles               int
}

func scale() benchScale {
	if os.Getenv("BENCH_SMOKE") != "" {
		return benchScale{coldSamples: 5, warmSamples: 20, throughputVolumes: []int{20, 100}, relistVolumes: 100,
			memorySecrets: []int{0, 1000}, memoryVolumes: 100, leakCycles: 100}
	}
	return benchScale{coldSamples: 50, warmSamples: 500, throughputVolumes: []int{100, 1000}, relistVolumes: 1000,
		memorySecrets: []int{0, 10000, 50000}, memoryVolumes: 1000, leakCycles: 1000}
}

// callers is how many concurrent kubelet calls the throughput, relist and leak scenarios make.
const callers = 10

// ---------------------------------------------------------------------------------------------
// NodePublishVolume latency

// BenchmarkPublishLatency: cold (the first volume of a share: SubjectAccessReview and GET of the
// source) and warm (both cached) publishes, one at a time, for Secrets of three sizes.
func BenchmarkPublishLatency(b *testing.B) {
	c := newBenchCluster(b)
	sc := scale()
	for _, size := range []struct {
		name  string
		bytes int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		// One share per cold sample (each its own Secret: a source cached by an earlier
		// sample would make the GET warm), plus one for warming up the connections. Made by
		// the first run (not at all when -bench filters the size out) and kept for the others:
		// every run starts a new driver, whose caches are empty.
		var f *fleet
		b.Run("size="+size.name, func(b *testing.B) {
			if f == nil {
				f = c.fleet(b, "lat-"+strings.ToLower(size.name), sc.coldSamples+1, 1, 1, size.bytes)
			}
			for range b.N {
				benchPublishLatency(b, c, f, sc)
			}
		})
	}
}

func benchPublishLatency(b *testing.B, c *benchCluster, f *fleet, sc benchScale) {
	// Long TTLs and no relist: every warm sample is warm and nothing runs beside the publishes.
	d := c.startDriver(b, "--cache-ttl=1h", "--authz-cache-ttl=1h", "--relist-interval=1h")
	defer d.Cleanup()
	sa := f.sas[0]
	// The first publish of a process pays for connections and lazy initialisation; not a
	// figure any pod sees twice.
	d.publishAndUnpublish(b, d.shareVolume(sa, f.shares[len(f.shares)-1]))

	var cold, warm, coldCPU, warmCPU []time.Duration
	var floorSAR, floorGET []time.Duration
	before := d.scrape(b)
	for j := range sc.coldSamples {
		// Spaced as pods arrive, not back to back: each cold publish takes two of client-go's
		// rate-limit tokens (--kube-api-qps 50, burst 100), and a drained bucket would make
		// this a measure of the limiter.
		time.Sleep(50 * time.Millisecond)
		wall, cpu := d.publishAndUnpublish(b, d.shareVolume(sa, f.shares[j]))
		cold, coldCPU = append(cold, wall), append(coldCPU, cpu)
		// What the API server alone takes for the requests of that cold publish, asked by
		// this process after the same pause. Requests that follow a pause cost more than
		// requests back to back (the API server's, etcd's and the client's threads have
		// parked), so floors taken back to back would be faster than any cold publish can be.
		time.Sleep(50 * time.Millisecond)
		sarTook, getTook := c.apiFloor(b, sa, f.shares[j], f.srcNS, fmt.Sprintf("src-%d", j))
		floorSAR, floorGET = append(floorSAR, sarTook), append(floorGET, getTook)
	}
	mid := d.scrape(b)
	// What the kernel alone takes for a warm publish's mounts and writes: one floor sample after
	// each warm publish, on the same file system as the driver's volumes, so whatever else the
	// machine does weighs on both alike and their ratio holds.
	src, err := c.kube.CoreV1().Secrets(f.srcNS).Get(context.Background(), "src-0", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// And what the CSI call alone takes, whatever the handler does: a call that does nothing
	// (NodeGetCapabilities) on the same connection, through the same interceptor, after each
	// one; taken before the kernel's floor, so that no call has just woken the driver's gRPC
	// goroutines when the next publish comes.
	var floor, call []time.Duration
	for range sc.warmSamples {
		wall, cpu := d.publishAndUnpublish(b, d.shareVolume(sa, f.shares[0]))
		warm, warmCPU = append(warm, wall), append(warmCPU, cpu)
		call = append(call, d.callFloor(b))
		floor = append(floor, publishFloor(b, filepath.Join(d.KubeletRoot, "plugins"), src.Data))
	}
	after := d.scrape(b)

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(percentile(cold, 50)), "cold-p50-ms")
	b.ReportMetric(ms(percentile(cold, 99)), "cold-p99-ms")
	b.ReportMetric(ms(percentile(floorSAR, 50)), "floor-sar-p50-ms")
	b.ReportMetric(ms(percentile(floorGET, 50)), "floor-get-p50-ms")
	b.ReportMetric(ms(percentile(warm, 50)), "warm-p50-ms")
	b.ReportMetric(ms(percentile(warm, 99)), "warm-p99-ms")
	b.ReportMetric(ms(percentile(floor, 50)), "floor-syscalls-p50-ms")
	b.ReportMetric(ms(percentile(call, 50)), "floor-csi-call-p50-ms")
	b.ReportMetric(ms(percentile(coldCPU, 50)), "cold-cpu-p50-ms")
	b.ReportMetric(ms(percentile(warmCPU, 50)), "warm-cpu-p50-ms")
	// Proof that the samples are what they claim: cold ones each cost one SAR and one GET,
	// warm ones nothing at all.
	b.ReportMetric(driverRequests(mid).sub(driverRequests(before)).all/float64(sc.coldSamples), "cold-api-requests/publish")
	b.ReportMetric(driverRequests(after).sub(driverRequests(mid)).all/float64(sc.warmSamples), "warm-api-requests/publish")
}

// publishFloor times the system calls a warm publish cannot do without, made directly by the
// benchmark: the volume's dir, its tmpfs (the driver's size and options), each file written once,
// the target's dir, a bind of the files onto it and its remount read-only. Beside them, the gRPC
// call (callFloor), and what the driver does (validation, the record, the share's copy and the
// pod's view with their ..data links, its checks of the target) make the rest of a warm
// publish. The mounts and dirs are undone after, untimed. parent: a dir on the file system of
// the driver's volumes.
func publishFloor(b *testing.B, parent string, files map[string][]byte) time.Duration {
	dir, err := os.MkdirTemp(parent, "floor-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	vol, target := filepath.Join(dir, "vol"), filepath.Join(dir, "target")
	start := time.Now()
	if err := os.Mkdir(vol, 0o700); err != nil {
		b.Fatal(err)
	}
	// The driver's mount (tmpfs.go's mountTmpfs, at the deployed --tmpfs-size=4Mi; nr_inodes is
	// tmpfsInodes): with large folios where the kernel has them, so that a large file is written
	// as fast as the driver writes it.
	const flags, data = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "size=4194304,nr_inodes=32896,mode=0755"
	err = unix.Mount("tmpfs", vol, "tmpfs", flags, data+",huge=within_size")
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount("tmpfs", vol, "tmpfs", flags, data)
	}
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(vol, k), v, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.Mkdir(target, 0o750); err != nil {
		b.Fatal(err)
	}
	if err := unix.Mount(vol, target, "", unix.MS_BIND, ""); err != nil {
		b.Fatal(err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	for _, p := range []string{target, vol} {
		if err := unix.Unmount(p, 0); err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// callFloor times a CSI call whose handler does nothing (NodeGetCapabilities answers a constant),
// made as the benchmark makes a publish (framework.DriverProc.PublishOnce, its deadline timed
// too): on the same open connection to the driver's socket, through the driver's interceptor. It
// is what any call costs the benchmark's client and the driver: gRPC's framing on both sides,
// the socket, and the goroutines the call is handed between. (The kubelet costs more: it dials
// the socket for each call.)
func (d *benchDriver) callFloor(b *testing.B) time.Duration {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := d.Node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	cancel()
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// apiFloor times the two requests of a cold publish (the SubjectAccessReview the driver sends
// and a quorum GET of the source) made by the benchmark itself with the cheapest encoding
// (protobuf, no gzip): the part of a cold publish that is the API server's, not the driver's.
func (c *benchCluster) apiFloor(b *testing.B, sa nsSA, share, srcNS, srcName string) (sar, get time.Duration) {
	ctx := context.Background()
	start := time.Now()
	if _, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, framework.UseReview(sa.ns, sa.sa, framework.KindSecret, share), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	sar = time.Since(start)
	start = time.Now()
	if _, err := c.kube.CoreV1().Secrets(srcNS).Get(ctx, srcName, metav1.GetOptions{}); err != nil {
		b.Fatal(err)
	}
	return sar, time.Since(start)
}

// ---------------------------------------------------------------------------------------------
// Throughput and API requests per publish

// BenchmarkPublishThroughput: N volumes of one share by one service account, published by 10
// concurrent callers and then unpublished, with the driver's default cache TTLs. The API
// requests of the publishes are counted: the target is one SAR and one GET per TTL.
func BenchmarkPublishThroughput(b *testing.B) {
	c := newBenchCluster(b)
	f := c.fleet(b, "tput", 1, 1, 1, 1<<10)
	for _, n := range scale().throughputVolumes {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
			for range b.N {
				benchThroughput(b, c, f, n)
			}
		})
	}
}

// defaultTTL is the driver's default --cache-ttl and --authz-cache-ttl, which the throughput
// scenario runs with.
const defaultTTL = 10 * time.Second

func benchThroughput(b *testing.B, c *benchCluster, f *fleet, n int) {
	d := c.startDriver(b, "--relist-interval=1h")
	defer d.Cleanup()
	vols := make([]*framework.TestVolume, n)
	for i := range vols {
		vols[i] = d.shareVolume(f.sas[0], f.shares[0])
	}
	w := c.startWindow(b, d)
	start := time.Now()
	d.publishConcurrently(b, vols)
	pubWall := time.Since(start)
	api := w.end(b)
	start = time.Now()
	d.unpublishConcurrently(b, vols)
	unpubWall := time.Since(start)

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(n)/pubWall.Seconds(), "publishes/s")
	b.ReportMetric(float64(n)/unpubWall.Seconds(), "unpublishes/s")
	b.ReportMetric(pubWall.Seconds(), "publish-wall-s")
	// How many TTL windows the publishes spanned: the most SARs and GETs the target allows.
	b.ReportMetric(math.Ceil(pubWall.Seconds()/defaultTTL.Seconds()), "ttl-windows")
	api.report(b, "")
}

// ---------------------------------------------------------------------------------------------
// The relist cycle

// BenchmarkRelistCycle: volumes spread over 10 shares (10 Secrets) and 50 service accounts in 5
// namespaces, two volumes per (service account, share) pair; the wall time of one relist cycle
// over all of them and its API requests. The design's promise: one SAR per distinct (namespace,
// service account, share) and one GET per distinct source, however many volumes. The cycle's
// requests go through client-go's rate limiter, so it runs with the default --kube-api-qps and
// with one high enough that the limiter does not set the pace.
func BenchmarkRelistCycle(b *testing.B) {
	c := newBenchCluster(b)
	f := c.fleet(b, "relist", 10, 5, 10, 1<<10)
	n := scale().relistVolumes
	b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
		for range b.N {
			benchRelist(b, c, f, n)
		}
	})
	b.Run(fmt.Sprintf("volumes=%d,kube-api-qps=1000", n), func(b *testing.B) {
		for range b.N {
			benchRelist(b, c, f, n, "--kube-api-qps=1000", "--kube-api-burst=1000")
		}
	})
}

// relistLayout spreads volume i over the fleet: service account i%len(sas), share
// (i/len(sas))%len(shares), so that every (service account, share) pair gets the same number of
// volumes.
func relistLayout(f *fleet, i int) (nsSA, string) {
	return f.sas[i%len(f.sas)], f.shares[(i/len(f.sas))%len(f.shares)]
}

func benchRelist(b *testing.B, c *benchCluster, f *fleet, n int, args ...string) {
	// Cycles run every 2 s (±10%) once the previous one ended; the measured one starts after the
	// publishes are all done (see measureCycle). Its requests are not spread over the interval
	// (--relist-spread=0): the figure is the cycle's own cost, as fast as the rate limit allows.
	d := c.startDriver(b, append([]string{"--relist-interval=2s", "--relist-spread=0"}, args...)...)
	defer d.Cleanup()
	vols := make([]*framework.TestVolume, n)
	keys, sources := map[string]bool{}, map[string]bool{}
	for i := range vols {
		sa, share := relistLayout(f, i)
		vols[i] = d.shareVolume(sa, share)
		keys[sa.ns+"/"+sa.sa+"/"+share] = true
		sources[share] = true // one Secret per share
	}
	d.publishConcurrently(b, vols)
	cycle, api := d.measureCycle(b, c)
	d.unpublishConcurrently(b, vols)

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(cycle.Seconds(), "cycle-s")
	b.ReportMetric(float64(len(keys)), "distinct-keys")
	b.ReportMetric(float64(len(sources)), "distinct-sources")
	b.ReportMetric(float64(d.Aborted.Load()), "aborted-retries")
	api.report(b, "")
}

// measureCycle waits for a relist cycle that starts after the call and returns its duration
// (from the driver's histogram) and the API requests made during it. The cycle in progress at
// the call, if any, may have started before the caller's last change; the one after it cannot
// have: cycles are sequential, with the relist interval between them.
func (d *benchDriver) measureCycle(b *testing.B, c *benchCluster) (time.Duration, apiWindow) {
	n := d.scrape(b).Sum("sharedresource_relist_cycle_duration_seconds_count", nil)
	m1 := d.waitRelist(b, n+1)
	w := c.startWindowFrom(b, d, m1)
	m2 := d.waitRelist(b, n+2)
	api := w.endWith(b, m2)
	if got := m2.Sum("sharedresource_relist_cycle_duration_seconds_count", nil); got != n+2 {
		b.Fatalf("expected exactly one relist cycle in the window, saw %v", got-n-1)
	}
	dur := m2.Sum("sharedresource_relist_cycle_duration_seconds_sum", nil) - m1.Sum("sharedresource_relist_cycle_duration_seconds_sum", nil)
	return time.Duration(dur * float64(time.Second)), api
}

// waitRelist polls the driver's metrics until n relist cycles have completed.
func (d *benchDriver) waitRelist(b *testing.B, n float64) framework.ScrapedMetrics {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		m := d.scrape(b)
		if m.Sum("sharedresource_relist_cycle_duration_seconds_count", nil) >= n {
			return m
		}
		if time.Now().After(deadline) {
			b.Fatalf("relist cycle %v did not complete within 5 minutes", n)
		}
		// Well within the 2 s between cycles, and rare enough not to load the driver: a scrape
		// reads the whole mount table (the mounts gauge).
		time.Sleep(200 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------------
// Memory

// BenchmarkMemory: the driver's resident memory with published volumes, while the cluster holds
// 0, 10,000 and 50,000 Secrets in namespaces no share points at. The driver watches no Secrets,
// so the figure must not move with their number.
func BenchmarkMemory(b *testing.B) {
	c := newBenchCluster(b)
	sc := scale()
	f := c.fleet(b, "mem", 10, 1, 10, 1<<10)
	noise := &noiseSecrets{c: c}
	b.Cleanup(noise.deleteAll)
	for _, level := range sc.memorySecrets {
		b.Run(fmt.Sprintf("secrets=%d", level), func(b *testing.B) {
			noise.ensure(b, level)
			for range b.N {
				benchMemory(b, c, f, sc.memoryVolumes)
			}
		})
	}
}

func benchMemory(b *testing.B, c *benchCluster, f *fleet, n int) {
	d := c.startDriver(b, "--relist-interval=2s")
	defer d.Cleanup()
	time.Sleep(2 * time.Second) // past start-up's transient allocations
	idle := d.scrape(b)
	vols := make([]*framework.TestVolume, n)
	for i := range vols {
		sa, share := relistLayout(f, i)
		vols[i] = d.shareVolume(sa, share)
	}
	d.publishConcurrently(b, vols)
	// Measured after a whole relist cycle over every volume: the steady state of a busy node.
	d.measureCycle(b, c)
	// RSS is the process's own memory (anonymous) plus the pages of its executable it has
	// mapped (file): the second is the binary's size, not the driver's state. The anonymous part
	// moves with the garbage collector's timing, so it is the median of five samples over 2.5 s,
	// taken without scraping /metrics (a scrape's own garbage is not the driver's state).
	var anons, files []float64
	for range 5 {
		time.Sleep(500 * time.Millisecond)
		anonNow, fileNow := d.rssParts(b)
		anons, files = append(anons, anonNow), append(files, fileNow)
	}
	anon, file := percentile(anons, 50), percentile(files, 50)
	m := d.scrape(b)
	d.unpublishConcurrently(b, vols)

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(mib(idle.Sum("process_resident_memory_bytes", nil)), "idle-rss-MiB")
	b.ReportMetric(mib(anon+file), "rss-MiB")
	b.ReportMetric(mib(anon), "rss-anon-MiB")
	b.ReportMetric(mib(file), "rss-file-MiB")
	b.ReportMetric(mib(m.Sum("go_memstats_heap_inuse_bytes", nil)), "heap-inuse-MiB")
	b.ReportMetric(m.Sum("sharedresource_volumes", nil), "volumes")
}

// rssParts reads the driver's anonymous and file-backed resident memory from /proc.
func (d *benchDriver) rssParts(b *testing.B) (anon, file float64) {
	return framework.RssOf(b, d.Cmd.Process.Pid)
}

// noiseSecrets are small Secrets in namespaces of their own that no share points at.
type noiseSecrets struct {
	c          *benchCluster
	namespaces []string
	count      int
}

const noiseNamespaces = 50

// ensure brings the number of noise Secrets up to n (they only ever grow within one benchmark).
func (ns *noiseSecrets) ensure(b *testing.B, n int) {
	if n <= ns.count {
		return
	}
	ctx := context.Background()
	for len(ns.namespaces) < noiseNamespaces {
		name := fmt.Sprintf("%s-noise-%02d", ns.c.prefix, len(ns.namespaces))
		if _, err := ns.c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			b.Fatalf("creating namespace: %v", err)
		}
		ns.namespaces = append(ns.namespaces, name)
	}
	start, from := time.Now(), ns.count
	payload := framework.PodsRandomBytes(256)
	err := parallel(n-from, 32, func(i int) error {
		i += from
		_, err := ns.c.kube.CoreV1().Secrets(ns.namespaces[i%noiseNamespaces]).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("noise-%d", i)},
			Data:       map[string][]byte{"key": payload},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating Secrets: %v", err)
	}
	ns.count = n
	progress("created %d Secrets in %v (%.0f/s)", n-from, time.Since(start).Round(time.Second), float64(n-from)/time.Since(start).Seconds())
}

func (ns *noiseSecrets) deleteAll() {
	start := time.Now()
	_ = parallel(len(ns.namespaces), noiseNamespaces, func(i int) error {
		ns.c.deleteNamespace(ns.namespaces[i])
		return nil
	}) // the function never fails
	progress("deleted %d Secrets in %v", ns.count, time.Since(start).Round(time.Second))
}

// ---------------------------------------------------------------------------------------------
// Leaks

// BenchmarkLeaks: publish/unpublish cycles by 10 concurrent callers, over 10 shares and 10
// service accounts, with a relist every second; then the driver's goroutines, open fds and
// mounts must be back where they started.
func BenchmarkLeaks(b *testing.B) {
	c := newBenchCluster(b)
	f := c.fleet(b, "leak", 10, 1, 10, 1<<10)
	n := scale().leakCycles
	b.Run(fmt.Sprintf("cycles=%d", n), func(b *testing.B) {
		for range b.N {
			benchLeaks(b, c, f, n)
		}
	})
}

func benchLeaks(b *testing.B, c *benchCluster, f *fleet, n int) {
	d := c.startDriver(b, "--relist-interval=1s")
	defer d.Cleanup()
	time.Sleep(3 * time.Second) // the first relist cycles and the informers' start-up done
	vols := make([]*framework.TestVolume, n)
	for i := range vols {
		sa, share := relistLayout(f, i)
		vols[i] = d.shareVolume(sa, share)
	}
	before := d.scrape(b)
	err := parallel(n, callers, func(i int) error {
		if err := d.Publish(vols[i]); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		if err := d.Unpublish(vols[i]); err != nil {
			return fmt.Errorf("unpublish: %w", err)
		}
		d.removePodDir(vols[i])
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	// Goroutines of finished calls and idle connections wind down within moments; give them
	// up to 10 s to reach the baseline before taking the figure.
	gauge := func(m framework.ScrapedMetrics, name string) float64 { return m.Sum(name, nil) }
	var after framework.ScrapedMetrics
	deadline := time.Now().Add(10 * time.Second)
	for {
		after = d.scrape(b)
		settled := gauge(after, "go_goroutines") <= gauge(before, "go_goroutines") &&
			gauge(after, "process_open_fds") <= gauge(before, "process_open_fds") &&
			gauge(after, "sharedresource_mounts") <= gauge(before, "sharedresource_mounts")
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.ReportMetric(0, "ns/op")
	for _, g := range []struct{ metric, unit string }{
		{"go_goroutines", "goroutines"}, {"process_open_fds", "fds"}, {"sharedresource_mounts", "mounts"}, {"sharedresource_volumes", "volumes"},
	} {
		b.ReportMetric(gauge(before, g.metric), g.unit+"-before")
		b.ReportMetric(gauge(after, g.metric), g.unit+"-after")
	}
	// And as the kubelet's side sees it: no mount or volume dir of the driver's is left.
	left := len(framework.MountsUnder(d.KubeletRoot))
	entries, _ := os.ReadDir(filepath.Join(d.KubeletRoot, "plugins", framework.DriverName, "volumes"))
	b.ReportMetric(float64(left+len(entries)), "leftovers")
	b.ReportMetric(float64(d.Aborted.Load()), "aborted-retries")
}

// ---------------------------------------------------------------------------------------------
// The cluster side: fixtures made with a fast client, deleted when the top-level benchmark ends.

type benchCluster struct {
	env    *framework.KubeEnv
	kube   kubernetes.Interface // high rate limit, protobuf, no gzip: for fixtures and floors
	prefix string
	// owner is the top-level benchmark: fixtures made by any of its runs live until it ends.
	owner *testing.B
}

func newBenchCluster(b *testing.B) *benchCluster {
	b.Helper()
	env := framework.E2e(b)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.DisableCompression = true
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return &benchCluster{env: env, kube: kube, prefix: "bench-" + framework.RandSuffix(), owner: b}
}

// nsSA is a service account, by namespace and name.
type nsSA struct{ ns, sa string }

// fleet is a set of SharedSecrets, each over its own Secret, and service accounts allowed to use
// every one of them.
type fleet struct {
	shares []string // share i is over Secret src-<i> in namespace srcNS
	srcNS  string
	sas    []nsSA
}

// fleet creates shares SharedSecrets (each over its own Secret of size bytes, in a source
// namespace) and nsCount namespaces with sasPerNS service accounts each; the group
// system:serviceaccounts:<ns> of each may use every share.
func (c *benchCluster) fleet(b *testing.B, name string, shares, nsCount, sasPerNS, size int) *fleet {
	b.Helper()
	ctx := context.Background()
	src := c.namespace(b, name+"-src")
	c.env.GrantSourceRead(b, src, framework.ServiceAccount(framework.DriverNamespace, framework.DriverServiceAccount))
	f := &fleet{srcNS: src}
	err := parallel(shares, 8, func(i int) error {
		_, err := c.kube.CoreV1().Secrets(src).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("src-%d", i)},
			Data:       map[string][]byte{"data": framework.PodsRandomBytes(size)},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating Secrets: %v", err)
	}
	for i := range shares {
		f.shares = append(f.shares, fmt.Sprintf("%s-%s-%d", c.prefix, name, i))
	}
	err = parallel(shares, 8, func(i int) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": framework.ShareGroup + "/v1alpha1",
			"kind":       framework.KindSecret.ShareTypeName(),
			"metadata":   map[string]any{"name": f.shares[i]},
			"spec":       map[string]any{"secretRef": map[string]any{"namespace": src, "name": fmt.Sprintf("src-%d", i)}},
		}}
		_, err := c.env.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Create(ctx, u, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating SharedSecrets: %v", err)
	}
	c.owner.Cleanup(func() {
		_ = parallel(len(f.shares), 8, func(i int) error { // best effort: the namespace's deletion follows
			return c.env.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Delete(ctx, f.shares[i], metav1.DeleteOptions{})
		})
	})
	for n := range nsCount {
		ns := c.namespace(b, fmt.Sprintf("%s-pods%d", name, n))
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "use-shares", Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{framework.ShareGroup}, Resources: []string{framework.KindSecret.ShareResource()}, Verbs: []string{"use"}}},
		}
		if _, err := c.kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "use-shares", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "use-shares"},
			Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:serviceaccounts:" + ns}},
		}
		if _, err := c.kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for s := range sasPerNS {
			f.sas = append(f.sas, nsSA{ns, fmt.Sprintf("sa-%d", s)})
		}
	}
	return f
}

// namespace creates a namespace, deleted (with what it holds) when the benchmark ends.
func (c *benchCluster) namespace(b *testing.B, name string) string {
	b.Helper()
	name = c.prefix + "-" + name
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating namespace: %v", err)
	}
	c.owner.Cleanup(func() { c.deleteNamespace(name) })
	return name
}

// deleteNamespace deletes the namespace's Secrets and RBAC objects itself, then the namespace:
// a control plane without a controller manager never empties a deleted namespace. A busy API
// server may end a DeleteCollection of many Secrets early, so it is repeated until none is left.
func (c *benchCluster) deleteNamespace(name string) {
	ctx := context.Background()
	all, one := metav1.ListOptions{}, metav1.ListOptions{Limit: 1}
	for attempt := 0; ; attempt++ {
		err := c.kube.CoreV1().Secrets(name).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
		left, lerr := c.kube.CoreV1().Secrets(name).List(ctx, one)
		if err == nil && lerr == nil && len(left.Items) == 0 {
			break
		}
		if attempt == 5 {
			progress("giving up deleting the Secrets of namespace %s: %v %v", name, err, lerr)
			break
		}
	}
	_ = c.kube.RbacV1().RoleBindings(name).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	_ = c.kube.RbacV1().Roles(name).DeleteCollection(ctx, metav1.DeleteOptions{}, all)
	_ = c.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
}

// ---------------------------------------------------------------------------------------------
// The driver process, as test/e2e/framework/harness.go runs it, with its metrics endpoint on.

type benchDriver struct {
	*framework.DriverProc
	metricsURL string
}

// startDriver starts the driver binary (test/e2e/framework/harness.go) with the settings of a deployment
// (deploy.yaml: --v=2, default TTLs, QPS and cache sizes), its metrics on a free loopback port,
// and extra flags (later flags win). It is stopped when b ends, or earlier by cleanup.
func (c *benchCluster) startDriver(b *testing.B, extra ...string) *benchDriver {
	b.Helper()
	addr := framework.FreeLocalAddr(b)
	d := &benchDriver{
		DriverProc: c.env.StartDriver(b, framework.AsDeployed(), framework.WithArgs(append([]string{"--health-address=" + addr, "--v=2"}, extra...)...)),
		metricsURL: "http://" + addr + "/metrics",
	}
	d.AbortedBackoff = 5 * time.Millisecond
	framework.Eventually(b, 30*time.Second, func() error { _, err := framework.ScrapeMetrics(d.metricsURL); return err })
	return d
}

// shareVolume makes a pod dir as the kubelet does for a volume of one SharedSecret.
func (d *benchDriver) shareVolume(sa nsSA, share string) *framework.TestVolume {
	return d.Volume(sa.ns, sa.sa, map[string]string{framework.AttrSharedSecret: share})
}

// removePodDir removes an unpublished volume's pod dir, as the kubelet does when the pod is gone.
func (d *benchDriver) removePodDir(v *framework.TestVolume) {
	os.RemoveAll(filepath.Join(d.KubeletRoot, "pods", v.PodUID))
}

// publishAndUnpublish times one NodePublishVolume as the kubelet sees it (over the socket) and
// the CPU time the driver spent meanwhile, then unpublishes the volume, untimed. The CPU time
// does not depend on what else the machine runs; the wall time does.
func (d *benchDriver) publishAndUnpublish(b *testing.B, v *framework.TestVolume) (wall, cpu time.Duration) {
	cpu0 := d.cpuTime(b)
	start := time.Now()
	err := d.Publish(v)
	wall = time.Since(start)
	cpu = d.cpuTime(b) - cpu0
	if err != nil {
		b.Fatalf("publish: %v", err)
	}
	if err := d.Unpublish(v); err != nil {
		b.Fatalf("unpublish: %v", err)
	}
	d.removePodDir(v)
	return wall, cpu
}

// cpuTime is the CPU time all the driver's threads have run, from the scheduler's
// nanosecond accounting (/proc/PID/task/TID/schedstat).
func (d *benchDriver) cpuTime(b *testing.B) time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", d.Cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // a thread that just exited
		}
		f := strings.Fields(string(raw))
		if len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// publishConcurrently publishes the volumes with `callers` concurrent calls.
func (d *benchDriver) publishConcurrently(b *testing.B, vols []*framework.TestVolume) {
	if err := parallel(len(vols), callers, func(i int) error { return d.Publish(vols[i]) }); err != nil {
		b.Fatalf("publish: %v", err)
	}
}

// unpublishConcurrently unpublishes the volumes with `callers` concurrent calls and removes their pod dirs.
func (d *benchDriver) unpublishConcurrently(b *testing.B, vols []*framework.TestVolume) {
	err := parallel(len(vols), callers, func(i int) error {
		if err := d.Unpublish(vols[i]); err != nil {
			return err
		}
		d.removePodDir(vols[i])
		return nil
	})
	if err != nil {
		b.Fatalf("unpublish: %v", err)
	}
}

func (d *benchDriver) scrape(b *testing.B) framework.ScrapedMetrics {
	m, err := framework.ScrapeMetrics(d.metricsURL)
	if err != nil {
		b.Fatalf("reading the driver's metrics: %v", err)
	}
	return m
}

// ---------------------------------------------------------------------------------------------
// Counting API requests

// apiCounts are the requests that matter for the driver's API load.
type apiCounts struct {
	sar, secretGets, all float64
}

func (a apiCounts) sub(o apiCounts) apiCounts {
	return apiCounts{a.sar - o.sar, a.secretGets - o.secretGets, a.all - o.all}
}

// driverRequests reads the driver's own count of its requests.
func driverRequests(m framework.ScrapedMetrics) apiCounts {
	const name = framework.MetricAPIRequests
	return apiCounts{
		sar:        m.Sum(name, map[string]string{"verb": "create", "resource": "subjectaccessreviews"}),
		secretGets: m.Sum(name, map[string]string{"verb": "get", "resource": "secrets"}),
		all:        m.Sum(name, nil),
	}
}

// apiserverRequests reads the API server's count of every client's requests.
func (c *benchCluster) apiserverRequests(b *testing.B) apiCounts {
	raw, err := c.env.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("reading the API server's metrics: %v", err)
	}
	m, err := framework.ParseMetrics(bytes.NewReader(raw))
	if err != nil {
		b.Fatalf("parsing the API server's metrics: %v", err)
	}
	const name = "apiserver_request_total"
	return apiCounts{
		sar:        m.Sum(name, map[string]string{"verb": "POST", "resource": "subjectaccessreviews"}),
		secretGets: m.Sum(name, map[string]string{"verb": "GET", "resource": "secrets"}),
		all:        m.Sum(name, nil),
	}
}

// apiWindow counts requests between its start and end, at the API server, in the driver, and
// in the audit log when there is one.
type apiWindow struct {
	c                 *benchCluster
	d                 *benchDriver
	apiserver, driver apiCounts
	audit             *apiCounts           // nil without an audit log
	mark              *framework.AuditMark // nil without an audit log
}

func (c *benchCluster) startWindow(b *testing.B, d *benchDriver) *apiWindow {
	return c.startWindowFrom(b, d, d.scrape(b))
}

func (c *benchCluster) startWindowFrom(b *testing.B, d *benchDriver, m framework.ScrapedMetrics) *apiWindow {
	w := &apiWindow{c: c, d: d, driver: driverRequests(m)}
	if p := os.Getenv("SRCSI_AUDIT_LOG"); p != "" {
		m, err := framework.MarkAudit(p)
		if err != nil {
			b.Fatal(err)
		}
		w.mark = &m
	}
	w.apiserver = c.apiserverRequests(b)
	return w
}

func (w *apiWindow) end(b *testing.B) apiWindow {
	return w.endWith(b, w.d.scrape(b))
}

// endWith closes the window; the result holds the differences.
func (w *apiWindow) endWith(b *testing.B, m framework.ScrapedMetrics) apiWindow {
	as := w.c.apiserverRequests(b)
	r := apiWindow{apiserver: as.sub(w.apiserver), driver: driverRequests(m).sub(w.driver)}
	if w.mark != nil {
		a, err := auditCounts(*w.mark)
		if err != nil {
			b.Fatalf("audit log: %v", err)
		}
		r.audit = &a
	}
	return r
}

// report reports the window's counts. The API server's own (every client's requests, so the
// scenario makes sure nothing else runs) is the figure; the others corroborate it.
func (w apiWindow) report(b *testing.B, prefix string) {
	b.ReportMetric(w.apiserver.sar, prefix+"sar-apiserver")
	b.ReportMetric(w.apiserver.secretGets, prefix+"secret-get-apiserver")
	b.ReportMetric(w.driver.sar, prefix+"sar-driver")
	b.ReportMetric(w.driver.secretGets, prefix+"secret-get-driver")
	b.ReportMetric(w.driver.all, prefix+"requests-driver")
	if w.audit != nil {
		b.ReportMetric(w.audit.sar, prefix+"sar-audit")
		b.ReportMetric(w.audit.secretGets, prefix+"secret-get-audit")
	}
}

// auditCounts counts, in the audit log since mark, the completed requests sent with the
// driver's user agent (main.go sets it to shared-resource-csi/<version>).
func auditCounts(mark framework.AuditMark) (apiCounts, error) {
	c, err := mark.Requests(func(ev framework.AuditEvent) bool {
		return ev.Stage == "ResponseComplete" && strings.HasPrefix(ev.UserAgent, "shared-resource-csi/")
	})
	a := apiCounts{sar: float64(c["create/subjectaccessreviews"]), secretGets: float64(c["get/secrets"])}
	for _, n := range c {
		a.all += float64(n)
	}
	return a, err
}

// ---------------------------------------------------------------------------------------------
// Small helpers

// parallel runs f(0..n-1) on `workers` goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n)) // stop handing out work
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// percentile is the nearest-rank percentile of the samples.
func percentile[T cmp.Ordered](samples []T, p float64) T {
	if len(samples) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(rank, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(bytes float64) float64 { return bytes / (1 << 20) }

// progress tells whoever watches `make bench` what a long step is doing (stderr: the results on
// stdout stay machine-readable).
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
