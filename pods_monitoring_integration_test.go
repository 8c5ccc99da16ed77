//go:build integration

package main

// Specification, against the driver the pod suite deployed, of what the chart's monitoring reads:
// every metric the alerts and the Grafana dashboard use is on the driver's /metrics (promtool
// checks that they parse: monitoring_rules_integration_test.go), and the live scrape passes promtool's lint
// (the metric naming conventions the rules rely on; the registry's own lint is the pure
// TestMetricsPassPromlint).

import (
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
	s := podsEnv(t, podsShared)
	// A pod mounting a share: the driver's labelled families (CSI calls, API requests) have a
	// series only once used, whatever the suite's other tests did before.
	f := s.newShare(t, map[string][]byte{"ca.crt": []byte("monitoring")})
	ns := s.podNamespace(t, "team-monitoring")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "default"))
	s.createPod(t, ns, "reader", consumerSpec{attrs: f.attrs()})
	s.waitRunning(t, ns, "reader", 60*time.Second)

	m := s.scrape(t)
	for name, where := range monitoringMetricNames(t) {
		if slices.Contains(prometheusOwnMetrics, name) {
			continue
		}
		if !m.has(name, nil) {
			t.Errorf("%s (used by %s) is not on the driver's /metrics", name, strings.Join(slices.Compact(where), ", "))
		}
	}

	// The same scrape, as text, through promtool's lint.
	resp, err := http.Get("http://" + s.nodeIP + ":" + driverMetricsPort + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtoolBinary(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the driver's /metrics: %v\n%s", err, out)
	}
}
