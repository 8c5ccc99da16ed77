package main

// BENCHMARKS.md: for anyone sizing or comparing the driver, the tables a reader compares at a
// glance, each under one short note. The notes are fixed text but for the figures in them (the
// mapped executable's share of the RSS, the fleet's restart); every cell is this run's. How the
// benchmarks measure is docs/development.md's (Benchmarks); every metric of the run and the
// comparison with the previous one are the details file's (details.go).

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// meta is what the report says about the run besides its figures.
type meta struct {
	commit    string    // the commit measured
	command   string    // what produced the run: "make bench"
	platform  string    // the API server and etcd the run used
	machine   string    // CPU, cores and memory
	goVersion string    // "1.26.8"
	smoke     bool      // scenarios shrunk: figures not comparable
	date      time.Time // when the run ended

	// Only in the details file.
	wall, load string    // the whole run's wall time; the machine's load averages around it
	threeNodes string    // the multi-node suite's API figure, "" when there is none
	baseline   *baseline // the run this one replaces, or nil
}

// section is one table of the report under its note: figures with their median, min and max
// over the runs, or (columns set) medians with a column per scenario.
type section struct {
	title   string
	note    string
	columns []string // nil: Median, Min, Max
	rows    []row
	after   string // a paragraph under the table, "" for none
}

// row is one line of a table: the figure's name and its cells.
type row struct {
	name  string
	cells []string
}

const notRun = "not run"

// figure is a row of one metric: its median, min and max over the runs, each printed with format
// ("%.2f ms"); "not run" when its benchmark did not run (a filtered or smoke run).
func figure(name string, v []float64, format string) row {
	if len(v) == 0 {
		return row{name, []string{notRun, "", ""}}
	}
	s := summarize(v)
	return row{name, []string{fmt.Sprintf(format, s.median), fmt.Sprintf(format, s.min), fmt.Sprintf(format, s.max)}}
}

// medianRow is a row of medians only, "a / b unit": the same figure at two sizes, read across.
func medianRow(name, format, unit string, series ...[]float64) row {
	return row{name, []string{medians(format, unit, series...), "", ""}}
}

// medians is the median of each series printed with format, joined by " / ", then unit; a series
// that did not run is "–", and "not run" if none did.
func medians(format, unit string, series ...[]float64) string {
	parts := make([]string, len(series))
	ran := false
	for i, v := range series {
		parts[i] = "–"
		if len(v) > 0 {
			parts[i], ran = fmt.Sprintf(format, summarize(v).median), true
		}
	}
	if !ran {
		return notRun
	}
	return strings.Join(parts, " / ") + unit
}

// grid is a row of medians with a cell per column, cell giving the series of column i.
func grid(name, format, unit string, columns int, cell func(i int) [][]float64) row {
	cells := make([]string, columns)
	for i := range cells {
		cells[i] = medians(format, unit, cell(i)...)
	}
	return row{name, cells}
}

func sections(r *results) []section {
	sizes := []string{"1KiB", "64KiB", "1MiB"}
	var lat []row
	for _, size := range sizes {
		b := latency + size
		lat = append(lat,
			figure("cold p50, "+size, r.series(b, "cold-p50-ms"), "%.2f ms"),
			figure("cold p99, "+size, r.series(b, "cold-p99-ms"), "%.2f ms"),
			figure("warm p50, "+size, r.series(b, "warm-p50-ms"), "%.2f ms"),
			figure("warm p99, "+size, r.series(b, "warm-p99-ms"), "%.2f ms"),
		)
	}
	small, large := latency+"1KiB", latency+"1MiB"
	// A CSI call that does nothing costs the same whatever the size: its runs at every size, pooled.
	var csiCall []float64
	for _, size := range sizes {
		csiCall = append(csiCall, r.series(latency+size, "floor-csi-call-p50-ms")...)
	}
	lat = append(lat,
		medianRow("floor: API server (SAR + GET), 1KiB / 1MiB", "%.2f", " ms", r.apiFloor(small), r.apiFloor(large)),
		medianRow("floor: kernel, warm publish, 1KiB / 1MiB", "%.3f", " ms",
			r.series(small, "floor-syscalls-p50-ms"), r.series(large, "floor-syscalls-p50-ms")),
		medianRow("floor: a CSI call", "%.2f", " ms", csiCall),
		medianRow("warm p50 less both floors (the driver's own work), 1KiB / 1MiB", "%.3f", " ms", r.driverWork(small), r.driverWork(large)),
	)

	var perPublish []row
	for _, size := range []string{"1KiB", "1MiB"} {
		b := latency + size
		perPublish = append(perPublish,
			figure("driver CPU per cold publish (p50), "+size, r.series(b, "cold-cpu-p50-ms"), "%.2f ms"),
			figure("driver CPU per warm publish (p50), "+size, r.series(b, "warm-cpu-p50-ms"), "%.2f ms"),
		)
	}
	for _, size := range sizes {
		b := latency + size
		perPublish = append(perPublish,
			figure("API requests per cold publish (SAR + GET), "+size, r.series(b, "cold-api-requests/publish"), "%.2f"),
			figure("API requests per warm publish, "+size, r.series(b, "warm-api-requests/publish"), "%.2f"),
		)
	}

	var writes []row
	for _, size := range []string{"1KiB", "1MiB"} {
		writes = append(writes,
			figure(size+", page by page", r.series(tmpfsWrite+"none/size="+size, "write-p50-us"), "%.0f µs"),
			figure(size+", huge=within_size", r.series(tmpfsWrite+"within_size/size="+size, "write-p50-us"), "%.0f µs"),
		)
	}

	var tput []row
	for _, n := range []string{"100", "1000"} {
		b := throughput + n
		tput = append(tput,
			figure(n+" volumes: publishes/s", r.series(b, "publishes/s"), "%.0f /s"),
			figure(n+" volumes: unpublishes/s", r.series(b, "unpublishes/s"), "%.0f /s"),
		)
	}

	oneShare := throughput + "1000"
	api := []row{
		figure("1000 publishes, one share, one SA: SubjectAccessReviews", r.atServer(oneShare, "sar"), "%.0f"),
		figure("1000 publishes, one share, one SA: GETs of the Secret", r.atServer(oneShare, "secret-get"), "%.0f"),
		figure("relist cycle, 1000 volumes: SubjectAccessReviews", r.atServer(relist, "sar"), "%.0f"),
		figure("relist cycle, 1000 volumes: GETs of Secrets", r.atServer(relist, "secret-get"), "%.0f"),
		figure("one cycle, default --kube-api-qps 50", r.series(relist, "cycle-s"), "%.2f s"),
		figure("one cycle, --kube-api-qps 1000", r.series(relistFast, "cycle-s"), "%.2f s"),
	}

	var mem []row
	for _, n := range []string{"0", "10000", "50000"} {
		mem = append(mem, figure("RSS, 1000 volumes, "+n+" Secrets", r.series(memory+n, "rss-MiB"), "%.1f MiB"))
	}
	none, most := memory+"0", memory+"50000"
	mem = append(mem,
		medianRow("anonymous, 0 / 50000 Secrets", "%.1f", " MiB", r.series(none, "rss-anon-MiB"), r.series(most, "rss-anon-MiB")),
		medianRow("Go heap in use, 0 / 50000 Secrets", "%.1f", " MiB", r.series(none, "heap-inuse-MiB"), r.series(most, "heap-inuse-MiB")),
	)
	memNote := "1000 volumes after a relist cycle, while the cluster holds 0 to 50,000 other Secrets."
	if v := r.series(none, "rss-file-MiB"); len(v) > 0 {
		memNote += fmt.Sprintf(" About %.0f MiB of the RSS is the mapped executable.", summarize(v).median)
	}

	nodes := make([]string, len(fleetSteps))
	for i, k := range fleetSteps {
		nodes[i] = k + " nodes"
	}
	fleetRow := func(name, unit, format, suffix string) row {
		return grid(name, format, suffix, len(fleetSteps), func(i int) [][]float64 {
			return [][]float64{r.series(fleetNodes+fleetSteps[i], unit)}
		})
	}
	fleet := []row{
		fleetRow("requests per node per cycle", "requests/node/cycle", "%.1f", ""),
		fleetRow("of which SubjectAccessReviews", "create-subjectaccessreviews/node/cycle", "%.1f", ""),
		fleetRow("requests per second, the fleet", "requests/s", "%.1f", ""),
		fleetRow("API server CPU per 1,000 requests (gross)", "apiserver-cpu-s/1000req", "%.2f", " s"),
		fleetRow("API server cores busy", "apiserver-cores", "%.2f", ""),
		fleetRow("SubjectAccessReview p99 at the API server", "sar-p99-ms", "%.2f", " ms"),
		fleetRow("driver RSS (median node)", "rss-MiB", "%.1f", " MiB"),
	}

	// The scale tests' two layouts, a column each: 1000 pods on one share, 100 shares x 10 pods.
	layouts := []string{"1", "100x10"}
	scaleRow := func(name, format, unit string, series func(layout string) [][]float64) row {
		return grid(name, format, unit, len(layouts), func(i int) [][]float64 { return series(layouts[i]) })
	}
	scale := []row{
		scaleRow("one node: publish all", "%.2f", " s", func(l string) [][]float64 {
			return [][]float64{r.series(oneNode+l, "publish-wall-s")}
		}),
		scaleRow("one node: one relist cycle (--kube-api-qps 50)", "%.2f", " s", func(l string) [][]float64 {
			return [][]float64{r.series(oneNode+l, "cycle-s")}
		}),
		scaleRow("one node: SubjectAccessReviews / GETs per cycle", "%.0f", "", func(l string) [][]float64 {
			return [][]float64{r.atServer(oneNode+l, "sar"), r.atServer(oneNode+l, "secret-get")}
		}),
		scaleRow("one node: RSS", "%.1f", " MiB", func(l string) [][]float64 {
			return [][]float64{r.series(oneNode+l, "rss-MiB")}
		}),
		scaleRow("50 nodes: publish all", "%.2f", " s", func(l string) [][]float64 {
			return [][]float64{r.series(fleetScale+l, "publish-wall-s")}
		}),
		scaleRow("50 nodes: SubjectAccessReviews / GETs per interval", "%.0f", "", func(l string) [][]float64 {
			return [][]float64{r.series(fleetScale+l, "sar/interval"), r.series(fleetScale+l, "secret-get/interval")}
		}),
		scaleRow("50 nodes: RSS (median node)", "%.1f", " MiB", func(l string) [][]float64 {
			return [][]float64{r.series(fleetScale+l, "rss-MiB")}
		}),
	}

	delta := func(unit string) []float64 {
		return combine(r.series(leaks, unit+"-after"), r.series(leaks, unit+"-before"), func(a, b float64) float64 { return a - b })
	}
	leak := []row{
		figure("goroutines: after minus before", delta("goroutines"), "%+.0f"),
		figure("open fds: after minus before", delta("fds"), "%+.0f"),
		figure("mounts held by the driver after", r.series(leaks, "mounts-after"), "%.0f"),
		figure("mounts or volume dirs left on the node", r.series(leaks, "leftovers"), "%.0f"),
	}

	return []section{
		{title: "NodePublishVolume latency", rows: lat, note: `Cold: the first volume of a share (a SubjectAccessReview, then a GET). Warm: both cached. Floors:
the same work without the driver.`},
		{title: "Driver CPU and API requests per publish", rows: perPublish,
			note: "Driver CPU: the CPU time of all the driver's threads during the call."},
		{title: "Writing a file into a fresh tmpfs", rows: writes,
			note: "Why each volume's tmpfs is mounted with `huge=within_size`: the median write of one file."},
		{title: "Throughput", rows: tput,
			note: "One share, one service account, 10 concurrent callers: all volumes published, then unpublished."},
		{title: "API requests and the relist cycle", rows: api, note: `Counted in the API server's audit log. A cycle asks once per distinct (namespace, service account,
share) and source: here 1000 volumes, 50 service accounts, 10 shares.`},
		{title: "Memory", rows: mem, note: wrap(memNote, "")},
		{title: "Fleet: many nodes, one API server", columns: nodes, rows: fleet, after: wrap(restart(r), ""),
			note: "K driver processes, each a node, at `--relist-interval=10s` (at the default 60 s, divide the rates\n" +
				"by six), 20 volumes per node. [docs/scale.md](docs/scale.md) turns these into a cost model."},
		{title: "Scale tests", columns: []string{"1000 pods, one share", "100 shares x 10 pods"}, rows: scale,
			note: "1000 volumes over 10 service accounts, on one node and spread over 50 (20 each)."},
		{title: "Leaks", rows: leak, note: `1000 publish/unpublish cycles, 10 concurrent callers, a relist every second; the driver's
/metrics before and after.`},
	}
}

// restart is the fleet's restart in a sentence: every driver killed and started again at once,
// the peak 1 s request rate after it against the steady mean before it.
func restart(r *results) string {
	const what = "All 50 drivers restarted at once: "
	ratio, peak, mean, startup := r.series(rollout, "peak/mean"), r.series(rollout, "peak-1s"),
		r.series(rollout, "steady-mean/s"), r.series(rollout, "startup-requests/node")
	if len(ratio) == 0 || len(peak) == 0 || len(mean) == 0 || len(startup) == 0 {
		return what + notRun + "."
	}
	return what + fmt.Sprintf("the peak 1 s rate was %.2f times the steady mean (%.0f against %.1f requests/s), with %s start-up requests per node.",
		summarize(ratio).median, summarize(peak).median, summarize(mean).median,
		strconv.FormatFloat(math.Round(summarize(startup).median*10)/10, 'f', -1, 64))
}

// render writes BENCHMARKS.md.
func render(w io.Writer, r *results, m meta) {
	fmt.Fprintf(w, "# Benchmarks\n\n")
	if m.smoke {
		fmt.Fprintf(w, "%s\n\n", wrap("**Smoke run: every scenario shrunk and run once. It shows that the benchmarks work; its figures are not the driver's.**", ""))
	}
	fmt.Fprintf(w, "%s\n\n", wrap("For anyone sizing or comparing the driver: its latency, API requests and memory, measured by `"+
		m.command+"` against a real kube-apiserver + etcd ([how](docs/development.md#benchmarks)).", ""))
	// Date, Commit and Platform are what the next run's baseline reader takes from this file.
	fmt.Fprintf(w, "- Date: %s\n", m.date.UTC().Format("2006-01-02 15:04 MST"))
	if m.commit != "" {
		fmt.Fprintf(w, "- Commit: %s\n", m.commit)
	}
	if m.platform != "" {
		fmt.Fprintf(w, "- Platform: %s\n", m.platform)
	}
	runs := fmt.Sprintf("Medians of up to %d runs, with min and max; fleet figures are one run.", r.runs())
	if r.runs() == 1 {
		runs = "One run of each benchmark."
	}
	fmt.Fprintf(w, "%s\n\n", wrap(fmt.Sprintf("- Machine: %s; Go %s. %s", m.machine, m.goVersion, runs), "  "))

	for _, s := range sections(r) {
		fmt.Fprintf(w, "## %s\n\n%s\n\n", s.title, s.note)
		columns := s.columns
		if columns == nil {
			columns = []string{"Median", "Min", "Max"}
		}
		fmt.Fprintf(w, "| Figure | %s |\n|---|%s\n", strings.Join(columns, " | "), strings.Repeat("---:|", len(columns)))
		for _, row := range s.rows {
			line := "| " + row.name + " |"
			for _, c := range row.cells {
				if c != "" {
					line += " " + c
				}
				line += " |"
			}
			fmt.Fprintln(w, line)
		}
		fmt.Fprintln(w)
		if s.after != "" {
			fmt.Fprintf(w, "%s\n\n", s.after)
		}
	}
	fmt.Fprintf(w, "## Reproduce\n\n%s", reproduce)
}

// shown are the figures of the report's Median | Min | Max tables that ran: what the details
// file sets beside the previous run's.
func shown(secs []section) []shownFigure {
	var out []shownFigure
	for _, s := range secs {
		if s.columns != nil {
			continue
		}
		for _, row := range s.rows {
			if row.cells[0] != notRun && row.cells[1] != "" {
				out = append(out, shownFigure{row.name, row.cells[0], row.cells[1], row.cells[2]})
			}
		}
	}
	return out
}

// wrap breaks text at spaces into lines of at most 100 columns (a longer word, or code span,
// stays whole), the lines after the first starting with indent: the width the repository's
// Markdown keeps.
func wrap(text, indent string) string {
	const width = 100
	var b strings.Builder
	col := 0
	for i, word := range words(text) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case col+1+n > width:
			b.WriteString("\n" + indent)
			col = utf8.RuneCountInString(indent)
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += n
	}
	return b.String()
}

// words splits text at spaces, but not inside a `code span`.
func words(text string) []string {
	var out []string
	open := false // the last word opened a code span it did not close
	for _, f := range strings.Fields(text) {
		if open {
			out[len(out)-1] += " " + f
		} else {
			out = append(out, f)
		}
		if strings.Count(f, "`")%2 == 1 {
			open = !open
		}
	}
	return out
}

const reproduce = "As root, from the repository root:\n\n" +
	"```sh\n" +
	"make bench                 # every benchmark, 5 runs; writes BENCHMARKS.md\n" +
	"BENCH_SMOKE=1 make bench   # every scenario shrunk, one run: a check that they work\n" +
	"BENCH_COUNT=3 BENCH_FILTER=PublishLatency make bench\n" +
	"```\n"
