package main

// Prometheus metrics, on a registry the driver owns (no global state): what it serves, what it
// changes, what it costs the API server, and the process's own health (goroutines, fds, RSS),
// which the benchmarks use to check for leaks.

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"
)

const metricsPrefix = "sharedresource_"

type metrics struct {
	registry      *prometheus.Registry
	operations    *prometheus.CounterVec   // method, code
	opDuration    *prometheus.HistogramVec // method
	relist        prometheus.Histogram
	volumeChanges *prometheus.CounterVec // change
	apiRequests   *prometheus.CounterVec // verb, resource, code
	// What the alerts need to tell a late or failing relist from a healthy one (the chart's
	// PrometheusRule): the interval a cycle is measured against, when the last one ended, and
	// how many volumes a cycle could not check.
	relistInterval  prometheus.Gauge
	relistLastCycle prometheus.Gauge
	reconcileErrors prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "csi_operations_total", Help: "CSI calls by method and gRPC code.",
		}, []string{"method", "code"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricsPrefix + "csi_operation_duration_seconds", Help: "CSI call latency by method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method"}),
		relist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricsPrefix + "relist_cycle_duration_seconds", Help: "Duration of one relist cycle over all volumes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		volumeChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "volume_changes_total", Help: "Changes of volumes' files, by change: revoked, restored, refreshed, keysChanged (the share's list of keys changed).",
		}, []string{"change"}),
		apiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricsPrefix + "api_requests_total", Help: "Requests the driver sent to the API server, by verb, resource and HTTP code.",
		}, []string{"verb", "resource", "code"}),
		relistInterval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricsPrefix + "relist_interval_seconds", Help: "The --relist-interval: the time from the start of one relist cycle to the start of the next (varied by up to 10%).",
		}),
		relistLastCycle: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricsPrefix + "relist_last_cycle_timestamp_seconds", Help: "Unix time the last relist cycle ended (before the first one: when relisting started).",
		}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricsPrefix + "volume_reconcile_errors_total",
			Help: "Volume reconciles (relist cycles and share changes) that failed on an API or write error; the volume was left as it was.",
		}),
	}
	// Each change is exported from the start, at 0, so that the first one shows in rate().
	for _, c := range fileChangeKinds {
		m.volumeChanges.WithLabelValues(string(c))
	}
	m.registry.MustRegister(m.operations, m.opDuration, m.relist, m.volumeChanges, m.apiRequests,
		m.relistInterval, m.relistLastCycle, m.reconcileErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// driverGauges are what the gauges read from the driver at scrape time, handed over by the
// driver's wiring (driver.go): the metrics sit below every part of the driver and call none.
type driverGauges struct {
	ready       func() bool
	volumes     func() int
	mounts      func() int
	volumeBytes func() int64 // in use, against the budget
	budget      func() int64 // the budget's limit
	sources     func() (entries int, bytes int64, stats cacheStats)
}

// registerDriverGauges adds gauges read from the driver's state at scrape time.
func (m *metrics) registerDriverGauges(d driverGauges) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricsPrefix + name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metricsPrefix + name, Help: help}, f)
	}
	cacheStat := func(pick func(int, int64, cacheStats) float64) func() float64 {
		return func() float64 { return pick(d.sources()) }
	}
	ready := func() float64 {
		if d.ready() {
			return 1
		}
		return 0
	}
	m.registry.MustRegister(
		gauge("ready", "1 when the driver is ready (its /healthz answers 200: the share caches are synced), else 0.", ready),
		gauge("volumes", "Volumes published on this node.", func() float64 { return float64(d.volumes()) }),
		gauge("mounts", "Mounts the driver holds (tmpfs and read-only binds).", func() float64 { return float64(d.mounts()) }),
		gauge("volume_bytes", "Memory the volumes on this node hold (their files' tmpfs pages, charged to the driver's container), counted against the budget.",
			func() float64 { return float64(d.volumeBytes()) }),
		gauge("volume_bytes_budget", "The budget of volume memory on this node (--volume-bytes-budget); 0: none.", func() float64 { return float64(d.budget()) }),
		gauge("source_cache_entries", "Secrets/ConfigMaps in the source cache.", cacheStat(func(n int, _ int64, _ cacheStats) float64 { return float64(n) })),
		gauge("source_cache_bytes", "Bytes of data in the source cache.", cacheStat(func(_ int, b int64, _ cacheStats) float64 { return float64(b) })),
		counter("source_cache_hits_total", "Source lookups served from the cache.", cacheStat(func(_ int, _ int64, s cacheStats) float64 { return float64(s.Hits) })),
		counter("source_cache_misses_total", "Source lookups that needed a GET.", cacheStat(func(_ int, _ int64, s cacheStats) float64 { return float64(s.Misses) })),
		counter("source_cache_evictions_total", "Sources dropped from the cache.", cacheStat(func(_ int, _ int64, s cacheStats) float64 { return float64(s.Evictions) })),
	)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// observeCall records one gRPC call.
func (m *metrics) observeCall(fullMethod string, err error, d time.Duration) {
	method := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	m.operations.WithLabelValues(method, status.Code(err).String()).Inc()
	m.opDuration.WithLabelValues(method).Observe(d.Seconds())
}

// relistStarted records the interval and, until a cycle ends, the start as the last cycle's end.
func (m *metrics) relistStarted(interval time.Duration) {
	m.relistInterval.Set(interval.Seconds())
	m.relistLastCycle.SetToCurrentTime()
}

func (m *metrics) relistCycleDone(d time.Duration) {
	m.relist.Observe(d.Seconds())
	m.relistLastCycle.SetToCurrentTime()
}

func (m *metrics) reconcileFailed() {
	m.reconcileErrors.Inc()
}

func (m *metrics) volumeChanged(change changeKind) {
	m.volumeChanges.WithLabelValues(string(change)).Inc()
}

// countingTransport counts API requests by verb and resource (wrapped around client-go's transport).
type countingTransport struct {
	next http.RoundTripper
	m    *metrics
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.m.apiRequests.WithLabelValues(requestVerb(req), requestResource(req.URL.Path), code).Inc()
	return resp, err
}

func requestVerb(req *http.Request) string {
	switch req.Method {
	case http.MethodGet:
		if req.URL.Query().Get("watch") == "true" {
			return "watch"
		}
		return "get" // list and get are told apart by the path, not needed here
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(req.Method)
}

// requestResource extracts the resource from /api/v1/[namespaces/NS/]RES[/NAME[/SUB]] or
// /apis/GROUP/VERSION/[namespaces/NS/]RES[/NAME[/SUB]].
func requestResource(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return "other"
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	if len(segs) == 0 {
		return "other"
	}
	return segs[0]
}
