package main

// Specification of testdata/exported-metrics.txt: the names a scrape of the driver's /metrics
// shows, one per line, exactly what the driver's registry exports (metrics.go), its gauges and
// the Go runtime's included. The suites in test/ cannot import the driver (package main) and
// the driver's module may not depend on Prometheus's PromQL parser, so the file is the contract
// between the two: test/e2e/framework checks with that parser that every metric the chart's
// alerts and dashboard use is in it. After a change to the metrics, write it anew with
//
//	go test -run TestExportedMetricsFileIsTheRegistry -update-exported-metrics .

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

const exportedMetricsFile = "testdata/exported-metrics.txt"

var updateExportedMetrics = flag.Bool("update-exported-metrics", false, "write "+exportedMetricsFile+" from the driver's registry")

func TestExportedMetricsFileIsTheRegistry(t *testing.T) {
	d := metricsDriver(t)
	// Labelled families have no series until first used; give each one.
	d.metrics.observeCall("/csi.v1.Node/NodePublishVolume", nil, 0)
	d.metrics.apiRequests.WithLabelValues("get", "secrets", "200").Inc()
	mfs, err := d.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := exportedNames(mfs)
	if !slices.Contains(want, "sharedresource_ready") {
		t.Fatalf("the registry exports no sharedresource_ready: %q", want)
	}
	text := strings.Join(want, "\n") + "\n"
	if *updateExportedMetrics {
		if err := os.WriteFile(exportedMetricsFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(exportedMetricsFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != text {
		t.Errorf("%s is not what the driver exports; write it anew with\n"+
			"  go test -run TestExportedMetricsFileIsTheRegistry -update-exported-metrics .\ngot:\n%s\nwant:\n%s", exportedMetricsFile, got, text)
	}
}

// exportedNames are the sample names a scrape of these families shows, sorted: a histogram's
// _bucket, _sum and _count, a summary's _sum and _count (and its own name, for the quantiles).
func exportedNames(mfs []*dto.MetricFamily) []string {
	var out []string
	for _, mf := range mfs {
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out = append(out, n+"_bucket", n+"_sum", n+"_count")
		case dto.MetricType_SUMMARY:
			out = append(out, n, n+"_sum", n+"_count")
		default:
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
