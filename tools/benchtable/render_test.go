package main

// Specification of BENCHMARKS.md: the tables a reader compares at a glance, each under one short
// note; each figure with its median, min and max (no runs column, no targets), the floors and the
// driver's own work as medians at 1 KiB and 1 MiB computed run by run, the fleet and the scale
// tests with a column per scenario, and nothing of the details file's (every metric, the previous
// run).

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// specRun is three runs of the 1 KiB publish chosen so that a figure computed run by run differs
// from one computed from the medians, 64 KiB's CSI floor alone, and one run of a few other
// benchmarks; the rest did not run.
const specRun = "cpu: AMD EPYC\n" +
	latency + "1KiB-2 1 4.40 cold-p50-ms 0.70 warm-p50-ms 1.00 floor-sar-p50-ms 1.00 floor-get-p50-ms 0.30 floor-syscalls-p50-ms 0.20 floor-csi-call-p50-ms\n" +
	latency + "1KiB-2 1 4.60 cold-p50-ms 0.60 warm-p50-ms 2.00 floor-sar-p50-ms 3.00 floor-get-p50-ms 0.10 floor-syscalls-p50-ms 0.10 floor-csi-call-p50-ms\n" +
	latency + "1KiB-2 1 4.50 cold-p50-ms 0.90 warm-p50-ms 3.00 floor-sar-p50-ms 2.00 floor-get-p50-ms 0.20 floor-syscalls-p50-ms 0.30 floor-csi-call-p50-ms\n" +
	latency + "64KiB-2 1 0.50 floor-csi-call-p50-ms\n" + latency + "64KiB-2 1 0.60 floor-csi-call-p50-ms\n" + latency + "64KiB-2 1 0.70 floor-csi-call-p50-ms\n" +
	memory + "0-2 1 35.0 rss-MiB 14.0 rss-anon-MiB 21.4 rss-file-MiB\n" +
	fleetNodes + "10-2 1 21.9 requests/node/cycle 0.055 apiserver-cores\n" +
	fleetNodes + "50-2 1 20.6 requests/node/cycle 0.169 apiserver-cores\n" +
	rollout + "-2 1 1.111 peak/mean 122 peak-1s 109.8 steady-mean/s 2 startup-requests/node\n" +
	oneNode + "1-2 1 12 sar-apiserver 10 sar-audit 1 secret-get-audit\n"

var specMeta = meta{commit: "abc1234", command: "make bench", platform: "Kubernetes v1.37.2 (kube-apiserver), etcd 3.7.0",
	machine: "AMD EPYC, 2 cores, 24 GiB RAM", goVersion: "1.26.8", date: time.Date(2026, 11, 27, 11, 31, 0, 0, time.UTC),
	wall: "15 min 19 s", load: "2.06 3.20 2.45 before", threeNodes: "nodes=3 measured=7.88 model=8.17 diff=-3.6%"}

func renderSpec(t *testing.T, m meta) string {
	t.Helper()
	r, err := parse(strings.NewReader(specRun))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	render(&out, r, m)
	return out.String()
}

func TestReportIsTheTablesUnderOneNoteEach(t *testing.T) {
	got := renderSpec(t, specMeta)
	var headings []string
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "## ") {
			headings = append(headings, strings.TrimPrefix(line, "## "))
		}
	}
	want := []string{"NodePublishVolume latency", "Driver CPU and API requests per publish", "Writing a file into a fresh tmpfs",
		"Throughput", "API requests and the relist cycle", "Memory", "Fleet: many nodes, one API server", "Scale tests", "Leaks", "Reproduce"}
	if !slices.Equal(headings, want) {
		t.Errorf("sections %q, want %q", headings, want)
	}
	for _, want := range []string{
		"# Benchmarks\n\nFor anyone sizing or comparing the driver: its latency, API requests and memory, measured by\n" +
			"`make bench` against a real kube-apiserver + etcd ([how](docs/development.md#benchmarks)).\n\n",
		// The lines the next run's baseline reader takes, then the machine, wrapped at 100 columns.
		"- Date: 2026-11-27 11:31 UTC\n- Commit: abc1234\n- Platform: Kubernetes v1.37.2 (kube-apiserver), etcd 3.7.0\n" +
			"- Machine: AMD EPYC, 2 cores, 24 GiB RAM; Go 1.26.8. Medians of up to 3 runs, with min and max;\n" +
			"  fleet figures are one run.\n\n## NodePublishVolume latency\n\n",
		// A note, then a table of median, min and max.
		"Driver CPU: the CPU time of all the driver's threads during the call.\n\n| Figure | Median | Min | Max |\n|---|---:|---:|---:|\n",
		"| cold p50, 1KiB | 4.50 ms | 4.40 ms | 4.60 ms |\n",
		"| cold p99, 1KiB | not run | | |\n",
		// Run by run: SAR + GET is 2, 5 and 5 ms (the medians' sum would be 4); 1 MiB did not run.
		"| floor: API server (SAR + GET), 1KiB / 1MiB | 5.00 / – ms | | |\n",
		"| floor: kernel, warm publish, 1KiB / 1MiB | 0.200 / – ms | | |\n",
		// A call that does nothing costs the same at every size: the runs of 1 KiB's and 64 KiB's, pooled.
		"| floor: a CSI call | 0.40 ms | | |\n",
		// Run by run: 0.70 - 0.30 - 0.20, 0.60 - 0.10 - 0.10, 0.90 - 0.20 - 0.30 (from the medians: 0.30).
		"| warm p50 less both floors (the driver's own work), 1KiB / 1MiB | 0.400 / – ms | | |\n",
		"| RSS, 1000 volumes, 0 Secrets | 35.0 MiB | 35.0 MiB | 35.0 MiB |\n| RSS, 1000 volumes, 10000 Secrets | not run | | |\n",
		"| anonymous, 0 / 50000 Secrets | 14.0 / – MiB | | |\n| Go heap in use, 0 / 50000 Secrets | not run | | |\n",
		// The memory note carries this run's mapped executable.
		"## Memory\n\n1000 volumes after a relist cycle, while the cluster holds 0 to 50,000 other Secrets. About 21 MiB\nof the RSS is the mapped executable.\n\n",
		// The fleet: a column per node count; the restart, a sentence under it.
		"| Figure | 10 nodes | 25 nodes | 50 nodes |\n|---|---:|---:|---:|\n| requests per node per cycle | 21.9 | not run | 20.6 |\n",
		"| API server cores busy | 0.06 | not run | 0.17 |\n",
		"\n\nAll 50 drivers restarted at once: the peak 1 s rate was 1.11 times the steady mean (122 against\n" +
			"109.8 requests/s), with 2 start-up requests per node.\n\n## Scale tests\n\n",
		// The scale tests: a column per layout; requests counted in the audit log when there is one.
		"| Figure | 1000 pods, one share | 100 shares x 10 pods |\n|---|---:|---:|\n",
		"| one node: SubjectAccessReviews / GETs per cycle | 10 / 1 | not run |\n",
		"## Reproduce\n\nAs root, from the repository root:\n\n```sh\nmake bench ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, not := range []string{"Runs", "Target", "All measurements", "Against the previous run", "Wall time", "Load averages",
		"nodes=3", "| Benchmark |"} {
		if strings.Contains(got, not) {
			t.Errorf("the report has %q: that is the details file's", not)
		}
	}
	if !strings.HasSuffix(got, "```\n") {
		t.Errorf("the report does not end with the Reproduce block")
	}
}

func TestSmokeReportSaysSo(t *testing.T) {
	m := specMeta
	m.smoke, m.command = true, "BENCH_SMOKE=1 make bench"
	got := renderSpec(t, m)
	for _, want := range []string{"**Smoke run:", "`BENCH_SMOKE=1 make bench` against"} {
		if !strings.Contains(got, want) {
			t.Errorf("the smoke run's report lacks %q", want)
		}
	}
}

func TestDetailsHoldWhatTheReportLeavesOut(t *testing.T) {
	r, err := parse(strings.NewReader(specRun))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	renderDetails(&out, r, specMeta)
	got := out.String()
	for _, want := range []string{
		"- Wall time of the whole run: 15 min 19 s\n", "- Load averages (1, 5, 15 min): 2.06 3.20 2.45 before\n",
		"\n    nodes=3 measured=7.88 model=8.17 diff=-3.6%\n",
		"| Benchmark | Metric | Median | Min | Max | Runs |\n",
		"| PublishLatency/size=1KiB | floor-get-p50-ms | 2 | 1 | 3 | 3 |\n",
		"| Fleet/one-node/shares=1 | sar-apiserver | 12 | 12 | 12 | 1 |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the details lack %q", want)
		}
	}
}

// The committed BENCHMARKS.md is what the renderer writes: rendered from the run it was written
// from (rebuilt from its tables in testdata), with its own date, commit, platform and machine, it
// has the same words in the same order but for the figures, whatever run the file now holds.
// (From that run's figures, the file at 088f367 comes out byte for byte.)
func TestCommittedReportIsTheRenderersLayout(t *testing.T) {
	committed, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	m := meta{command: "make bench"}
	header := regexp.MustCompile(`(?s)- Date: ([^\n]+)\n- Commit: ([^\n]+)\n- Platform: ([^\n]+)\n- Machine: (.+?); Go (\S+)\. `).FindSubmatch(committed)
	if header == nil {
		t.Fatalf("BENCHMARKS.md has no Date, Commit, Platform and Machine lines")
	}
	if m.date, err = time.Parse("2006-01-02 15:04 MST", string(header[1])); err != nil {
		t.Fatal(err)
	}
	m.commit, m.platform = string(header[2]), string(header[3])
	m.machine, m.goVersion = strings.Join(strings.Fields(string(header[4])), " "), string(header[5])

	f, err := os.Open("testdata/run-088f367.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	render(&out, r, m)
	if words := len(strings.Fields(out.String())); words >= 1500 {
		t.Errorf("the report is %d words; a reader compares it at a glance under 1,500", words)
	}

	// Each figure a placeholder ("4.06 ms", "+0", "–" alike), then word by word: a figure's width
	// can move where a line wraps.
	figures := regexp.MustCompile(`[+-]?\d[\d.,]*|–`)
	mask := func(b []byte) []string { return strings.Fields(figures.ReplaceAllString(string(b), "#")) }
	got, want := mask(out.Bytes()), mask(committed)
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("BENCHMARKS.md departs from what the renderer writes at word %d: it has %q, the renderer %q (context: %q)",
				i, want[i], got[i], strings.Join(want[max(0, i-8):min(len(want), i+8)], " "))
		}
	}
	if len(got) != len(want) {
		t.Errorf("the renderer writes %d words, BENCHMARKS.md has %d", len(got), len(want))
	}
}
