// Command benchtable turns the output of the driver's benchmarks (test/bench/bench_test.go, run by
// hack/bench.sh with -count=N) into BENCHMARKS.md: every figure the benchmarks measure as the
// median of the N runs with their min and max, the floors beside the figures they bound (what the
// API server or the kernel alone takes for the same work), the machine, the date and how to
// reproduce. Standard library only.
//
//	benchtable -in _output/bench/raw.txt -out BENCHMARKS.md -commit $(git rev-parse --short HEAD) -wall 14m
//
// A figure whose benchmark did not run (a smoke run, a filtered run) shows as "not run".
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	in := flag.String("in", "-", "benchmark output (go test -bench, text); - for stdin")
	out := flag.String("out", "-", "Markdown file to write; - for stdout")
	commit := flag.String("commit", "", "the commit measured")
	wall := flag.String("wall", "", "wall time of the whole run, for the record")
	command := flag.String("command", "make bench", "the command that produced the output")
	load := flag.String("load", "", "the machine's load averages around the run (/proc/loadavg), for the record")
	smoke := flag.Bool("smoke", false, "the output is from a smoke run (BENCH_SMOKE=1): scenarios shrunk, figures not comparable")
	platform := flag.String("platform", "", "what the benchmarks ran against (the API server's and etcd's versions), for the record and the next run's comparison")
	baselineFile := flag.String("baseline", "", "the BENCHMARKS.md this run replaces: its figures are shown beside this run's (\"Against the previous run\")")
	nodes := flag.String("nodes", "", "the three real nodes' API requests against the model (TestNodesAPIRequestsMatchTheModel's line, written by `make test`); shown beside the fleet when the file exists")
	flag.Parse()
	var threeNodes string
	if *nodes != "" {
		if b, err := os.ReadFile(*nodes); err == nil {
			threeNodes = strings.TrimSpace(string(b))
			if st, err := os.Stat(*nodes); err == nil {
				threeNodes += " (measured " + st.ModTime().UTC().Format("2006-01-02 15:04 MST") + ")"
			}
		}
	}

	var r io.Reader = os.Stdin
	measured := time.Now() // when the run ended: the input's modification time, when it is a file
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		r = f
		if st, err := f.Stat(); err == nil {
			measured = st.ModTime()
		}
	}
	res, err := parse(r)
	if err != nil {
		fatal(err)
	}
	if len(res.order) == 0 {
		fatal(fmt.Errorf("no benchmark results in the input"))
	}
	var w io.Writer = os.Stdout
	var outFile *os.File
	if *out != "-" {
		if outFile, err = os.Create(*out); err != nil {
			fatal(err)
		}
		w = outFile
	}
	bw := bufio.NewWriter(w)
	var prev *baseline
	if *baselineFile != "" {
		if prev, err = readBaseline(*baselineFile); err != nil {
			fatal(err)
		}
	}
	render(bw, res, meta{commit: *commit, wall: *wall, command: *command, load: *load, smoke: *smoke, date: measured, threeNodes: threeNodes,
		platform: *platform, baseline: prev})
	if err := bw.Flush(); err != nil {
		fatal(err)
	}
	// A written file's Close can report what its writes could not (a full disk, say).
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchtable:", err)
	os.Exit(1)
}

// results holds, per benchmark (name without the -GOMAXPROCS suffix) and unit, one value per
// run, in run order: the values of one run line up across units.
type results struct {
	vals  map[string]map[string][]float64
	order []string // benchmarks in order of appearance
	cpu   string   // from the "cpu:" header of go test
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

func parse(r io.Reader) (*results, error) {
	res := &results{vals: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			res.cpu = strings.TrimSpace(v)
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, fields := m[1], strings.Fields(m[3])
		if len(fields)%2 != 0 {
			return nil, fmt.Errorf("odd number of value/unit fields in %q", line)
		}
		if res.vals[name] == nil {
			res.vals[name] = map[string][]float64{}
			res.order = append(res.order, name)
		}
		for i := 0; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("value %q in %q: %v", fields[i], line, err)
			}
			res.vals[name][fields[i+1]] = append(res.vals[name][fields[i+1]], v)
		}
	}
	return res, sc.Err()
}

// series returns the per-run values of a metric, nil if it did not run.
func (r *results) series(bench, unit string) []float64 { return r.vals[bench][unit] }

// derived combines two metrics of one benchmark run by run.
func (r *results) derived(bench, a, b string, f func(a, b float64) float64) []float64 {
	return combine(r.series(bench, a), r.series(bench, b), f)
}

// combine is f(x[i], y[i]), run by run; nil unless both have the same runs.
func combine(x, y []float64, f func(a, b float64) float64) []float64 {
	if len(x) == 0 || len(x) != len(y) {
		return nil
	}
	out := make([]float64, len(x))
	for i := range x {
		out[i] = f(x[i], y[i])
	}
	return out
}

// apiFloor is, run by run, the two requests of a cold publish (SAR + GET) as the benchmark
// itself times them: their medians, summed.
func apiFloor(bench string) func(*results) []float64 {
	return func(r *results) []float64 {
		return r.derived(bench, "floor-sar-p50-ms", "floor-get-p50-ms", func(a, b float64) float64 { return a + b })
	}
}

// warmFloor is, run by run, what a warm publish cannot take less than: the kernel's work for
// its mounts and files, and a CSI call that does nothing, as the benchmark times them.
func warmFloor(bench string) func(*results) []float64 {
	return func(r *results) []float64 {
		return r.derived(bench, "floor-syscalls-p50-ms", "floor-csi-call-p50-ms", func(a, b float64) float64 { return a + b })
	}
}

// divide is x[i] / y[i], run by run; nil unless both have the same runs.
func divide(x, y []float64) []float64 {
	return combine(x, y, func(a, b float64) float64 { return a / b })
}

type stats struct{ median, min, max float64 }

func summarize(v []float64) stats {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return stats{med, s[0], s[n-1]}
}

// figure is one row of the report: a series of per-run values and how to print them. Where a
// floor bounds a figure (what the API server or the kernel alone takes), the floor is a row
// beside it.
type figure struct {
	what   string
	values func(*results) []float64
	format string // for one value, e.g. "%.2f ms"
}

func metric(bench, unit string) func(*results) []float64 {
	return func(r *results) []float64 { return r.series(bench, unit) }
}

// atServer is a request count at the API server: from its audit log (the requests sent with the
// driver's user agent) when the run had one, else apiserver_request_total (every client's
// requests in the window, which the scenario keeps free of other clients').
func atServer(bench, kind string) func(*results) []float64 {
	return func(r *results) []float64 {
		if v := r.series(bench, kind+"-audit"); len(v) > 0 {
			return v
		}
		return r.series(bench, kind+"-apiserver")
	}
}

type section struct {
	title string
	intro string
	rows  []figure
}

// The benchmarks' names and units, as test/bench/bench_test.go reports them at full scale.
const (
	latency    = "BenchmarkPublishLatency/size="
	throughput = "BenchmarkPublishThroughput/volumes="
	relist     = "BenchmarkRelistCycle/volumes=1000"
	relistFast = "BenchmarkRelistCycle/volumes=1000,kube-api-qps=1000"
	memory     = "BenchmarkMemory/secrets="
	leaks      = "BenchmarkLeaks/cycles=1000"
	tmpfsWrite = "BenchmarkTmpfsWrite/huge="
	fleetNodes = "BenchmarkFleet/nodes="
	rollout    = "BenchmarkFleet/rollout="
	oneNode    = "BenchmarkFleet/one-node/shares="
	fleetScale = "BenchmarkFleet/fleet/shares="
)

// fleetSteps are the fleet benchmark's node counts at full scale; the last is the fleet.
var fleetSteps = []string{"10", "25", "50"}

func sections() []section {
	var lat []figure
	for _, size := range []string{"1KiB", "64KiB", "1MiB"} {
		b := latency + size
		lat = append(lat,
			figure{what: "cold p50, " + size, values: metric(b, "cold-p50-ms"), format: "%.2f ms"},
			figure{what: "cold p99, " + size, values: metric(b, "cold-p99-ms"), format: "%.2f ms"},
			figure{what: "  the API server's floor for a cold publish (its SAR and GET, asked by the benchmark), " + size,
				values: apiFloor(b), format: "%.2f ms"},
			figure{what: "  cold p50 / that floor, " + size, values: func(r *results) []float64 {
				return divide(r.series(b, "cold-p50-ms"), apiFloor(b)(r))
			}, format: "%.2f×"},
			figure{what: "warm p50, " + size, values: metric(b, "warm-p50-ms"), format: "%.2f ms"},
			figure{what: "warm p99, " + size, values: metric(b, "warm-p99-ms"), format: "%.2f ms"},
			figure{what: "  the kernel's floor for a warm publish (mkdir, tmpfs, the files, mkdir, bind, remount read-only), " + size,
				values: metric(b, "floor-syscalls-p50-ms"), format: "%.3f ms"},
			figure{what: "  warm p50 / that floor, " + size, values: func(r *results) []float64 {
				return r.derived(b, "warm-p50-ms", "floor-syscalls-p50-ms", func(a, b float64) float64 { return a / b })
			}, format: "%.1f×"},
			figure{what: "  a CSI call's floor (NodeGetCapabilities, which does nothing, on the same connection), " + size,
				values: metric(b, "floor-csi-call-p50-ms"), format: "%.3f ms"},
			figure{what: "  warm p50 / (the kernel's floor + the CSI call's), " + size, values: func(r *results) []float64 {
				return divide(r.series(b, "warm-p50-ms"), warmFloor(b)(r))
			}, format: "%.1f×"},
			figure{what: "  warm p50 less both floors' p50s (the driver's own work), " + size, values: func(r *results) []float64 {
				return combine(r.series(b, "warm-p50-ms"), warmFloor(b)(r), func(a, b float64) float64 { return a - b })
			}, format: "%.3f ms"},
		)
	}
	var extra []figure
	for _, size := range []string{"1KiB", "64KiB", "1MiB"} {
		b := latency + size
		extra = append(extra,
			figure{what: "driver CPU per cold publish (p50), " + size, values: metric(b, "cold-cpu-p50-ms"), format: "%.2f ms"},
			figure{what: "driver CPU per warm publish (p50), " + size, values: metric(b, "warm-cpu-p50-ms"), format: "%.2f ms"},
			figure{what: "API server floor: SAR (p50), " + size, values: metric(b, "floor-sar-p50-ms"), format: "%.2f ms"},
			figure{what: "API server floor: GET of the Secret (p50), " + size, values: metric(b, "floor-get-p50-ms"), format: "%.2f ms"},
			figure{what: "API requests per cold publish (SAR + GET), " + size, values: metric(b, "cold-api-requests/publish"), format: "%.2f"},
			figure{what: "API requests per warm publish, " + size, values: metric(b, "warm-api-requests/publish"), format: "%.2f"},
		)
	}
	var writes []figure
	for _, size := range []string{"1KiB", "1MiB"} {
		plain, huge := tmpfsWrite+"none/size="+size, tmpfsWrite+"within_size/size="+size
		writes = append(writes,
			figure{what: "write " + size + ", page by page (no huge= option)", values: metric(plain, "write-p50-us"), format: "%.0f µs"},
			figure{what: "write " + size + ", huge=within_size (the driver's mount)", values: metric(huge, "write-p50-us"), format: "%.0f µs"},
			figure{what: "  ratio, page by page / huge=within_size, " + size, values: func(r *results) []float64 {
				// Run i of one against run i of the other: they ran back to back.
				return divide(r.series(plain, "write-p50-us"), r.series(huge, "write-p50-us"))
			}, format: "%.1f×"},
		)
	}
	var tput []figure
	for _, n := range []string{"100", "1000"} {
		b := throughput + n
		tput = append(tput,
			figure{what: n + " volumes: publishes/s", values: metric(b, "publishes/s"), format: "%.0f /s"},
			figure{what: n + " volumes: unpublishes/s", values: metric(b, "unpublishes/s"), format: "%.0f /s"},
		)
	}
	b1000 := throughput + "1000"
	api := []figure{
		{what: "1000 publishes, one share, one SA: SubjectAccessReviews", values: atServer(b1000, "sar"), format: "%.0f"},
		{what: "1000 publishes, one share, one SA: GETs of the Secret", values: atServer(b1000, "secret-get"), format: "%.0f"},
		{what: "  TTL windows the 1000 publishes spanned (the allowance)", values: metric(b1000, "ttl-windows"), format: "%.0f"},
		{what: "relist cycle, 1000 volumes: SubjectAccessReviews", values: atServer(relist, "sar"), format: "%.0f"},
		{what: "  distinct (namespace, SA, share) in the cycle", values: metric(relist, "distinct-keys"), format: "%.0f"},
		{what: "relist cycle, 1000 volumes: GETs of Secrets", values: atServer(relist, "secret-get"), format: "%.0f"},
		{what: "  distinct sources in the cycle", values: metric(relist, "distinct-sources"), format: "%.0f"},
		{what: "relist cycle with --kube-api-qps 1000: SubjectAccessReviews", values: atServer(relistFast, "sar"), format: "%.0f"},
		{what: "relist cycle with --kube-api-qps 1000: GETs of Secrets", values: atServer(relistFast, "secret-get"), format: "%.0f"},
	}
	relistRows := []figure{
		{what: "one cycle, 1000 volumes, 10 shares, 50 SAs (driver defaults: --kube-api-qps 50)", values: metric(relist, "cycle-s"), format: "%.2f s"},
		{what: "the same with --kube-api-qps 1000 (the rate limiter out of the way)", values: metric(relistFast, "cycle-s"), format: "%.2f s"},
	}
	mem := []figure{}
	for _, n := range []string{"0", "10000", "50000"} {
		b := memory + n
		mem = append(mem,
			figure{what: "RSS, 1000 volumes, " + n + " Secrets", values: metric(b, "rss-MiB"), format: "%.1f MiB"},
			figure{what: "  of which anonymous (the driver's own memory)", values: metric(b, "rss-anon-MiB"), format: "%.1f MiB"},
			figure{what: "  of which the mapped executable", values: metric(b, "rss-file-MiB"), format: "%.1f MiB"},
			figure{what: "Go heap in use, " + n + " Secrets", values: metric(b, "heap-inuse-MiB"), format: "%.1f MiB"},
		)
	}
	mem = append(mem, figure{what: "RSS change from 0 to 50,000 Secrets (median to median)", values: func(r *results) []float64 {
		a, b := r.series(memory+"0", "rss-MiB"), r.series(memory+"50000", "rss-MiB")
		if len(a) == 0 || len(b) == 0 {
			return nil
		}
		return []float64{summarize(b).median - summarize(a).median}
	}, format: "%+.1f MiB"})
	mem = append(mem, figure{what: "noise: largest run-to-run range of RSS at one Secret count", values: func(r *results) []float64 {
		if n := memoryNoise(r); !math.IsNaN(n) {
			return []float64{n}
		}
		return nil
	}, format: "%.1f MiB"})
	delta := func(unit string) func(*results) []float64 {
		return func(r *results) []float64 {
			return r.derived(leaks, unit+"-after", unit+"-before", func(a, b float64) float64 { return a - b })
		}
	}
	leak := []figure{
		{what: "goroutines: after minus before", values: delta("goroutines"), format: "%+.0f"},
		{what: "goroutines before", values: metric(leaks, "goroutines-before"), format: "%.0f"},
		{what: "open fds: after minus before", values: delta("fds"), format: "%+.0f"},
		{what: "mounts held by the driver after", values: metric(leaks, "mounts-after"), format: "%.0f"},
		{what: "mounts or volume dirs left on the node (kubelet's view)", values: metric(leaks, "leftovers"), format: "%.0f"},
	}
	var fleet []figure
	for _, k := range fleetSteps {
		b := fleetNodes + k
		fleet = append(fleet,
			figure{what: k + " nodes: API requests per node per cycle", values: metric(b, "requests/node/cycle"), format: "%.1f"},
			figure{what: "  of which SubjectAccessReviews", values: metric(b, "create-subjectaccessreviews/node/cycle"), format: "%.1f"},
			figure{what: "  of which GETs of Secrets (the relist's, and the status writer's checks)", values: metric(b, "get-secrets/node/cycle"), format: "%.1f"},
			figure{what: "  of which GETs of the Lease", values: metric(b, "get-leases/node/cycle"), format: "%.2f"},
			figure{what: "  requests per second, the whole fleet", values: metric(b, "requests/s"), format: "%.1f /s"},
			figure{what: "  API server CPU per 1,000 requests (net of its idle CPU)", values: metric(b, "apiserver-net-cpu-s/1000req"), format: "%.2f s"},
			figure{what: "  API server CPU per 1,000 requests (gross)", values: metric(b, "apiserver-cpu-s/1000req"), format: "%.2f s"},
			figure{what: "  etcd CPU per 1,000 requests", values: metric(b, "etcd-cpu-s/1000req"), format: "%.2f s"},
			figure{what: "  API server cores busy", values: metric(b, "apiserver-cores"), format: "%.2f"},
			figure{what: "  SubjectAccessReview latency p50 (at the API server)", values: metric(b, "sar-p50-ms"), format: "%.2f ms"},
			figure{what: "  SubjectAccessReview latency p99", values: metric(b, "sar-p99-ms"), format: "%.2f ms"},
			figure{what: "  peak 1 s rate / mean rate, steady", values: metric(b, "peak/mean"), format: "%.2f"},
			figure{what: "  driver RSS (median node)", values: metric(b, "rss-MiB"), format: "%.1f MiB"},
		)
	}
	var roll []figure
	// The figure before the jitter (every node's relist at start-up, then every interval on the
	// dot) was measured once and is recorded in docs/scale.md: 8.51 at 50 nodes.
	for _, how := range []struct{ name, what string }{{"jittered", "with the jitter"}} {
		b := rollout + how.name
		roll = append(roll,
			figure{what: "relist requests: peak 1 s / steady mean, " + how.what, values: metric(b, "relist-peak/mean"), format: "%.2f"},
			figure{what: "all requests: peak 1 s / steady mean, " + how.what, values: metric(b, "peak/mean"), format: "%.2f"},
			figure{what: "  peak 1 s (all requests)", values: metric(b, "peak-1s"), format: "%.0f"},
			figure{what: "  steady mean (all requests)", values: metric(b, "steady-mean/s"), format: "%.1f /s"},
			figure{what: "  start-up requests per node (LIST and WATCH of the share CRDs)", values: metric(b, "startup-requests/node"), format: "%.1f"},
			figure{what: "  from the first node's start to the last's", values: metric(b, "launch-spread-ms"), format: "%.0f ms"},
		)
	}
	var scaleRows []figure
	for _, layout := range []struct{ name, what string }{{"1", "1000 pods on one share"}, {"100x10", "100 shares x 10 pods"}} {
		one, all := oneNode+layout.name, fleetScale+layout.name
		scaleRows = append(scaleRows,
			figure{what: layout.what + ", one node: publish all (10 concurrent calls)", values: metric(one, "publish-wall-s"), format: "%.2f s"},
			figure{what: "  one node: one relist cycle (--relist-spread=0, --kube-api-qps 50)", values: metric(one, "cycle-s"), format: "%.2f s"},
			figure{what: "  one node: SubjectAccessReviews in the cycle", values: atServer(one, "sar"), format: "%.0f"},
			figure{what: "  one node: GETs of Secrets in the cycle", values: atServer(one, "secret-get"), format: "%.0f"},
			figure{what: "  one node: RSS", values: metric(one, "rss-MiB"), format: "%.1f MiB"},
			figure{what: "  over the fleet: publish all (every node's 10 concurrent calls)", values: metric(all, "publish-wall-s"), format: "%.2f s"},
			figure{what: "  over the fleet: one relist cycle (mean over nodes; spread over half the interval)", values: metric(all, "cycle-s"), format: "%.2f s"},
			figure{what: "  over the fleet: SubjectAccessReviews per interval, all nodes", values: metric(all, "sar/interval"), format: "%.0f"},
			figure{what: "  over the fleet: GETs of Secrets per interval, all nodes", values: metric(all, "secret-get/interval"), format: "%.0f"},
			figure{what: "  over the fleet: RSS (median node)", values: metric(all, "rss-MiB"), format: "%.1f MiB"},
		)
	}
	return []section{
		{"NodePublishVolume latency", "One publish at a time, timed over the CSI socket as the kubelet sees it. Cold: the first volume of a share (SubjectAccessReview + GET of the source). Warm: both cached. 50 cold and 500 warm publishes per run. Beside each warm publish, two floors: the kernel's work for its mounts and files, made directly by the benchmark, and a CSI call whose handler does nothing, on the same open connection (gRPC's framing on both sides and the hand-offs between goroutines: what any call costs the benchmark's client and the driver; the kubelet, which dials the socket for each call, pays more).", lat},
		{"Where a publish's time goes", "Driver CPU: CPU time of all the driver's threads during the call (scheduler accounting). Floor: the same two API requests a cold publish makes, asked directly by the benchmark.", extra},
		{"Writing a file into a fresh tmpfs", "BenchmarkTmpfsWrite (tmpfs_root_test.go): mount a tmpfs, write one file, unmount, 200 times per run; the median write. It is why the driver mounts each volume's tmpfs with huge=within_size: large folios where a file covers them, small pages elsewhere (a 1 KiB file still takes one page).", writes},
		{"Throughput", "One share, one service account, 10 concurrent callers: all volumes published, then all unpublished.", tput},
		{"API requests, counted at the API server", "At the API server: from its audit log, the requests sent with the driver's user agent, when the cluster keeps one (`make bench` does); otherwise apiserver_request_total before and after, every client's requests in a window the scenario keeps free of others (on a shared cluster, others' requests land in it). The same counts from apiserver_request_total (`*-apiserver`), the audit log (`*-audit`) and the driver's own counter (`*-driver`) are all under All measurements.", api},
		{"Relist cycle", "Volume i: service account i mod 50 (5 namespaces x 10), share (i / 50) mod 10; two volumes per (SA, share). The cycle measured starts after every volume is published.", relistRows},
		{"Memory", "The driver with 1000 volumes (10 shares, 10 SAs) after a whole relist cycle over them, while the cluster holds 0, 10,000 and 50,000 Secrets of 256 bytes in 50 namespaces no share points at.", mem},
		{"Fleet: many nodes, one API server", "BenchmarkFleet (test/bench/fleet_test.go): K driver processes, each a node of its own, against the one API server, with deploy.yaml's flags (status Lease included) but --relist-interval=10s; 20 volumes per node over 10 service accounts, at 50 nodes 100 shares x 10 pods. Measured at the API server over 3 relist intervals: its audit log (the drivers' requests, by user agent) and its CPU time (/proc). Run once per `make bench`. docs/scale.md turns these into a cost model.", fleet},
		{"Fleet: every node restarted at once", "All 50 drivers killed and started again in the same moment; the two intervals after it against the steady mean before it, counted in 1 s windows at the API server. Relist requests: SubjectAccessReviews and GETs of sources, what the jitter spreads; all requests also count each driver's start-up (LIST and WATCH of the share CRDs, the Lease).", roll},
		{"Scale tests: one node and the fleet", "The enhancement's two scale tests, each 1000 volumes over 10 service accounts: on one node, and spread over the 50 nodes (20 each).", scaleRows},
		{"Leaks", "1000 publish/unpublish cycles by 10 concurrent callers over 10 shares and 10 SAs with a relist every second; counts from the driver's /metrics before and after (given up to 10 s to settle).", leak},
	}
}

// memoryNoise is the largest max-min range of RSS over the runs at any one Secret count.
func memoryNoise(r *results) float64 {
	noise := math.NaN()
	for _, n := range []string{"0", "10000", "50000"} {
		if v := r.series(memory+n, "rss-MiB"); len(v) > 0 {
			s := summarize(v)
			if math.IsNaN(noise) || s.max-s.min > noise {
				noise = s.max - s.min
			}
		}
	}
	return noise
}

type meta struct {
	commit, wall, command, load string
	smoke                       bool
	date                        time.Time
	threeNodes                  string    // the multi-node suite's API figure, "" when there is none
	platform                    string    // the API server and etcd the run used
	baseline                    *baseline // the previous run, or nil
}

// threeNodesIntro introduces the multi-node suite's figure under the fleet's table.
const threeNodesIntro = "Three real nodes (kubelet, containerd and the deployed DaemonSet each; `make test`'s TestNodesAPIRequestsMatchTheModel in test/e2e/nodes/nodes_test.go, relist interval 3 s, on each node pods of 2 service accounts on 2 shares): the drivers' requests in the API server's audit log (by node address) over 8 relist intervals, per node per cycle, against docs/scale.md's model A + S + 1 + (shares + interval/2s)/nodes:"

func render(w io.Writer, r *results, m meta) {
	runs := 0
	for _, b := range r.order {
		for _, v := range r.vals[b] {
			runs = max(runs, len(v))
			break
		}
	}
	fmt.Fprintf(w, "# Benchmarks\n\n")
	if m.smoke {
		fmt.Fprintf(w, "**Smoke run: every scenario shrunk (fewer samples, volumes and Secrets than the rows say) and run once. It shows that the benchmarks work; its figures are not the driver's.**\n\n")
	}
	fmt.Fprintf(w, "Generated by `%s` (hack/bench.sh, tools/benchtable) from one run of test/bench/bench_test.go: the real driver binary against a real kube-apiserver + etcd (hack/cluster.sh, control plane only), called over its CSI socket by the benchmark playing the kubelet, as root.\n\n", m.command)
	fmt.Fprintf(w, "- Date: %s\n", m.date.UTC().Format("2006-01-02 15:04 MST"))
	if m.commit != "" {
		fmt.Fprintf(w, "- Commit: %s\n", m.commit)
	}
	if m.platform != "" {
		fmt.Fprintf(w, "- Platform: %s\n", m.platform)
	}
	fmt.Fprintf(w, "- Machine: %s\n", machine(r.cpu))
	fmt.Fprintf(w, "- Go: %s; runs per figure: up to %d (each figure is the median of its runs, with min and max)\n", runtime.Version(), runs)
	if m.wall != "" {
		fmt.Fprintf(w, "- Wall time of the whole run: %s\n", m.wall)
	}
	if m.load != "" {
		fmt.Fprintf(w, "- Load averages (1, 5, 15 min): %s\n", m.load)
	}
	fmt.Fprintln(w)

	var shown []struct{ name, median, min, max string }
	for _, s := range sections() {
		fmt.Fprintf(w, "## %s\n\n%s\n\n", s.title, s.intro)
		fmt.Fprintf(w, "| Figure | Median | Min | Max | Runs |\n|---|---:|---:|---:|---:|\n")
		for _, f := range s.rows {
			v := f.values(r)
			if len(v) == 0 {
				fmt.Fprintf(w, "| %s | not run | | | |\n", f.what)
				continue
			}
			st := summarize(v)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d |\n", f.what,
				fmt.Sprintf(f.format, st.median), fmt.Sprintf(f.format, st.min), fmt.Sprintf(f.format, st.max), len(v))
			shown = append(shown, struct{ name, median, min, max string }{strings.TrimSpace(f.what),
				fmt.Sprintf(f.format, st.median), fmt.Sprintf(f.format, st.min), fmt.Sprintf(f.format, st.max)})
		}
		fmt.Fprintln(w)
		if strings.HasPrefix(s.title, "Fleet: many nodes") && m.threeNodes != "" {
			fmt.Fprintf(w, "%s\n\n    %s\n\n", threeNodesIntro, m.threeNodes)
		}
	}

	if m.baseline != nil {
		renderBaseline(w, m.baseline, shown)
	}

	fmt.Fprintf(w, "## Notes\n\n%s\n", notes)

	fmt.Fprintf(w, "## Reproduce\n\n%s\n", reproduce)

	fmt.Fprintf(w, "## All measurements\n\nEvery metric every benchmark reported (median, min, max over the runs).\n\n")
	fmt.Fprintf(w, "| Benchmark | Metric | Median | Min | Max | Runs |\n|---|---|---:|---:|---:|---:|\n")
	for _, b := range r.order {
		units := make([]string, 0, len(r.vals[b]))
		for u := range r.vals[b] {
			units = append(units, u)
		}
		sort.Strings(units)
		for _, u := range units {
			st := summarize(r.vals[b][u])
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", strings.TrimPrefix(b, "Benchmark"), u, num(st.median), num(st.min), num(st.max), len(r.vals[b][u]))
		}
	}
}

func num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// machine describes the CPU, core count, memory and kernel.
func machine(cpu string) string {
	if cpu == "" {
		cpu = "unknown CPU"
	}
	parts := []string{cpu, fmt.Sprintf("%d cores", runtime.NumCPU())}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					parts = append(parts, fmt.Sprintf("%.0f GiB RAM", kb/(1<<20)))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(b)))
	}
	return strings.Join(parts, ", ")
}

const notes = `- Wall-time figures (latency, throughput, relist) depend on everything else the machine runs:
  the API server, etcd, the driver and the benchmark share its cores (see the load averages above).
  The driver-CPU figures count work the driver did, not time it waited for a core, though
  contended cores still make that work slower.
- A cold publish asks its two API requests one after the other: the SubjectAccessReview first, and
  the GET of the source only once access is granted (so a pod that may not use a share never makes
  the driver read its source); the floor rows time the same two requests asked directly. A quorum GET of a 1 MiB Secret alone takes the API
  server several milliseconds, so a cold publish of such a Secret costs at least that.
- A warm publish is CPU-bound (driver CPU is about its wall time). Profiled (perf) at 1 MiB before
  the fix, 80% of it was writing the files, twice (each share's copy, from which a volume is
  restored after a revocation, and the pod's view), page by page: about 0.5 ms per copy of 1 MiB,
  most of it allocating and charging 4 KiB pages. Now the tmpfs is mounted with huge=within_size
  (see "Writing a file into a fresh tmpfs") and the pod's view hard-links the share's copy, so the
  bytes are written, and held in memory, once.
- Where a publish of 1 KiB goes, profiled once (perf record -a -g over BENCH_FILTER=PublishLatency
  at 1 KiB, with a driver built with its symbols, at commit 8b91513): of the driver's samples in
  the NodePublishVolume handler (50 cold and 500 warm publishes), the share's copy and the pod's
  view with their ..data links took 29%; what the kernel's floor does too took 28% (the volume's
  dir and the target dir, created on the kubelet's disk, 18%; the tmpfs mount 6%; the read-only
  bind 4%); the record 9%; the two checks of the target path 7%; the rest was the request's
  validation, the caches (and the cold publishes' API requests) and the log line. The driver's
  gRPC transport and its goroutines' hand-offs ran outside the handler: the CSI call's floor row.
- RSS counts the pages of the driver's executable that the process has mapped (file-backed,
  shared page cache, reclaimable) as well as its own memory (anonymous). On kernels that cache
  executables in large folios, nearly the whole binary ends up mapped, so that part is the
  binary's size, the same with 0 or 50,000 Secrets; the anonymous part is what the driver's state
  costs.
- A relist cycle sends its requests one after another through client-go's rate limiter
  (--kube-api-qps, default 50/s, burst 100): with 500 distinct (namespace, SA, share) keys the
  limiter, not the API server, sets the default cycle's wall time.
- The floor GET is timed with client-go's usual read and decode (io.ReadAll, then the generic
  protobuf decoder), so it carries client-side work the driver no longer does (a pooled buffer,
  the Secret decoded straight from the answer's envelope: sourcedecode.go): a cold publish can
  come out a little under its floor.
- The fleet's API server CPU includes writing its audit log (Metadata level, every request), which
  the benchmark reads; a control plane without one spends a little less per request. Every rate in
  the fleet tables is at --relist-interval=10s: at the default 60 s divide it by six
  (docs/scale.md).
- Benchmarks never fail on a number; a benchmark fails only when its scenario cannot run.
`

const reproduce = "As root on a Debian 12 machine, from the repository root:\n\n" +
	"```sh\n" +
	"make bench                 # builds, brings up the control plane, runs every benchmark -count=5, writes BENCHMARKS.md\n" +
	"BENCH_SMOKE=1 make bench   # every scenario shrunk, one run each: a check that they work (CI)\n" +
	"BENCH_COUNT=3 BENCH_FILTER=PublishLatency make bench   # fewer runs, some benchmarks\n" +
	"```\n\n" +
	"The raw `go test -bench` output is kept in `_output/bench/raw.txt`; " +
	"`go run ./benchtable -in ../_output/bench/raw.txt` (in tools/) prints this file again from it.\n"
