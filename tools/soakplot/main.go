// Command soakplot draws a soak's metrics.tsv (test/e2e/soak: each driver's RSS, goroutines and
// open file descriptors every 15 s) as an SVG, one panel a measure, one line a node, over the
// minutes of the run, so memory and goroutines can be seen to stay flat; with the run's
// history.json, a grey tick on each panel's axis marks the start of each fault. Standard library only.
//
//	soakplot -in _output/soak/<run>/metrics.tsv -history _output/soak/<run>/history.json -out metrics.svg
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	in := flag.String("in", "-", "the soak's metrics.tsv; - for stdin")
	out := flag.String("out", "-", "the SVG to write; - for stdout")
	history := flag.String("history", "", "the soak's history.json: mark each fault's start")
	flag.Parse()
	if err := run(*in, *history, *out); err != nil {
		fmt.Fprintln(os.Stderr, "soakplot:", err)
		os.Exit(1)
	}
}

func run(in, history, out string) error {
	r := io.Reader(os.Stdin)
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	s, err := parse(r)
	if err != nil {
		return err
	}
	if history != "" {
		if s.faults, err = readFaults(history); err != nil {
			return err
		}
	}
	svg := draw(s)
	if out == "-" {
		_, err = io.WriteString(os.Stdout, svg)
		return err
	}
	return os.WriteFile(out, []byte(svg), 0o644)
}

// sample is one line of metrics.tsv.
type sample struct {
	at     time.Time
	node   string
	values [3]float64 // rss_mib, goroutines, open_fds
}

var measures = [3]string{"RSS (MiB)", "goroutines", "open file descriptors"}

// series are the samples of a run, by node, in time order.
type series struct {
	start time.Time
	nodes []string
	by    map[string][]sample
	// faults are the start times of the faults injected (history.json), if given.
	faults []time.Time
}

// readFaults reads the start of every fault from a soak's history.json.
func readFaults(path string) ([]time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h struct{ Faults []struct{ Start time.Time } }
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []time.Time
	for _, f := range h.Faults {
		out = append(out, f.Start)
	}
	return out, nil
}

// parse reads metrics.tsv: a header, then time, phase, node, rss_mib, goroutines, open_fds.
func parse(r io.Reader) (series, error) {
	s := series{by: map[string][]sample{}}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Split(sc.Text(), "\t")
		if line == 1 {
			if len(f) != 6 || f[0] != "time" || f[2] != "node" {
				return s, fmt.Errorf("line 1: not a soak's metrics.tsv header: %q", sc.Text())
			}
			continue
		}
		if len(f) != 6 {
			return s, fmt.Errorf("line %d: want 6 fields, got %d", line, len(f))
		}
		at, err := time.Parse(time.RFC3339, f[0])
		if err != nil {
			return s, fmt.Errorf("line %d: %w", line, err)
		}
		smp := sample{at: at, node: f[2]}
		for i := range smp.values {
			if smp.values[i], err = strconv.ParseFloat(f[3+i], 64); err != nil {
				return s, fmt.Errorf("line %d: %w", line, err)
			}
		}
		if s.start.IsZero() || at.Before(s.start) {
			s.start = at
		}
		if _, ok := s.by[smp.node]; !ok {
			s.nodes = append(s.nodes, smp.node)
		}
		s.by[smp.node] = append(s.by[smp.node], smp)
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if len(s.nodes) == 0 {
		return s, fmt.Errorf("no samples")
	}
	sort.Strings(s.nodes)
	for _, n := range s.nodes {
		sort.SliceStable(s.by[n], func(i, j int) bool { return s.by[n][i].at.Before(s.by[n][j].at) })
	}
	return s, nil
}

// Layout of the SVG, in pixels.
const (
	width, panelHeight, left, right, top, gap = 760, 170, 60, 150, 30, 50
)

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// draw renders the series: a panel per measure, from 0 to a rounded maximum, the x axis in
// minutes from the first sample.
func draw(s series) string {
	var end float64
	for _, n := range s.nodes {
		smp := s.by[n]
		end = math.Max(end, smp[len(smp)-1].at.Sub(s.start).Minutes())
	}
	end = math.Max(end, 1)
	height := top + len(measures)*(panelHeight+gap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	plotW := float64(width - left - right)
	for m, name := range measures {
		y0 := float64(top + m*(panelHeight+gap))
		ymax := 0.0
		for _, n := range s.nodes {
			for _, smp := range s.by[n] {
				ymax = math.Max(ymax, smp.values[m])
			}
		}
		ymax = niceCeil(ymax * 1.1)
		x := func(t time.Time) float64 { return float64(left) + t.Sub(s.start).Minutes()/end*plotW }
		y := func(v float64) float64 { return y0 + panelHeight - v/ymax*panelHeight }
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-8, name)
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelHeight)
		for i := 0; i <= 4; i++ {
			v := ymax * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y(v)+4, strconv.FormatFloat(v, 'f', -1, 64))
			fmt.Fprintf(&b, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, float64(left)+plotW, y(v), y(v))
		}
		step := niceCeil(end / 6)
		for t := 0.0; t <= end+1e-9; t += step {
			px := float64(left) + t/end*plotW
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", px, y0+panelHeight+16, strconv.FormatFloat(t, 'f', -1, 64))
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">minutes</text>`+"\n", float64(left)+plotW/2, y0+panelHeight+32)
		for _, f := range s.faults {
			if px := x(f); px >= float64(left) && px <= float64(left)+plotW {
				fmt.Fprintf(&b, `<line class="fault" x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#888"/>`+"\n", px, px, y0+panelHeight, y0+panelHeight-8)
			}
		}
		for i, n := range s.nodes {
			var pts []string
			for _, smp := range s.by[n] {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(smp.at), y(smp.values[m])))
			}
			c := colors[i%len(colors)]
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, strings.Join(pts, " "))
			if m == 0 {
				fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", float64(left)+plotW+10, y0+16+float64(i)*16, c, n)
			}
		}
		if m == 0 && len(s.faults) > 0 {
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="#888">ticks: a fault (%d)</text>`+"\n", float64(left)+plotW+10, y0+16+float64(len(s.nodes))*16, len(s.faults))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 at least).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
