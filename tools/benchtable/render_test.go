package main

// Specification of the report's tables: each figure with its median, min, max and runs, the
// floors as rows beside the figures they bound, and no column judging a figure against a target.

import (
	"bytes"
	"strings"
	"testing"
)

func TestReportShowsFiguresAndFloorsWithoutTargets(t *testing.T) {
	raw := "cpu: AMD EPYC\n" +
		latency + "1KiB-2 \t 1 \t 4.49 cold-p50-ms \t 0.64 warm-p50-ms \t 0.83 floor-get-p50-ms \t 1.17 floor-sar-p50-ms" +
		" \t 0.12 floor-syscalls-p50-ms \t 0.20 floor-csi-call-p50-ms\n" +
		latency + "1KiB-2 \t 1 \t 4.60 cold-p50-ms \t 0.70 warm-p50-ms \t 0.85 floor-get-p50-ms \t 1.45 floor-sar-p50-ms" +
		" \t 0.14 floor-syscalls-p50-ms \t 0.19 floor-csi-call-p50-ms\n"
	r, err := parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	render(&out, r, meta{})
	got := out.String()
	for _, want := range []string{
		"| Figure | Median | Min | Max | Runs |\n|---|---:|---:|---:|---:|\n",
		"| cold p50, 1KiB | 4.54 ms | 4.49 ms | 4.60 ms | 2 |\n",
		"| API server floor: GET of the Secret (p50), 1KiB | 0.84 ms | 0.83 ms | 0.85 ms | 2 |\n",
		"| warm p50, 1KiB | 0.67 ms | 0.64 ms | 0.70 ms | 2 |\n",
		// The cold publish against its floor, run by run: 4.49 / (0.83 + 1.17), 4.60 / (0.85 + 1.45).
		"|   the API server's floor for a cold publish (its SAR and GET, asked by the benchmark), 1KiB | 2.15 ms | 2.00 ms | 2.30 ms | 2 |\n",
		"|   cold p50 / that floor, 1KiB | 2.12× | 2.00× | 2.25× | 2 |\n",
		"|   a CSI call's floor (NodeGetCapabilities, which does nothing, on the same connection), 1KiB | 0.195 ms | 0.190 ms | 0.200 ms | 2 |\n",
		// The warm publish against the kernel's floor and the CSI call's, run by run (not the
		// medians' ratio, 0.67 / 0.325 = 2.06): 0.64 / (0.12 + 0.20) = 2.0, 0.70 / (0.14 + 0.19)
		// = 2.12; and what is left: 0.32, 0.37 ms.
		"|   warm p50 / (the kernel's floor + the CSI call's), 1KiB | 2.1× | 2.0× | 2.1× | 2 |\n",
		"|   warm p50 less both floors' p50s (the driver's own work), 1KiB | 0.345 ms | 0.320 ms | 0.370 ms | 2 |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, not := range []string{"Target", "Met |", "**no**", "missed"} {
		if strings.Contains(got, not) {
			t.Errorf("the report has %q: it reports figures and their floors, not targets", not)
		}
	}
}
