package main

// The previous run, side by side: `-baseline FILE` reads the BENCHMARKS.md a run replaces and the
// details file shows its medians beside this run's for the figures a change of platform (a
// Kubernetes release, a container runtime) or of the driver would move: publish latency,
// unpublish throughput, memory and API requests. Figures are matched by their row's name; a ratio
// is given only where both have the same unit. The reader takes any table whose rows are
// | name | median | min | max |..., so both the report's layout and the older one with a Runs
// column (and the side-by-side section it carried) read alike.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// baselineRow is one figure of the previous run: its median, min and max as printed.
type baselineRow struct{ median, min, max string }

// baseline is the previous run: its header lines (date, commit, platform) and its figures.
type baseline struct {
	header []string
	rows   map[string]baselineRow
}

// comparedFigure picks the rows shown side by side.
var comparedFigure = regexp.MustCompile(`^(cold|warm) p(50|99), |unpublishes/s$|^RSS, |^API requests per`)

// baselineHeading opens the side-by-side section.
const baselineHeading = "## Against the previous run"

// readBaseline parses a BENCHMARKS.md written by benchtable, in its current layout or an older one.
func readBaseline(path string) (*baseline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := &baseline{rows: map[string]baselineRow{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	// The file's own side-by-side section names the same figures: its rows are the run before
	// it, not this one, and are skipped.
	inBaseline := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inBaseline = strings.TrimSpace(line) == baselineHeading
		case inBaseline:
		case strings.HasPrefix(line, "- Date: "), strings.HasPrefix(line, "- Commit: "), strings.HasPrefix(line, "- Platform: "):
			b.header = append(b.header, strings.TrimPrefix(line, "- "))
		case strings.HasPrefix(line, "| "):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) < 4 {
				continue
			}
			name := strings.TrimSpace(cells[0])
			if comparedFigure.MatchString(name) {
				b.rows[name] = baselineRow{strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])}
			}
		}
	}
	return b, sc.Err()
}

// quantity splits "4.92 ms" into 4.92 and "ms"; ok is false for "not run" and the like.
func quantity(s string) (v float64, unit string, ok bool) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), " ")
	num = strings.TrimSuffix(num, "×")
	v, err := strconv.ParseFloat(num, 64)
	return v, unit, err == nil
}

// shownFigure is one figure of this run's report as printed.
type shownFigure struct{ name, median, min, max string }

// renderBaseline writes the side-by-side section: each compared figure of this run that the
// previous run has too.
func renderBaseline(w io.Writer, b *baseline, current []shownFigure) {
	fmt.Fprintf(w, "%s\n\n", baselineHeading)
	fmt.Fprintf(w, "The run in the BENCHMARKS.md this one replaces (%s), figure by figure: its median [min, max] beside this run's, and this run's median over its median.\n\n", strings.Join(b.header, "; "))
	fmt.Fprintf(w, "| Figure | Previous run | This run | This / previous |\n|---|---:|---:|---:|\n")
	for _, c := range current {
		p, ok := b.rows[c.name]
		if !ok {
			continue
		}
		ratio := ""
		pv, pu, pok := quantity(p.median)
		cv, cu, cok := quantity(c.median)
		if pok && cok && pu == cu && pv != 0 {
			ratio = fmt.Sprintf("%.2f", cv/pv)
		}
		fmt.Fprintf(w, "| %s | %s [%s, %s] | %s [%s, %s] | %s |\n", c.name, p.median, p.min, p.max, c.median, c.min, c.max, ratio)
	}
	fmt.Fprintln(w)
}
