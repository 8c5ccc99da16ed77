package bench

// BenchmarkFleet: what many nodes cost one API server. K driver processes, each a node of its
// own (node id, kubelet root, socket, state dir, metrics port), run against the one
// kube-apiserver + etcd of `make bench`, with deploy.yaml's node plugin flags (status is the
// status controller's, not the nodes': none runs here) but
// a 10 s relist interval, so that several cycles fit in a minute: every rate scales with
// 1/interval (docs/scale.md turns the figures into a cost model).
//
// Everything is measured at the API server: its audit log (each of the drivers' requests, by
// their user agent, with when it was received and answered) and its CPU time (/proc).
//
// One run, in order:
//   - one-node/...: one driver with 1000 volumes, all on one share, then over 100 shares used by
//     10 pods each (the enhancement's two scale tests on one node): publish time, one relist
//     cycle's requests and wall time (--relist-spread=0: the cycle's own cost), memory.
//   - nodes=K: K drivers, each with M volumes (at the last K the fleet holds 100 shares x 10
//     pods), K growing; the steady load over several cycles: requests per node per cycle by
//     verb and resource, API server CPU per 1,000 requests, SAR latency, peak 1 s rate vs mean.
//   - rollout=jittered: every driver killed and all started again in the same moment; the
//     peak 1 s rate after it against the steady mean. (The figure before the jitter, when every
//     driver ran its relist at start-up and every interval on the dot, is recorded in
//     docs/scale.md: 8.51 at 50 nodes.)
//   - fleet/...: the two scale tests again, their 1000 volumes spread over the K nodes.
//
// The fleet runs once per `make bench` (hack/bench.sh gives it -count 1): one run is several
// minutes. BENCH_SMOKE=1 shrinks it to a few nodes (CI).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fleetScale is the size of the fleet run.
type fleetScale struct {
	steps    []int         // K of the steady runs, growing; the last is the fleet
	perNode  int           // volumes per node in the steady runs
	interval time.Duration // --relist-interval of every driver
	cycles   int           // relist intervals per steady window
	volumes  int           // the scale tests' volumes: on one node, and over the fleet
	idle     time.Duration // how long the API server's idle CPU is measured
}

func fleetScaleFor() fleetScale {
	if os.Getenv("BENCH_SMOKE") != "" {
		return fleetScale{steps: []int{2, 4}, perNode: 10, interval: 4 * time.Second, cycles: 2, volumes: 40, idle: 2 * time.Second}
	}
	// 50 nodes: each driver process idles at about 30 MiB and a few ms of CPU per cycle, so 50
	// of them fit beside the API server and etcd on 2 cores and 24 GiB; the API server stays
	// below one core (see the apiserver-cores figure), so what it does per request is its own
	// cost, not a queue for a core.
	return fleetScale{steps: []int{10, 25, 50}, perNode: 20, interval: 10 * time.Second, cycles: 3, volumes: 1000, idle: 10 * time.Second}
}

// The scale tests' two layouts of volume g: all on share 0, or 100 shares x 10 pods (share
// g/10), each pod one of 10 service accounts.
const fleetSAs = 10

func allOnShareZero(f *fleet) func(g int) (nsSA, string) {
	return func(g int) (nsSA, string) { return f.sas[g%len(f.sas)], f.shares[0] }
}

func sharesOfTen(f *fleet) func(g int) (nsSA, string) {
	return func(g int) (nsSA, string) { return f.sas[g%len(f.sas)], f.shares[g/10] }
}

func BenchmarkFleet(b *testing.B) {
	c := newBenchCluster(b)
	sc := fleetScaleFor()
	f := c.fleet(b, "fleet", sc.volumes/10, 2, fleetSAs/2, 1<<10)
	api := c.findProcesses(b)
	idle := api.idleCPU(b, sc.idle)
	interval := "--relist-interval=" + sc.interval.String()

	for _, layout := range []struct {
		name string
		vol  func(int) (nsSA, string)
	}{{"shares=1", allOnShareZero(f)}, {"shares=100x10", sharesOfTen(f)}} {
		b.Run("one-node/"+layout.name, func(b *testing.B) {
			benchOneNode(b, c, sc, layout.vol, interval)
		})
	}

	// The nodes live across the sub-benchmarks below, so they are started, changed and measured
	// here, by the top-level benchmark; each sub-benchmark only reports what was measured.
	fl := &fleetNodes{c: c, api: api, idle: idle, sc: sc}
	var steady fleetLoad
	for _, k := range sc.steps {
		added := fl.launch(b, k-len(fl.nodes), interval)
		fl.publish(b, added, sharesOfTen(f), sc.perNode)
		time.Sleep(sc.interval) // every new node through its first cycle
		steady = fl.measure(b, time.Duration(sc.cycles)*sc.interval)
		b.Run(fmt.Sprintf("nodes=%d", k), func(b *testing.B) { steady.report(b, fl) })
	}

	jittered := fl.rollout(b, c.env.Binary, interval, "--relist-spread=0.5")
	b.Run("rollout=jittered", func(b *testing.B) { jittered.report(b, steady) })

	// The scale tests over the fleet.
	fl.unpublishAll(b)
	for _, layout := range []struct {
		name string
		vol  func(int) (nsSA, string)
	}{{"shares=1", allOnShareZero(f)}, {"shares=100x10", sharesOfTen(f)}} {
		wall := fl.publish(b, fl.nodes, layout.vol, sc.volumes/len(fl.nodes))
		time.Sleep(sc.interval + sc.interval/10) // every node through a cycle over them
		load := fl.measure(b, sc.interval)
		fl.unpublishAll(b)
		b.Run("fleet/"+layout.name, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(load.nodes), "nodes")
			b.ReportMetric(wall.Seconds(), "publish-wall-s")
			b.ReportMetric(float64(sc.volumes)/wall.Seconds(), "publishes/s")
			b.ReportMetric(load.perCycle("create/subjectaccessreviews"), "sar/node/cycle")
			b.ReportMetric(load.perCycle("get/secrets"), "secret-get/node/cycle")
			b.ReportMetric(load.count("create/subjectaccessreviews")*sc.interval.Seconds()/load.dur.Seconds(), "sar/interval")
			b.ReportMetric(load.count("get/secrets")*sc.interval.Seconds()/load.dur.Seconds(), "secret-get/interval")
			b.ReportMetric(load.cycleSeconds, "cycle-s")
			b.ReportMetric(load.rssMiB, "rss-MiB")
		})
	}
}

// benchOneNode: one driver, the scale test's volumes on it, one relist cycle measured.
func benchOneNode(b *testing.B, c *benchCluster, sc fleetScale, layout func(int) (nsSA, string), interval string) {
	d := c.startDriver(b, interval, "--relist-spread=0")
	defer d.Cleanup()
	vols := make([]*framework.TestVolume, sc.volumes)
	keys, sources := map[nsSA]map[string]bool{}, map[string]bool{}
	for g := range vols {
		sa, share := layout(g)
		vols[g] = d.shareVolume(sa, share)
		if keys[sa] == nil {
			keys[sa] = map[string]bool{}
		}
		keys[sa][share], sources[share] = true, true
	}
	start := time.Now()
	d.publishConcurrently(b, vols)
	wall := time.Since(start)
	cycle, api := d.measureCycle(b, c)
	anon, file := d.rssParts(b)
	d.unpublishConcurrently(b, vols)
	distinct := 0
	for _, shares := range keys {
		distinct += len(shares)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(wall.Seconds(), "publish-wall-s")
	b.ReportMetric(float64(len(vols))/wall.Seconds(), "publishes/s")
	b.ReportMetric(cycle.Seconds(), "cycle-s")
	b.ReportMetric(float64(distinct), "distinct-keys")
	b.ReportMetric(float64(len(sources)), "distinct-sources")
	b.ReportMetric(mib(anon+file), "rss-MiB")
	b.ReportMetric(mib(anon), "rss-anon-MiB")
	api.report(b, "")
}

// ---------------------------------------------------------------------------------------------
// The nodes

type fleetNode struct {
	*benchDriver
	index int // the node's number: its volumes are index*perNode... in the steady layout
	vols  []*framework.TestVolume
}

type fleetNodes struct {
	c     *benchCluster
	api   apiProcesses
	idle  float64 // the API server's CPU seconds per second with no driver running
	sc    fleetScale
	nodes []*fleetNode
	ports map[string]bool
}

// launch starts n more drivers, all at once, and waits until each is ready.
func (fl *fleetNodes) launch(b *testing.B, n int, extra ...string) []*fleetNode {
	b.Helper()
	if fl.ports == nil {
		fl.ports = map[string]bool{}
	}
	var added []*fleetNode
	for range n {
		addr := framework.FreeLocalAddr(b)
		for fl.ports[addr] {
			addr = framework.FreeLocalAddr(b)
		}
		fl.ports[addr] = true
		i := len(fl.nodes)
		args := append([]string{"--health-address=" + addr, "--v=2", fmt.Sprintf("--node-id=fleet-%03d", i)}, extra...)
		p := fl.c.env.PrepareDriver(b, framework.AsDeployed(), framework.WithArgs(args...))
		node := &fleetNode{benchDriver: &benchDriver{DriverProc: p, metricsURL: "http://" + addr + "/metrics"}, index: i}
		node.AbortedBackoff = 5 * time.Millisecond
		fl.nodes, added = append(fl.nodes, node), append(added, node)
	}
	for _, node := range added {
		node.Launch()
	}
	fl.waitReady(b, added)
	return added
}

func (fl *fleetNodes) waitReady(b *testing.B, nodes []*fleetNode) {
	for _, node := range nodes {
		node.WaitReady()
		framework.Eventually(b, 30*time.Second, func() error { _, err := framework.ScrapeMetrics(node.metricsURL); return err })
	}
}

// restartTogether kills every driver (SIGKILL: their volumes stay mounted) and starts them all
// again, with binary and extra flags, in one moment; it returns when they were launched.
func (fl *fleetNodes) restartTogether(b *testing.B, binary string, extra ...string) (launched time.Time, spread time.Duration) {
	b.Helper()
	for _, node := range fl.nodes {
		node.Kill()
		node.Binary = binary
		node.Args = append(node.Args, extra...)
	}
	launched = time.Now()
	for _, node := range fl.nodes {
		node.Launch()
	}
	spread = time.Since(launched)
	fl.waitReady(b, fl.nodes)
	return launched, spread
}

// publish gives each node perNode volumes, node i's being volumes i*perNode... of layout, and
// publishes them all, every node's kubelet making `callers` concurrent calls; it returns the
// wall time until the last publish returned.
func (fl *fleetNodes) publish(b *testing.B, nodes []*fleetNode, layout func(int) (nsSA, string), perNode int) time.Duration {
	b.Helper()
	type job struct {
		node *fleetNode
		vol  *framework.TestVolume
	}
	var jobs []job
	for _, node := range nodes {
		for i := range perNode {
			sa, share := layout(node.index*perNode + i)
			v := node.shareVolume(sa, share)
			node.vols = append(node.vols, v)
			jobs = append(jobs, job{node, v})
		}
	}
	start := time.Now()
	if err := parallel(len(jobs), callers*len(nodes), func(i int) error { return jobs[i].node.Publish(jobs[i].vol) }); err != nil {
		b.Fatalf("publish: %v", err)
	}
	return time.Since(start)
}

func (fl *fleetNodes) unpublishAll(b *testing.B) {
	b.Helper()
	type job struct {
		node *fleetNode
		vol  *framework.TestVolume
	}
	var jobs []job
	for _, node := range fl.nodes {
		for _, v := range node.vols {
			jobs = append(jobs, job{node, v})
		}
		node.vols = nil
	}
	err := parallel(len(jobs), callers*len(fl.nodes), func(i int) error {
		if err := jobs[i].node.Unpublish(jobs[i].vol); err != nil {
			return err
		}
		jobs[i].node.removePodDir(jobs[i].vol)
		return nil
	})
	if err != nil {
		b.Fatalf("unpublish: %v", err)
	}
}

// rolloutLoad is what a simultaneous restart of every node did.
type rolloutLoad struct {
	after  fleetLoad     // the two intervals from the restart on
	spread time.Duration // from the first node's launch to the last's
}

// rollout restarts every driver together, with binary and extra flags, and measures the two
// intervals after it.
func (fl *fleetNodes) rollout(b *testing.B, binary string, extra ...string) rolloutLoad {
	b.Helper()
	w := fl.startWindow(b)
	_, spread := fl.restartTogether(b, binary, extra...)
	time.Sleep(time.Until(w.start.Add(2 * fl.sc.interval)))
	return rolloutLoad{after: w.end(b), spread: spread}
}

// report gives the peak 1 s rate after the restart against the steady mean before it.
func (r rolloutLoad) report(b *testing.B, steady fleetLoad) {
	steadyAll, steadyRelist := steady.all/steady.dur.Seconds(), steady.relist/steady.dur.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(r.after.nodes), "nodes")
	b.ReportMetric(ms(r.spread), "launch-spread-ms")
	b.ReportMetric(r.after.peakAll, "peak-1s")
	b.ReportMetric(steadyAll, "steady-mean/s")
	b.ReportMetric(r.after.peakAll/steadyAll, "peak/mean")
	b.ReportMetric(r.after.peakRelist, "relist-peak-1s")
	b.ReportMetric(steadyRelist, "steady-relist-mean/s")
	b.ReportMetric(r.after.peakRelist/steadyRelist, "relist-peak/mean")
	b.ReportMetric(r.after.startup, "startup-requests/node")
}

// ---------------------------------------------------------------------------------------------
// Measuring at the API server

// fleetWindow is a measurement in progress.
type fleetWindow struct {
	fl      *fleetNodes
	start   time.Time
	audit   framework.AuditMark
	cpu0    apiCPU
	cycles0 []float64
	sums0   []float64
}

// fleetLoad is what the drivers asked of the API server in a window, and what it cost it.
type fleetLoad struct {
	nodes       int
	dur         time.Duration
	byKind      map[string]float64 // "verb/resource" -> requests
	all, relist float64            // relist: SubjectAccessReviews and GETs of sources
	// startup: requests a driver makes once per start (LIST and WATCH of the share CRDs), per node
	startup             float64
	peakAll, peakRelist float64 // the most requests received in any 1 s
	sarLatency          []time.Duration
	cpu                 apiCPU
	cycles              float64 // relist cycles the nodes completed in the window
	cycleSeconds        float64 // their mean wall time
	rssMiB              float64 // the median node's
}

func (fl *fleetNodes) startWindow(b *testing.B) *fleetWindow {
	w := &fleetWindow{fl: fl}
	for _, node := range fl.nodes {
		m := node.scrape(b)
		w.cycles0 = append(w.cycles0, m.Sum("sharedresource_relist_cycle_duration_seconds_count", nil))
		w.sums0 = append(w.sums0, m.Sum("sharedresource_relist_cycle_duration_seconds_sum", nil))
	}
	w.audit = markFleetAudit(b)
	w.cpu0 = fl.api.cpu(b)
	w.start = time.Now()
	return w
}

// measure is a window of length d over the fleet as it runs.
func (fl *fleetNodes) measure(b *testing.B, d time.Duration) fleetLoad {
	w := fl.startWindow(b)
	time.Sleep(d)
	return w.end(b)
}

func (w *fleetWindow) end(b *testing.B) fleetLoad {
	end := time.Now()
	cpu := w.fl.api.cpu(b).sub(w.cpu0)
	load := fleetLoad{nodes: len(w.fl.nodes), dur: end.Sub(w.start), cpu: cpu, byKind: map[string]float64{}}
	var cycleSum float64
	var rss []float64
	for i, node := range w.fl.nodes {
		m := node.scrape(b)
		if i < len(w.cycles0) {
			load.cycles += m.Sum("sharedresource_relist_cycle_duration_seconds_count", nil) - w.cycles0[i]
			cycleSum += m.Sum("sharedresource_relist_cycle_duration_seconds_sum", nil) - w.sums0[i]
		}
		anon, file := node.rssParts(b)
		rss = append(rss, mib(anon+file))
	}
	if load.cycles > 0 {
		load.cycleSeconds = cycleSum / load.cycles
	}
	load.rssMiB = percentile(rss, 50)
	// Requests received before end are in the log once answered: moments later.
	time.Sleep(time.Second)
	// Each request once, when it was answered (a watch: when its response started).
	events, err := w.audit.Events(func(ev framework.AuditEvent) bool {
		return ev.Stage == "ResponseComplete" || (ev.Stage == "ResponseStarted" && ev.Verb == "watch")
	})
	if err != nil {
		b.Fatalf("audit log: %v", err)
	}
	var all, relist []time.Time
	for _, ev := range events {
		if !strings.HasPrefix(ev.UserAgent, "shared-resource-csi/") ||
			ev.RequestReceivedTimestamp.Before(w.start) || !ev.RequestReceivedTimestamp.Before(end) {
			continue
		}
		kind := ev.Verb + "/" + ev.ObjectRef.Resource
		load.byKind[kind]++
		all = append(all, ev.RequestReceivedTimestamp)
		switch kind {
		case "create/subjectaccessreviews":
			relist = append(relist, ev.RequestReceivedTimestamp)
			load.sarLatency = append(load.sarLatency, ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp))
		case "get/secrets", "get/configmaps":
			relist = append(relist, ev.RequestReceivedTimestamp)
		case "list/sharedsecrets", "list/sharedconfigmaps", "watch/sharedsecrets", "watch/sharedconfigmaps":
			load.startup++
		}
	}
	load.startup /= float64(load.nodes)
	load.all, load.relist = float64(len(all)), float64(len(relist))
	load.peakAll, load.peakRelist = peakPerSecond(all), peakPerSecond(relist)
	return load
}

func (l fleetLoad) count(kind string) float64 { return l.byKind[kind] }

// perCycle is kind's requests per node per relist cycle.
func (l fleetLoad) perCycle(kind string) float64 {
	if l.cycles == 0 {
		return 0
	}
	return l.byKind[kind] / l.cycles
}

// report reports a steady window.
func (l fleetLoad) report(b *testing.B, fl *fleetNodes) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(l.nodes), "nodes")
	b.ReportMetric(l.cycles/float64(l.nodes), "cycles/node")
	b.ReportMetric(l.all/l.cycles, "requests/node/cycle")
	b.ReportMetric(l.relist/l.cycles, "relist-requests/node/cycle")
	for kind, n := range l.byKind {
		b.ReportMetric(n/l.cycles, strings.ReplaceAll(kind, "/", "-")+"/node/cycle")
	}
	mean := l.all / l.dur.Seconds()
	b.ReportMetric(mean, "requests/s")
	b.ReportMetric(l.peakAll, "peak-1s")
	b.ReportMetric(l.peakAll/mean, "peak/mean")
	b.ReportMetric(l.peakRelist/(l.relist/l.dur.Seconds()), "relist-peak/mean")
	apiserver := l.cpu.apiserver.Seconds()
	b.ReportMetric(apiserver/l.dur.Seconds(), "apiserver-cores")
	b.ReportMetric(1000*apiserver/l.all, "apiserver-cpu-s/1000req")
	b.ReportMetric(1000*(apiserver-fl.idle*l.dur.Seconds())/l.all, "apiserver-net-cpu-s/1000req")
	b.ReportMetric(1000*l.cpu.etcd.Seconds()/l.all, "etcd-cpu-s/1000req")
	b.ReportMetric(ms(percentile(l.sarLatency, 50)), "sar-p50-ms")
	b.ReportMetric(ms(percentile(l.sarLatency, 99)), "sar-p99-ms")
	b.ReportMetric(l.rssMiB, "rss-MiB")
}

// peakPerSecond is the most of the times that fall in any window of 1 s.
func peakPerSecond(times []time.Time) float64 {
	s := slices.Clone(times)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	peak, i := 0, 0
	for j := range s {
		for s[j].Sub(s[i]) >= time.Second {
			i++
		}
		peak = max(peak, j-i+1)
	}
	return float64(peak)
}

func markFleetAudit(b *testing.B) framework.AuditMark {
	p := os.Getenv("SRCSI_AUDIT_LOG")
	if p == "" {
		b.Fatal("the fleet benchmark measures at the API server's audit log: $SRCSI_AUDIT_LOG is not set (make bench sets it)")
	}
	m, err := framework.MarkAudit(p)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// apiProcesses are the control plane's processes, for their CPU time.
type apiProcesses struct{ apiserver, etcd int }

type apiCPU struct{ apiserver, etcd time.Duration }

func (a apiCPU) sub(o apiCPU) apiCPU { return apiCPU{a.apiserver - o.apiserver, a.etcd - o.etcd} }

func (c *benchCluster) findProcesses(b *testing.B) apiProcesses {
	var p apiProcesses
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, d := range dirs {
		comm, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		switch strings.TrimSpace(string(comm)) {
		case "kube-apiserver":
			p.apiserver = pid
		case "etcd":
			p.etcd = pid
		}
	}
	if p.apiserver == 0 || p.etcd == 0 {
		b.Fatalf("kube-apiserver or etcd not found in /proc (found %+v)", p)
	}
	return p
}

func (p apiProcesses) cpu(b *testing.B) apiCPU {
	return apiCPU{apiserver: processCPU(b, p.apiserver), etcd: processCPU(b, p.etcd)}
}

// idleCPU is the API server's CPU seconds per second over d with no driver running.
func (p apiProcesses) idleCPU(b *testing.B, d time.Duration) float64 {
	before := p.cpu(b)
	time.Sleep(d)
	return p.cpu(b).sub(before).apiserver.Seconds() / d.Seconds()
}

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// processCPU is a process's user + system CPU time (/proc/PID/stat: utime, stime).
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces), from field 3 (state) on.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}
