package framework

// Specification of the chart's monitoring files (files only: no cluster): which metric names a
// PromQL expression selects, read with Prometheus's own parser; which expressions the alert rules
// and the Grafana dashboard hold; that each alert says how bad it is and what to check; and that
// every metric they use is one the driver exports (testdata/exported-metrics.txt, which the
// root's TestExportedMetricsFileIsTheRegistry keeps equal to the driver's registry). The same
// check against a deployed driver's /metrics is TestPodsMonitoringUsesOnlyExportedMetrics
// (test/e2e/pods); that the expressions parse and the alerts fire, with promtool, is
// test/manifests.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The metric names an expression selects, as Prometheus's parser reads it: not label names,
// functions, keywords, strings or durations; Grafana's variables filled in.
func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="shared-resource-csi"} == 0`, []string{"up"}},
		{`sum by (method, code) (rate(ops_total{code!~"OK|}{"}[10m])) > 0`, []string{"ops_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(d_seconds_bucket{job=~"$job"}[$__rate_interval])))`, []string{"d_seconds_bucket"}},
		{"rate(s_sum[30m])\n  / rate(s_count[30m])\n> interval_seconds", []string{"interval_seconds", "s_count", "s_sum"}},
		{`time() - last_timestamp_seconds > 3 * interval_seconds`, []string{"interval_seconds", "last_timestamp_seconds"}},
		{`a * on (pod) group_left (node) b offset 5m`, []string{"a", "b"}},
		{`count(x == 0) or vector(0)`, []string{"x"}},
		{`level:requests:rate5m > 1 # a comment naming no_metric`, []string{"level:requests:rate5m"}},
		{`{__name__="by_matcher"} + max_over_time(q[5m:1m])`, []string{"by_matcher", "q"}},
	} {
		got, err := promqlMetricNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
		} else if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`m{a="b"`, `rate(m[5m)`, `m{a="b}`} {
		if got, err := promqlMetricNames(bad); err == nil {
			t.Errorf("%s: %q, want an error", bad, got)
		}
	}
}

// Every alert and every dashboard expression of the chart parses and selects a metric.
func TestMonitoringFilesUseMetrics(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	used := MonitoringMetricNames(t)
	if _, ok := used["sharedresource_ready"]; !ok {
		t.Errorf("the alerts and the dashboard do not use sharedresource_ready: %v", used)
	}
	if _, err := os.Stat(MonitoringRulesFile); err != nil {
		t.Fatal(err)
	}
}

func TestDashboardExprs(t *testing.T) {
	const dashboard = `{
	  "panels": [
	    {"type": "row", "panels": [{"targets": [{"expr": "in_a_row"}]}]},
	    {"targets": [{"expr": "a"}, {"expr": "rate(b[5m])"}]}
	  ],
	  "templating": {"list": [
	    {"type": "datasource", "query": "prometheus"},
	    {"type": "query", "query": "label_values(c{job=~\"$job\"}, instance)"},
	    {"type": "query", "query": {"query": "label_values(d, job)", "refId": "x"}},
	    {"type": "query", "query": "label_values(job)"},
	    {"type": "query", "query": "query_result(e)"}
	  ]}
	}`
	got, err := DashboardExprs([]byte(dashboard))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"in_a_row", "a", "rate(b[5m])", `c{job=~"$job"}`, "d", "query_result(e)"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// Each alert says how bad it is (severity critical or warning), waits before firing (for), and
// tells the on-call person what happened (summary) and what to check (description).
func TestAlertsSayWhatToCheck(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, MonitoringRulesFile))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := readRules(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert", r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: twice", r.Alert)
		}
		seen[r.Alert] = true
		if !strings.HasPrefix(r.Alert, "SharedResourceCSI") {
			t.Errorf("%s: not named SharedResourceCSI...", r.Alert)
		}
		if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
			t.Errorf("%s: severity %q", r.Alert, sev)
		}
		if r.For == "" {
			t.Errorf("%s: fires on the first evaluation (no for:)", r.Alert)
		}
		if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 100 {
			t.Errorf("%s: summary %q, description %q", r.Alert, r.Annotations["summary"], r.Annotations["description"])
		}
		if !strings.Contains(r.Annotations["description"], "kubectl") {
			t.Errorf("%s: the description names no kubectl command to check with", r.Alert)
		}
	}
}

// Every metric the alerts and the dashboard use is one the driver exports: the names of
// testdata/exported-metrics.txt, or one of Prometheus's own series, or the API server's one
// series an alert on the drivers' priority level reads.
func TestMonitoringUsesOnlyTheDriversMetrics(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	b, err := os.ReadFile("testdata/exported-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	exported := strings.Fields(string(b))
	if !slices.Contains(exported, "sharedresource_ready") {
		t.Fatalf("testdata/exported-metrics.txt lists no sharedresource_ready: %q", exported)
	}
	for name, where := range MonitoringMetricNames(t) {
		if !slices.Contains(exported, name) && !slices.Contains(PrometheusOwnMetrics, name) && !slices.Contains(APIServerMetrics, name) {
			t.Errorf("%s (used by %s) is not a metric the driver exports (testdata/exported-metrics.txt)", name, strings.Join(slices.Compact(where), ", "))
		}
	}
}
