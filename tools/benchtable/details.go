package main

// The details file: what BENCHMARKS.md leaves out of a run, kept beside its raw output
// (_output/bench) for whoever checks a run: its wall time and load, the multi-node suite's
// figure when there is one, the report's figures beside the run it replaces, and every metric
// every benchmark reported.

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// threeNodesIntro introduces the multi-node suite's figure (written by `make test`).
const threeNodesIntro = "Three real nodes (`make test`'s TestNodesAPIRequestsMatchTheModel, test/e2e/nodes): the drivers' requests per node per cycle in the API server's audit log, against docs/scale.md's model:"

func renderDetails(w io.Writer, r *results, m meta) {
	fmt.Fprintf(w, "# Benchmarks: the whole run\n\n")
	fmt.Fprintf(w, "%s\n\n", wrap("The run BENCHMARKS.md is written from, with what that file leaves out. Produced by `"+m.command+"` beside its raw output; not committed.", ""))
	fmt.Fprintf(w, "- Date: %s\n", m.date.UTC().Format("2006-01-02 15:04 MST"))
	for _, kv := range [][2]string{{"Commit", m.commit}, {"Platform", m.platform}, {"Machine", m.machine}, {"Go", m.goVersion},
		{"Runs per figure", "up to " + strconv.Itoa(r.runs())}, {"Wall time of the whole run", m.wall}, {"Load averages (1, 5, 15 min)", m.load}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "- %s: %s\n", kv[0], kv[1])
		}
	}
	fmt.Fprintln(w)
	if m.threeNodes != "" {
		fmt.Fprintf(w, "%s\n\n    %s\n\n", wrap(threeNodesIntro, ""), m.threeNodes)
	}
	if m.baseline != nil {
		renderBaseline(w, m.baseline, shown(sections(r)))
	}
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
