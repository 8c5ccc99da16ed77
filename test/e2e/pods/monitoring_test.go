package pods

// Specification, against the driver the pod suite deployed, of what the chart's monitoring reads:
// every metric the alerts and the Grafana dashboard use is on the driver's /metrics (promtool
// checks that they parse: test/manifests/monitoring_rules_test.go), and the live scrape passes promtool's lint
// (the metric naming conventions the rules rely on; the registry's own lint is the pure
// TestMetricsPassPromlint).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPodsMonitoringUsesOnlyExportedMetrics(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	// A pod mounting a share: the driver's labelled families (CSI calls, API requests) have a
	// series only once used, whatever the suite's other tests did before.
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("monitoring")})
	ns := s.PodNamespace(t, "team-monitoring")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "default"))
	s.CreatePod(t, ns, "reader", framework.ConsumerSpec{Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "reader", 60*time.Second)

	m := s.Scrape(t)
	for name, where := range framework.MonitoringMetricNames(t) {
		if slices.Contains(framework.PrometheusOwnMetrics, name) || slices.Contains(framework.APIServerMetrics, name) {
			continue
		}
		if !m.Has(name, nil) {
			t.Errorf("%s (used by %s) is not on the driver's /metrics", name, strings.Join(slices.Compact(where), ", "))
		}
	}

	// The same scrape, as text, through promtool's lint.
	resp, err := http.Get("http://" + s.NodeIP + ":" + framework.DriverMetricsPort + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(framework.PromtoolBinary(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the driver's /metrics: %v\n%s", err, out)
	}
}
