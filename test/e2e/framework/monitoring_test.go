package framework

import (
	"os"
	"slices"
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
