package main

// Specification of how the tests count what the driver did, the ground under every figure the
// cluster suites and the benchmarks assert or report:
//   - a /metrics endpoint (the driver's, the API server's) is read with expfmt, the Prometheus
//     text format's own parser, into samples named as the text names them (a histogram's
//     _bucket, _sum and _count included), summed by name and labels;
//   - the API server's audit log is read between two offsets, each request counted once, by
//     "verb/resource", whatever stages it logged, for the requests a caller picks.
// The helpers are pure, so they are specified here on fixed input, without a cluster.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricAPIRequests is the driver's own count of its API requests (metrics.go).
const metricAPIRequests = "sharedresource_api_requests_total"

// scrapedMetrics is one scrape of a /metrics endpoint: every sample, named as in the text.
type scrapedMetrics model.Vector

// parseMetrics reads the Prometheus text format.
func parseMetrics(r io.Reader) (scrapedMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, slices.Collect(maps.Values(families))...)
	return scrapedMetrics(samples), err
}

// scrapeMetrics reads the /metrics endpoint at url.
func scrapeMetrics(url string) (scrapedMetrics, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m, err := parseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", url, err)
	}
	return m, nil
}

// matches says whether sample s is named name and has every label of match.
func matches(s *model.Sample, name string, match map[string]string) bool {
	if string(s.Metric[model.MetricNameLabel]) != name {
		return false
	}
	for k, v := range match {
		if got, ok := s.Metric[model.LabelName(k)]; !ok || string(got) != v {
			return false
		}
	}
	return true
}

// sum adds the values of the samples named name whose labels include match (nil: any labels).
func (m scrapedMetrics) sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range m {
		if matches(s, name, match) {
			total += float64(s.Value)
		}
	}
	return total
}

// has says whether a sample is named name and has labels including match (nil: any labels).
func (m scrapedMetrics) has(name string, match map[string]string) bool {
	for _, s := range m {
		if matches(s, name, match) {
			return true
		}
	}
	return false
}

// requests is the driver's own count of its API requests (metricAPIRequests) by verb/resource.
func (m scrapedMetrics) requests() requestCounts {
	out := requestCounts{}
	for _, s := range m {
		if matches(s, metricAPIRequests, nil) {
			out[string(s.Metric["verb"])+"/"+string(s.Metric["resource"])] += int(s.Value)
		}
	}
	return out
}

// requestCounts is API requests by "verb/resource".
type requestCounts map[string]int

// total counts all requests but Leases'.
func (c requestCounts) total() int {
	n := 0
	for k, v := range c {
		if !strings.HasSuffix(k, "/leases") {
			n += v
		}
	}
	return n
}

func (c requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// auditEvent is what the tests read of one line of the API server's audit log (Metadata level:
// one line per stage of a request, the stages of one request sharing its audit ID).
type auditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	// Where the request came from (the driver's pod is on the host network: its node's address).
	SourceIPs []string `json:"sourceIPs"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource string `json:"resource"` // "" for a request about no object (e.g. /version)
	} `json:"objectRef"`
	// When the API server received the request, and when it reached this line's stage.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// auditedRequests counts, by "verb/resource", the requests the audit log at path recorded
// between the byte offsets offset and end: each request once, at its first line that pick
// accepts.
func auditedRequests(path string, offset, end int64, pick func(auditEvent) bool) (requestCounts, error) {
	events, err := readAudit(path, offset, end, pick)
	counts := requestCounts{}
	for _, ev := range events {
		counts[ev.Verb+"/"+ev.ObjectRef.Resource]++
	}
	return counts, err
}

// auditMark is a point in the API server's audit log: the start of a measurement window. The
// three windows (apiWindow of the benchmarks, fleetWindow of the fleet benchmark, podsWindow of
// the pod suite) each start with one and read what was logged since.
type auditMark struct {
	path   string
	offset int64
}

// markAudit marks the end of the audit log at path, as it is now.
func markAudit(path string) (auditMark, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return auditMark{}, fmt.Errorf("the API server's audit log: %w", err)
	}
	return auditMark{path: path, offset: fi.Size()}, nil
}

// events are the requests logged since the mark, each once, at its first line pick accepts.
func (m auditMark) events(pick func(auditEvent) bool) ([]auditEvent, error) {
	now, err := markAudit(m.path)
	if err != nil {
		return nil, err
	}
	return readAudit(m.path, m.offset, now.offset, pick)
}

// requests counts the requests logged since the mark by "verb/resource", each once.
func (m auditMark) requests(pick func(auditEvent) bool) (requestCounts, error) {
	now, err := markAudit(m.path)
	if err != nil {
		return nil, err
	}
	return auditedRequests(m.path, m.offset, now.offset, pick)
}

// readAudit reads the requests the audit log at path recorded between the byte offsets offset
// and end: each request once, at its first line that pick accepts. A line that is not a whole
// event (the last one, being written) is skipped.
func readAudit(path string, offset, end int64, pick func(auditEvent) bool) ([]auditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []auditEvent
	sc := bufio.NewScanner(io.LimitReader(f, end-offset))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !pick(ev) || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		out = append(out, ev)
	}
	return out, sc.Err()
}

// The text format as the driver's and the API server's registries write it: HELP and TYPE
// lines, labels in any order with escaped values, a histogram (read as its _bucket, _sum and
// _count samples) and an untyped sample.
func TestScrapedMetricsReadTheTextFormat(t *testing.T) {
	const text = `# HELP sharedresource_api_requests_total API requests.
# TYPE sharedresource_api_requests_total counter
sharedresource_api_requests_total{code="201",resource="subjectaccessreviews",verb="create"} 3
sharedresource_api_requests_total{code="200",resource="secrets",verb="get"} 2
sharedresource_api_requests_total{verb="get",resource="secrets",code="404"} 1
sharedresource_api_requests_total{code="200",resource="leases",verb="update"} 7
# HELP sharedresource_volumes Volumes.
# TYPE sharedresource_volumes gauge
sharedresource_volumes 10
# HELP sharedresource_relist_cycle_duration_seconds Relist cycles.
# TYPE sharedresource_relist_cycle_duration_seconds histogram
sharedresource_relist_cycle_duration_seconds_bucket{le="0.1"} 4
sharedresource_relist_cycle_duration_seconds_bucket{le="+Inf"} 5
sharedresource_relist_cycle_duration_seconds_sum 0.75
sharedresource_relist_cycle_duration_seconds_count 5
# TYPE apiserver_request_total counter
apiserver_request_total{resource="secrets",verb="GET",path="/a \"b\"\\c"} 4
apiserver_request_total{resource="secrets",verb="LIST"} 1e+06
untyped_sample 1
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"sharedresource_api_requests_total", nil, 13},
		{"sharedresource_api_requests_total", map[string]string{"verb": "get", "resource": "secrets"}, 3},
		{"sharedresource_api_requests_total", map[string]string{"verb": "get", "resource": "secrets", "code": "404"}, 1},
		{"sharedresource_api_requests_total", map[string]string{"verb": "delete"}, 0},
		{"sharedresource_volumes", nil, 10},
		{"sharedresource_relist_cycle_duration_seconds_count", nil, 5},
		{"sharedresource_relist_cycle_duration_seconds_sum", nil, 0.75},
		{"sharedresource_relist_cycle_duration_seconds_bucket", map[string]string{"le": "0.1"}, 4},
		{"sharedresource_relist_cycle_duration_seconds", nil, 0}, // a histogram has no sample of its own name
		{"apiserver_request_total", map[string]string{"verb": "GET", "path": `/a "b"\c`}, 4},
		{"apiserver_request_total", nil, 1e6 + 4},
		{"untyped_sample", nil, 1},
		{"sharedresource_volume", nil, 0}, // a prefix of a name is not the name
	} {
		if got := m.sum(c.name, c.match); got != c.want {
			t.Errorf("sum(%s, %v) = %v, want %v", c.name, c.match, got, c.want)
		}
		if got := m.has(c.name, c.match); got != (c.want != 0) {
			t.Errorf("has(%s, %v) = %v, want %v", c.name, c.match, got, c.want != 0)
		}
	}
	want := requestCounts{"create/subjectaccessreviews": 3, "get/secrets": 3, "update/leases": 7}
	got := m.requests()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests() = %v, want %v", got, want)
	}
	if got.total() != 6 {
		t.Errorf("total() = %d, want 6 (Leases left out)", got.total())
	}
	if d := got.minus(requestCounts{"create/subjectaccessreviews": 1, "update/leases": 7}); fmt.Sprint(d) != fmt.Sprint(requestCounts{"create/subjectaccessreviews": 2, "get/secrets": 3}) {
		t.Errorf("minus = %v", d)
	}

	for _, bad := range []string{"name{label=\"unterminated} 1\n", "name not-a-number\n", "# TYPE x counter\n# TYPE x gauge\nx 1\n"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMetrics(%q) accepted it", bad)
		}
	}
}

// Each request once, whatever stages it logged, only between the offsets, only those picked; a
// line being written is skipped.
func TestAuditedRequestsCountEachRequestOnce(t *testing.T) {
	const (
		driver = "system:serviceaccount:csi-sharedresource:shared-resource-csi-driver"
		ua     = "shared-resource-csi/v1"
	)
	line := func(id, stage, user, agent, verb, resource string) string {
		ev := map[string]any{"auditID": id, "stage": stage, "user": map[string]any{"username": user}, "userAgent": agent, "verb": verb}
		if resource != "" {
			ev["objectRef"] = map[string]any{"resource": resource}
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	before := line("0", "ResponseComplete", driver, ua, "get", "secrets") // before the window
	window := line("1", "RequestReceived", driver, ua, "create", "subjectaccessreviews") +
		line("1", "ResponseComplete", driver, ua, "create", "subjectaccessreviews") +
		line("2", "RequestReceived", "admin", "kubectl/v1", "get", "secrets") + // someone else's
		line("2", "ResponseComplete", "admin", "kubectl/v1", "get", "secrets") +
		line("3", "RequestReceived", driver, ua, "watch", "secrets") + // a watch, still open
		line("3", "ResponseStarted", driver, ua, "watch", "secrets") +
		line("4", "RequestReceived", driver, ua, "get", "secrets") + // not complete yet
		line("5", "ResponseComplete", driver, ua, "get", "") + // no object: /version
		line("6", "RequestReceived", driver, ua, "update", "leases") +
		line("6", "ResponseComplete", driver, ua, "update", "leases") +
		`{"auditID":"7","stage":"Resp` // being written
	after := "\n" + line("8", "ResponseComplete", driver, ua, "get", "secrets") // after the window
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(before+window+after), 0o600); err != nil {
		t.Fatal(err)
	}
	start, end := int64(len(before)), int64(len(before)+len(window))

	byUser, err := auditedRequests(path, start, end, func(ev auditEvent) bool { return ev.User.Username == driver })
	if err != nil {
		t.Fatal(err)
	}
	want := requestCounts{"create/subjectaccessreviews": 1, "watch/secrets": 1, "get/secrets": 1, "get/": 1, "update/leases": 1}
	if fmt.Sprint(byUser) != fmt.Sprint(want) {
		t.Errorf("the driver's requests = %v, want %v", byUser, want)
	}
	completed, err := auditedRequests(path, start, end, func(ev auditEvent) bool {
		return ev.Stage == "ResponseComplete" && strings.HasPrefix(ev.UserAgent, "shared-resource-csi/")
	})
	if err != nil {
		t.Fatal(err)
	}
	want = requestCounts{"create/subjectaccessreviews": 1, "get/": 1, "update/leases": 1}
	if fmt.Sprint(completed) != fmt.Sprint(want) {
		t.Errorf("the driver's completed requests = %v, want %v", completed, want)
	}
}
