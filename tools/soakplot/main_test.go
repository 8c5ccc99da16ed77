package main

import (
	"os"
	"strings"
	"testing"
)

const metrics = "time\tphase\tnode\trss_mib\tgoroutines\topen_fds\n" +
	"2026-11-26T08:26:30Z\twarm\tnode-b\t26.5\t37\t12\n" +
	"2026-11-26T08:26:30Z\twarm\tnode-a\t20.0\t30\t10\n" +
	"2026-11-26T08:36:30Z\trun\tnode-a\t22.0\t31\t11\n" +
	"2026-11-26T08:36:30Z\trun\tnode-b\t28.0\t36\t12\n"

func TestPlotHasALinePerNodeInEveryPanel(t *testing.T) {
	s, err := parse(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.nodes, ","); got != "node-a,node-b" {
		t.Fatalf("nodes %s, want node-a,node-b", got)
	}
	svg := draw(s)
	if n := strings.Count(svg, "<polyline"); n != 2*len(measures) {
		t.Errorf("%d lines, want %d (2 nodes, %d panels)", n, 2*len(measures), len(measures))
	}
	for _, want := range []string{"RSS (MiB)", "goroutines", "open file descriptors", "node-a", "node-b", "minutes"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	// node-a's RSS goes from 20 to 22 MiB over 10 minutes: its first point is at the left edge.
	if !strings.Contains(svg, `points="60.0,`) {
		t.Errorf("the first sample is not at the left edge:\n%s", svg)
	}
}

func TestPlotMarksEachFaultWithinTheRun(t *testing.T) {
	s, err := parse(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	history := dir + "/history.json"
	faults := `{"Faults": [{"Kind": "driver-sigkill", "Start": "2026-11-26T08:30:00Z"}, {"Kind": "node-lost", "Start": "2026-11-26T08:31:00Z"}]}`
	if err := os.WriteFile(history, []byte(faults), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.faults, err = readFaults(history); err != nil {
		t.Fatal(err)
	}
	svg := draw(s)
	if n := strings.Count(svg, `class="fault"`); n != 2*len(measures) {
		t.Errorf("%d fault lines, want %d (2 faults, %d panels)", n, 2*len(measures), len(measures))
	}
	if !strings.Contains(svg, "a fault (2)") {
		t.Error("the legend does not count the faults")
	}
}

func TestParseRefusesWhatIsNotMetrics(t *testing.T) {
	for name, in := range map[string]string{
		"no header":  "2026-11-26T08:26:30Z\twarm\tn\t1\t2\t3\n",
		"short line": "time\tphase\tnode\trss_mib\tgoroutines\topen_fds\n2026-11-26T08:26:30Z\twarm\tn\t1\n",
		"bad number": "time\tphase\tnode\trss_mib\tgoroutines\topen_fds\n2026-11-26T08:26:30Z\twarm\tn\tx\t2\t3\n",
		"empty":      "time\tphase\tnode\trss_mib\tgoroutines\topen_fds\n",
	} {
		if _, err := parse(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.5: 1, 3: 5, 37: 50, 120: 200, 9.5: 10} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}
