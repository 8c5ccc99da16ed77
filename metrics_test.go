package main

// Specification of the driver's /metrics as a monitoring system consumes it (metrics.go): every
// metric's name and help pass client_golang's promlint (the Prometheus naming conventions the
// chart's alerts and dashboard rely on); the relist exports what the alerts need to tell a late
// or failing cycle from a healthy one (its interval, when the last cycle ended, the volumes it
// could not check); readiness is a gauge; each volume change is exported before it first happens.
// Pure: the driver's registry is gathered in process, with no API server.

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// metricsDriver is a driver with no volumes and the registry main.go builds, gauges included.
// Its share lookups fail as during an API server outage.
func metricsDriver(t *testing.T) *driver {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("the API server is down")
	})
	d := newTestDriver(t, nil, nil)
	d.shares = share.NewIndex(dyn, func(share.Kind, string) {}) // never started: its cache is empty
	d.metrics.registerDriverGauges(d.gauges())
	return d
}

func TestMetricsPassPromlint(t *testing.T) {
	d := metricsDriver(t)
	mfs, err := d.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// The lint saw the driver's own metrics, not only the Go runtime's.
	for _, name := range []string{"sharedresource_volumes", "sharedresource_ready", "sharedresource_relist_interval_seconds",
		"sharedresource_relist_last_cycle_timestamp_seconds", "sharedresource_volume_reconcile_errors_total"} {
		gathered(t, d, name)
	}
}

// Before any change, each kind of change is a series at 0: an alert or a rate() over it sees the
// first revocation as an increase, not as a new series.
func TestMetricsVolumeChangesStartAtZero(t *testing.T) {
	m := newMetrics()
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "sharedresource_volume_changes_total" {
			for _, s := range mf.GetMetric() {
				got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"revoked": 0, "restored": 0, "refreshed": 0, "keysChanged": 0}
	if !maps.Equal(got, want) {
		t.Errorf("volume_changes_total before any change: %v, want %v", got, want)
	}
}

// sharedresource_ready follows /healthz: 0 until the share caches have synced, then 1.
func TestMetricsReadyGauge(t *testing.T) {
	d := metricsDriver(t) // its share informers never start, so never sync
	if got := gathered(t, d, "sharedresource_ready"); got != 0 || d.ready() {
		t.Errorf("sharedresource_ready = %v before the share caches synced, want 0", got)
	}
	d.shares = &share.Index{} // no informers to wait for: synced
	if got := gathered(t, d, "sharedresource_ready"); got != 1 || !d.ready() {
		t.Errorf("sharedresource_ready = %v once ready, want 1", got)
	}
}

// One relist cycle, whose one volume cannot be checked because the API server is down: the
// interval is exported, the cycle counted and timed, its end recorded, and the volume's failed
// reconcile counted (the alerts on a stuck, slow or failing relist read these).
func TestMetricsRelistCycle(t *testing.T) {
	d := metricsDriver(t)
	rec := volume.Record{VolumeID: "vol-1", PodNamespace: "app", PodName: "p", PodUID: "uid-1", ServiceAccount: "default",
		Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "corp-ca"}}}}
	if err := os.MkdirAll(filepath.Join(d.kubeletRoot, "pods", rec.PodUID), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d.store.MountPoint(rec.VolumeID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.store.Save(rec); err != nil {
		t.Fatal(err)
	}

	before := float64(time.Now().Unix())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// The first cycle starts within one interval (refresh.go), the next one not before 0.9 of
	// it after that: with a second, the test sees exactly one.
	go func() { defer close(done); d.runRelist(ctx, time.Second, 0) }()
	deadline := time.Now().Add(10 * time.Second)
	for gathered(t, d, "sharedresource_relist_cycle_duration_seconds") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no relist cycle within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done

	if got := value(t, d.metrics.relistInterval); got != 1 {
		t.Errorf("relist_interval_seconds = %v, want 1", got)
	}
	if got := value(t, d.metrics.relistLastCycle); got < before || got > float64(time.Now().Unix())+1 {
		t.Errorf("relist_last_cycle_timestamp_seconds = %v, want the cycle's end (after %v)", got, before)
	}
	if got := value(t, d.metrics.reconcileErrors); got != 1 {
		t.Errorf("volume_reconcile_errors_total = %v after one cycle over one volume whose share GET failed, want 1", got)
	}
	if _, ok := d.store.Get(rec.VolumeID); !ok {
		t.Error("the volume was dropped on an API error")
	}
}

// gathered reads one unlabelled metric from the registry: a gauge's or counter's value, a
// histogram's count.
func gathered(t *testing.T, d *driver, name string) float64 {
	t.Helper()
	mfs, err := d.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("%s: not gathered as one series", name)
	return 0
}

// value reads a gauge or counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.GetGauge() != nil {
		return out.GetGauge().GetValue()
	}
	return out.GetCounter().GetValue()
}
