package framework

// The chart's monitoring files as the suites read them: which expressions the alert rules
// (rules/shared-resource-csi.yaml) and the Grafana dashboard (dashboards/shared-resource-csi.json)
// hold, and which metric names those use, read with Prometheus's own PromQL parser (the driver's
// module may not depend on Prometheus: the names it exports are testdata/exported-metrics.txt).
// TestPodsMonitoringUsesOnlyExportedMetrics (test/e2e/pods) checks them against a deployed
// driver's /metrics; test/manifests checks with promtool that they parse and that the alerts fire.

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"sigs.k8s.io/yaml"
)

// The chart's alert rules and dashboard, from the repository's root.
const (
	MonitoringRulesFile     = "charts/shared-resource-csi/rules/shared-resource-csi.yaml"
	MonitoringDashboardFile = "charts/shared-resource-csi/dashboards/shared-resource-csi.json"
)

// PrometheusOwnMetrics are series Prometheus makes for each target, not the driver: an alert on
// a driver that cannot be scraped at all can only use them.
var PrometheusOwnMetrics = []string{"up"}

// APIServerMetrics are the API server's own series that an alert reads (the drivers' API Priority
// and Fairness level is the fleet's, not a node's): not on the driver's /metrics.
var APIServerMetrics = []string{"apiserver_flowcontrol_rejected_requests_total"}

// promqlMetricNames returns the metric names expr selects, sorted and unique, as Prometheus's
// own parser reads it (its vector selectors, in ranges and subqueries too). Grafana's variables
// are filled in first, as Grafana does before it sends a query: a duration for
// $__rate_interval and its kin, a regular expression for the others (they stand in label
// matchers).
func promqlMetricNames(expr string) ([]string, error) {
	expr = grafanaVariables.ReplaceAllString(grafanaDurations.ReplaceAllString(expr, "5m"), ".*")
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if name == "" && m.Name == "__name__" && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name != "" {
				out = append(out, name)
			}
		}
		return nil
	})
	slices.Sort(out)
	return slices.Compact(out), nil
}

var (
	grafanaDurations = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b`)
	grafanaVariables = regexp.MustCompile(`\$\{?\w+\}?`)
)

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

// DashboardExprs returns the PromQL of a Grafana dashboard: each panel target's expr (rows'
// panels included), and the expression of each label_values(...) query variable.
func DashboardExprs(b []byte) ([]string, error) {
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

// MonitoringMetricNames returns every metric name the chart's alerts and dashboard use, each
// with where it is used.
func MonitoringMetricNames(t *testing.T) map[string][]string {
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
	b, err := os.ReadFile(MonitoringRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := readRules(b)
	if err != nil {
		t.Fatalf("%s: %v", MonitoringRulesFile, err)
	}
	for _, r := range rules {
		add("alert "+r.Alert, r.Expr)
	}
	if b, err = os.ReadFile(MonitoringDashboardFile); err != nil {
		t.Fatal(err)
	}
	exprs, err := DashboardExprs(b)
	if err != nil {
		t.Fatalf("%s: %v", MonitoringDashboardFile, err)
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
