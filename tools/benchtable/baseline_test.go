package main

// Specifies the side-by-side section: the previous BENCHMARKS.md's figures are read back by name
// and shown beside this run's, with a ratio only where the units agree.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBaselineShowsThePreviousMedianBesideThisOne(t *testing.T) {
	prev := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(prev, []byte(`# Benchmarks

- Date: 2026-11-24 10:18 UTC
- Commit: 305f37b
- Platform: Kubernetes v1.34.4 (kube-apiserver), etcd 3.6.4

| Figure | Median | Min | Max | Runs | Target | Met |
|---|---:|---:|---:|---:|---|---|
| cold p50, 1KiB | 4.92 ms | 4.43 ms | 6.30 ms | 5 | ≤ 5 ms | yes |
| warm p50, 1KiB | not run | | | | ≤ 0.5 ms | |
| driver CPU per cold publish (p50), 1KiB | 2.44 ms | 1.98 ms | 2.49 ms | 5 |  |  |

## Against the previous run

The run this file replaced, figure by figure.

| Figure | Previous run | This run | This / previous |
|---|---:|---:|---:|
| cold p50, 1KiB | 6.00 ms [5.00 ms, 7.00 ms] | 4.92 ms [4.43 ms, 6.30 ms] | 0.82 |
| RSS, 1000 volumes, 0 Secrets | 40.0 MiB [39.0 MiB, 41.0 MiB] | 37.3 MiB [34.2 MiB, 38.4 MiB] | 0.93 |

## Memory

| Figure | Median | Min | Max | Runs |
|---|---:|---:|---:|---:|
| RSS, 1000 volumes, 0 Secrets | 37.3 MiB | 34.2 MiB | 38.4 MiB | 5 |
`), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := readBaseline(prev)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	renderBaseline(&out, b, []shownFigure{
		{"cold p50, 1KiB", "4.00 ms", "3.90 ms", "4.10 ms"},
		{"warm p50, 1KiB", "0.90 ms", "0.80 ms", "1.00 ms"},
		{"RSS, 1000 volumes, 0 Secrets", "36.0 MiB", "35.0 MiB", "37.0 MiB"},
		{"100 volumes: publishes/s", "900 /s", "800 /s", "1000 /s"},
	})
	got := out.String()
	for _, want := range []string{
		"Kubernetes v1.34.4",
		// Its own figures, not those its side-by-side section shows for the run before it, and
		// those of the tables after that section (RSS: Memory's only).
		"| cold p50, 1KiB | 4.92 ms [4.43 ms, 6.30 ms] | 4.00 ms [3.90 ms, 4.10 ms] | 0.81 |",
		"| warm p50, 1KiB | not run [, ] | 0.90 ms [0.80 ms, 1.00 ms] |  |",
		"| RSS, 1000 volumes, 0 Secrets | 37.3 MiB [34.2 MiB, 38.4 MiB] | 36.0 MiB [35.0 MiB, 37.0 MiB] | 0.97 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "publishes/s") || strings.Contains(got, "driver CPU") {
		t.Errorf("a figure the previous run lacks, or one not compared, is shown:\n%s", got)
	}
}

// The next run reads what this one writes: every compared figure of the report, by name, with
// the median, min and max it shows, and the header lines. The committed BENCHMARKS.md, which the
// first run after it compares against, reads the same.
func TestBaselineReadsTheReportsLayout(t *testing.T) {
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
	render(&out, r, specMeta)
	written := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(written, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var compared []shownFigure
	for _, f := range shown(sections(r)) {
		if comparedFigure.MatchString(f.name) {
			compared = append(compared, f)
		}
	}
	// Latency (4 figures at 3 sizes), API requests per publish (2 at 3), unpublishes/s (2), RSS (3).
	if len(compared) != 23 {
		t.Fatalf("the report shows %d compared figures, want 23: %v", len(compared), compared)
	}
	for _, path := range []string{written, "../../BENCHMARKS.md"} {
		b, err := readBaseline(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.header) != 3 || !strings.HasPrefix(b.header[0], "Date: ") || !strings.HasPrefix(b.header[1], "Commit: ") ||
			!strings.HasPrefix(b.header[2], "Platform: ") {
			t.Errorf("%s: header %q, want its Date, Commit and Platform", path, b.header)
		}
		if len(b.rows) != len(compared) {
			t.Errorf("%s: %d figures read, want %d", path, len(b.rows), len(compared))
		}
		for _, c := range compared {
			got, ok := b.rows[c.name]
			if !ok {
				t.Errorf("%s: %q not read", path, c.name)
			} else if path == written && got != (baselineRow{c.median, c.min, c.max}) {
				t.Errorf("%s: %q read as %v, written as %v", path, c.name, got, c)
			}
		}
	}
}
