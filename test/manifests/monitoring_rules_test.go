package manifests

// Specification, with promtool (Prometheus's own rule checker, from the Debian package prometheus
// that hack/install-deps.sh installs), of the chart's monitoring as rendered: the PrometheusRule's
// rules parse, their annotation templates included; each alert fires when its failure lasts past
// its for: and not on a healthy driver (testdata/monitoring/alerts_test.yaml); every expression
// of the Grafana dashboard parses. promtool, not Prometheus's parser as a Go dependency: the
// driver's module must not depend on Prometheus. No cluster is needed (the tag: the test needs
// helm and promtool, which `make tools` installs).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"
)

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(framework.PromtoolBinary(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

// renderedRuleSpec is the spec of the PrometheusRule the chart renders: a Prometheus rule file.
func renderedRuleSpec(t *testing.T) map[string]any {
	t.Helper()
	objs := framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir, "--set", "monitoring.prometheusRule.enabled=true",
		"--show-only", "templates/prometheusrule.yaml"))
	rule := framework.FindObject(objs, "PrometheusRule", "shared-resource-csi")
	if rule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	spec, ok := rule.Object["spec"].(map[string]any)
	if !ok {
		t.Fatalf("PrometheusRule spec: %v", rule.Object["spec"])
	}
	return spec
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMonitoringRulesParse(t *testing.T) {
	dir := t.TempDir()
	writeYAML(t, filepath.Join(dir, "rules.yaml"), renderedRuleSpec(t))
	runPromtool(t, dir, "check", "rules", "rules.yaml")
}

// When each alert fires, and with which labels. The rules are tested without their
// annotations, which promtool would otherwise compare word for word (their templates are
// checked by TestMonitoringRulesParse).
func TestMonitoringAlertsFire(t *testing.T) {
	spec := renderedRuleSpec(t)
	for _, g := range spec["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			delete(r.(map[string]any), "annotations")
		}
	}
	dir := t.TempDir()
	writeYAML(t, filepath.Join(dir, "rules.yaml"), spec)
	tests, err := os.ReadFile("testdata/monitoring/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "test", "rules", "alerts_test.yaml")
}

// Every expression of the dashboard parses: each becomes a recording rule for promtool, with
// Grafana's variables replaced as Grafana replaces them ($__rate_interval by a duration, the
// others by a regex inside a label matcher).
func TestMonitoringDashboardExprsParse(t *testing.T) {
	b, err := os.ReadFile(framework.MonitoringDashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs, err := framework.DashboardExprs(b)
	if err != nil {
		t.Fatal(err)
	}
	durations := regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b`)
	variables := regexp.MustCompile(`\$\{?\w+\}?`)
	var rules []map[string]string
	for i, e := range exprs {
		e = variables.ReplaceAllString(durations.ReplaceAllString(e, "5m"), ".*")
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:expr_%d", i), "expr": e})
	}
	dir := t.TempDir()
	writeYAML(t, filepath.Join(dir, "dashboard.yaml"), map[string]any{
		"groups": []any{map[string]any{"name": "dashboard", "rules": rules}},
	})
	runPromtool(t, dir, "check", "rules", "dashboard.yaml")
}
