package main

// The benchmarks' output, read: every metric of every benchmark, one value per run, and the series
// the report computes from them run by run (a floor that is the sum of two requests, a figure
// less its floors).

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The benchmarks' names, as test/bench/bench_test.go, test/bench/fleet_test.go and the root's
// tmpfs_root_test.go report them at full scale.
const (
	latency    = "BenchmarkPublishLatency/size="
	throughput = "BenchmarkPublishThroughput/volumes="
	relist     = "BenchmarkRelistCycle/volumes=1000"
	relistFast = "BenchmarkRelistCycle/volumes=1000,kube-api-qps=1000"
	memory     = "BenchmarkMemory/secrets="
	leaks      = "BenchmarkLeaks/cycles=1000"
	tmpfsWrite = "BenchmarkTmpfsWrite/huge="
	fleetNodes = "BenchmarkFleet/nodes="
	rollout    = "BenchmarkFleet/rollout=jittered"
	oneNode    = "BenchmarkFleet/one-node/shares="
	fleetScale = "BenchmarkFleet/fleet/shares="
)

// fleetSteps are the fleet benchmark's node counts at full scale; the last is the fleet that the
// restart and the scale tests use.
var fleetSteps = []string{"10", "25", "50"}

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

// runs is the most runs any metric has: the count the report's medians are of.
func (r *results) runs() int {
	n := 0
	for _, units := range r.vals {
		for _, v := range units {
			n = max(n, len(v))
		}
	}
	return n
}

// series returns the per-run values of a metric, nil if it did not run.
func (r *results) series(bench, unit string) []float64 { return r.vals[bench][unit] }

// atServer is a request count at the API server: from its audit log (the requests sent with the
// driver's user agent) when the run had one, else apiserver_request_total (every client's
// requests in the window, which the scenario keeps free of other clients').
func (r *results) atServer(bench, kind string) []float64 {
	if v := r.series(bench, kind+"-audit"); len(v) > 0 {
		return v
	}
	return r.series(bench, kind+"-apiserver")
}

// apiFloor is, run by run, the two requests of a cold publish (SAR + GET) as the benchmark
// itself times them: their medians, summed.
func (r *results) apiFloor(bench string) []float64 {
	return combine(r.series(bench, "floor-sar-p50-ms"), r.series(bench, "floor-get-p50-ms"), func(a, b float64) float64 { return a + b })
}

// driverWork is, run by run, a warm publish less what it cannot take less than: the kernel's
// work for its mounts and files, and a CSI call that does nothing, as the benchmark times them.
func (r *results) driverWork(bench string) []float64 {
	floors := combine(r.series(bench, "floor-syscalls-p50-ms"), r.series(bench, "floor-csi-call-p50-ms"), func(a, b float64) float64 { return a + b })
	return combine(r.series(bench, "warm-p50-ms"), floors, func(a, b float64) float64 { return a - b })
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
