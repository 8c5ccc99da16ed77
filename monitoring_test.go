package main

// Specification of the chart's monitoring files as the tests read them: which metric names a
// PromQL expression uses (promqlMetricNames: not label names, functions, keywords, strings,
// durations or Grafana variables), which expressions the alert rules (rules/shared-resource-csi.yaml)
// and the Grafana dashboard (dashboards/shared-resource-csi.json) hold; that each alert says how
// bad it is and what to check; and, without a cluster, that every metric they use is one the
// driver's registry exports. The same check against a deployed driver's /metrics is
// TestPodsMonitoringUsesOnlyExportedMetrics (test/e2e/pods/monitoring_test.go); that the expressions parse
// and the alerts fire is checked with promtool (test/manifests/monitoring_rules_test.go).

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"
)

const (
	monitoringRulesFile     = "charts/shared-resource-csi/rules/shared-resource-csi.yaml"
	monitoringDashboardFile = "charts/shared-resource-csi/dashboards/shared-resource-csi.json"
)

// prometheusOwnMetrics are series Prometheus makes for each target, not the driver: an alert on
// a driver that cannot be scraped at all can only use them.
var prometheusOwnMetrics = []string{"up"}

// promqlMetricNames returns the metric names expr selects, sorted and unique. It is a scanner,
// not a parser (the driver's module may not depend on Prometheus's): it skips strings, label
// matchers {...}, ranges [...], numbers, Grafana's $variables, keywords and the label lists of
// by/without/on/ignoring/group_left/group_right; an identifier followed by "(" is a function, as
// is an aggregation followed by by/without. What is left is a metric name. That expr parses at
// all is promtool's to check.
func promqlMetricNames(expr string) ([]string, error) {
	names := map[string]bool{}
	s := expr
	i := 0
	// skipTo returns the index after the closing byte matching s[i]'s opener, skipping strings.
	skipTo := func(i int, close byte) (int, error) {
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case close:
				return j + 1, nil
			case '"', '\'', '`':
				end, err := skipString(s, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			}
		}
		return 0, fmt.Errorf("%q: no %q after offset %d", expr, close, i)
	}
	nextWord := func(i int) (word string, next byte) {
		for i < len(s) && unicode.IsSpace(rune(s[i])) {
			i++
		}
		if i == len(s) {
			return "", 0
		}
		j := i
		for j < len(s) && isIdentByte(s[j], j > i) {
			j++
		}
		return strings.ToLower(s[i:j]), s[i]
	}
	for i < len(s) {
		c := s[i]
		switch {
		case unicode.IsSpace(rune(c)):
			i++
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", expr, err)
			}
			i = end
		case c == '{' || c == '[':
			close := map[byte]byte{'{': '}', '[': ']'}[c]
			end, err := skipTo(i, close)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#': // a comment, to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < len(s) && s[i] == '{' {
				end, err := skipTo(i, '}')
				if err != nil {
					return nil, err
				}
				i = end
				continue
			}
			for i < len(s) && isIdentByte(s[i], true) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			// A number or a duration (5m, 1e3, 0x1f): nothing in it is a name.
			for i < len(s) && (isIdentByte(s[i], true) || s[i] == '.') {
				i++
			}
		case isIdentByte(c, false):
			j := i
			for j < len(s) && isIdentByte(s[j], j > i) {
				j++
			}
			word := s[i:j]
			lower := strings.ToLower(word)
			i = j
			after, next := nextWord(i)
			switch {
			case groupingKeywords[lower] && next == '(':
				// by (a, b), on (pod), group_left (node): label names, not metrics.
				for i < len(s) && s[i] != '(' {
					i++
				}
				end, err := skipTo(i, ')')
				if err != nil {
					return nil, err
				}
				i = end
			case promqlKeywords[lower] || groupingKeywords[lower]:
			case next == '(':
				// A function or an aggregation: sum(...), rate(...).
			case aggregations[lower] && (after == "by" || after == "without"):
			default:
				names[word] = true
			}
		default:
			i++
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

var (
	groupingKeywords = setOf("by", "without", "on", "ignoring", "group_left", "group_right")
	promqlKeywords   = setOf("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan")
	aggregations     = setOf("sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk",
		"quantile", "count_values", "limitk", "limit_ratio")
)

func setOf(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

// isIdentByte: a metric name is [a-zA-Z_:][a-zA-Z0-9_:]*.
func isIdentByte(c byte, notFirst bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || notFirst && c >= '0' && c <= '9'
}

// skipString returns the index after the string literal starting at s[i].
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

// alertRule is one rule of a Prometheus rule file (or a PrometheusRule's spec).
type alertRule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string      `json:"name"`
		Rules []alertRule `json:"rules"`
	} `json:"groups"`
}

// readRules reads a Prometheus rule file's rules.
func readRules(b []byte) ([]alertRule, error) {
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, err
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// dashboardExprs returns the PromQL of a Grafana dashboard: each panel target's expr (rows'
// panels included), and the expression of each label_values(...) query variable.
func dashboardExprs(b []byte) ([]string, error) {
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	var out []string
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, t.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string, or (newer Grafana) an object holding it.
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable query %s: %v", v.Query, err)
			}
			q = obj.Query
		}
		// label_values(expr, label) or label_values(label): only expr is PromQL.
		if inner, ok := strings.CutPrefix(strings.TrimSpace(q), "label_values("); ok {
			inner = strings.TrimSuffix(strings.TrimSpace(inner), ")")
			if k := strings.LastIndex(inner, ","); k >= 0 {
				out = append(out, inner[:k])
			}
			continue
		}
		out = append(out, q)
	}
	return out, nil
}

type dashboardPanel struct {
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// monitoringMetricNames returns every metric name the chart's alerts and dashboard use, each
// with where it is used.
func monitoringMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(where, expr string) {
		names, err := promqlMetricNames(expr)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, n := range names {
			used[n] = append(used[n], where)
		}
	}
	b, err := os.ReadFile(monitoringRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := readRules(b)
	if err != nil {
		t.Fatalf("%s: %v", monitoringRulesFile, err)
	}
	for _, r := range rules {
		add("alert "+r.Alert, r.Expr)
	}
	if b, err = os.ReadFile(monitoringDashboardFile); err != nil {
		t.Fatal(err)
	}
	exprs, err := dashboardExprs(b)
	if err != nil {
		t.Fatalf("%s: %v", monitoringDashboardFile, err)
	}
	for _, e := range exprs {
		add("the dashboard", e)
	}
	if len(used) == 0 {
		t.Fatal("the alerts and the dashboard use no metric")
	}
	return used
}

// exportedNames are the sample names a scrape of these families shows: a histogram's _bucket,
// _sum and _count, a summary's _sum and _count (and its own name, for the quantiles).
func exportedNames(mfs []*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[n], out[n+"_sum"], out[n+"_count"] = true, true, true
		default:
			out[n] = true
		}
	}
	return out
}

func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="shared-resource-csi"} == 0`, []string{"up"}},
		{`sharedresource_ready == 0`, []string{"sharedresource_ready"}},
		// Label names in by (...), label values in strings (braces and all), functions.
		{`sum by (method, code) (rate(ops_total{code!~"OK|}{"}[10m])) > 0`, []string{"ops_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(d_seconds_bucket{job=~"$job"}[$__rate_interval])))`, []string{"d_seconds_bucket"}},
		{`sum(rate(x_total[5m])) by (instance)`, []string{"x_total"}},
		{`sum without (verb, resource, code) (rate(r_total{code=~"5..|429"}[10m])) / sum without (verb) (rate(r_total[10m])) > 0.05`, []string{"r_total"}},
		// Binary operators, vector matching and its label lists, keywords, numbers, durations.
		{"rate(s_sum[30m])\n  / rate(s_count[30m])\n> interval_seconds", []string{"interval_seconds", "s_count", "s_sum"}},
		{`time() - last_timestamp_seconds > 3 * interval_seconds`, []string{"interval_seconds", "last_timestamp_seconds"}},
		{`a * on (pod) group_left (node) b offset 5m`, []string{"a", "b"}},
		{`a * ignoring(code) group_right b and bool c unless d or e`, []string{"a", "b", "c", "d", "e"}},
		{`count(x == 0) or vector(0)`, []string{"x"}},
		{`1e3 * c + .5 - 0x1f + Inf + NaN`, []string{"c"}},
		{`level:requests:rate5m > 1 # a comment naming no_metric`, []string{"level:requests:rate5m"}},
		{`topk by (pod) (3, m) + count_values without (x) ("v", n)`, []string{"m", "n"}},
		{`m{a="\"}"} + m2{b='}'}`, []string{"m", "m2"}},
		{`${var} + $job + max(q)`, []string{"q"}},
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
			t.Errorf("%s: %q, want an error (unterminated)", bad, got)
		}
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
	got, err := dashboardExprs([]byte(dashboard))
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
	b, err := os.ReadFile(monitoringRulesFile)
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

// Every metric the alerts and the dashboard use is one the driver's registry exports (checked
// here without a cluster; against a deployed driver in test/e2e/pods/monitoring_test.go).
func TestMonitoringUsesOnlyTheDriversMetrics(t *testing.T) {
	d := metricsDriver(t)
	// Labelled families have no series until first used; give each one.
	d.metrics.observeCall("/csi.v1.Node/NodePublishVolume", nil, 0)
	d.metrics.apiRequests.WithLabelValues("get", "secrets", "200").Inc()
	mfs, err := d.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := exportedNames(mfs)
	for name, where := range monitoringMetricNames(t) {
		if !exported[name] && !slices.Contains(prometheusOwnMetrics, name) {
			t.Errorf("%s (used by %s) is not a metric the driver exports", name, strings.Join(slices.Compact(where), ", "))
		}
	}
}
