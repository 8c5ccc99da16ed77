// Command benchtable turns the output of the driver's benchmarks (test/bench, and the root's
// BenchmarkTmpfsWrite, run by hack/bench.sh with -count=N) into BENCHMARKS.md: for each figure
// the median of the N runs with their min and max, the floors beside the figures they bound (what
// the API server or the kernel alone takes for the same work), the machine and the date
// (report.go). -details writes what that file leaves out: every metric, the run's wall time and
// load, and the report's figures beside the previous BENCHMARKS.md's (details.go, baseline.go).
// Standard library only.
//
//	benchtable -in _output/bench/raw.txt -out BENCHMARKS.md -commit $(git rev-parse --short HEAD) -details _output/bench/details.md
//
// A figure whose benchmark did not run (a smoke run, a filtered run) shows as "not run".
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	in := flag.String("in", "-", "benchmark output (go test -bench, text); - for stdin")
	out := flag.String("out", "-", "Markdown file to write; - for stdout")
	details := flag.String("details", "", "Markdown file for what -out leaves out: every metric, the run's wall time and load, the comparison with -baseline")
	commit := flag.String("commit", "", "the commit measured")
	wall := flag.String("wall", "", "wall time of the whole run, for the details")
	command := flag.String("command", "make bench", "the command that produced the output")
	load := flag.String("load", "", "the machine's load averages around the run (/proc/loadavg), for the details")
	smoke := flag.Bool("smoke", false, "the output is from a smoke run (BENCH_SMOKE=1): scenarios shrunk, figures not comparable")
	platform := flag.String("platform", "", "what the benchmarks ran against (the API server's and etcd's versions), for the record and the next run's comparison")
	baselineFile := flag.String("baseline", "", "the BENCHMARKS.md this run replaces: the details show its figures beside this run's")
	nodes := flag.String("nodes", "", "the three real nodes' API requests against the model (TestNodesAPIRequestsMatchTheModel's line, written by `make test`); in the details when the file exists")
	flag.Parse()

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
	m := meta{commit: *commit, command: *command, platform: *platform, machine: machine(res.cpu),
		goVersion: strings.TrimPrefix(runtime.Version(), "go"), smoke: *smoke, date: measured,
		wall: *wall, load: *load, threeNodes: threeNodes(*nodes)}
	if *baselineFile != "" {
		if m.baseline, err = readBaseline(*baselineFile); err != nil {
			fatal(err)
		}
	}
	write(*out, func(w io.Writer) { render(w, res, m) })
	if *details != "" {
		write(*details, func(w io.Writer) { renderDetails(w, res, m) })
	}
}

// threeNodes is the multi-node suite's line from path, with when it was measured; "" when there
// is none.
func threeNodes(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line := strings.TrimSpace(string(b))
	if st, err := os.Stat(path); err == nil {
		line += " (measured " + st.ModTime().UTC().Format("2006-01-02 15:04 MST") + ")"
	}
	return line
}

// write writes what f writes to path, or to stdout for "-".
func write(path string, f func(io.Writer)) {
	var w io.Writer = os.Stdout
	var file *os.File
	if path != "-" {
		var err error
		if file, err = os.Create(path); err != nil {
			fatal(err)
		}
		w = file
	}
	bw := bufio.NewWriter(w)
	f(bw)
	if err := bw.Flush(); err != nil {
		fatal(err)
	}
	// A written file's Close can report what its writes could not (a full disk, say).
	if file != nil {
		if err := file.Close(); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchtable:", err)
	os.Exit(1)
}

// machine describes the CPU, core count and memory.
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
	return strings.Join(parts, ", ")
}
