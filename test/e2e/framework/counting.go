package framework

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
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricAPIRequests is the driver's own count of its API requests (metrics.go).
const MetricAPIRequests = "sharedresource_api_requests_total"

// ScrapedMetrics is one scrape of a /metrics endpoint: every sample, named as in the text.
type ScrapedMetrics model.Vector

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (ScrapedMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, slices.Collect(maps.Values(families))...)
	return ScrapedMetrics(samples), err
}

// ScrapeMetrics reads the /metrics endpoint at url.
func ScrapeMetrics(url string) (ScrapedMetrics, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m, err := ParseMetrics(resp.Body)
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

// Sum adds the values of the samples named name whose labels include match (nil: any labels).
func (m ScrapedMetrics) Sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range m {
		if matches(s, name, match) {
			total += float64(s.Value)
		}
	}
	return total
}

// Has says whether a sample is named name and has labels including match (nil: any labels).
func (m ScrapedMetrics) Has(name string, match map[string]string) bool {
	for _, s := range m {
		if matches(s, name, match) {
			return true
		}
	}
	return false
}

// requests is the driver's own count of its API requests (metricAPIRequests) by verb/resource.
func (m ScrapedMetrics) requests() RequestCounts {
	out := RequestCounts{}
	for _, s := range m {
		if matches(s, MetricAPIRequests, nil) {
			out[string(s.Metric["verb"])+"/"+string(s.Metric["resource"])] += int(s.Value)
		}
	}
	return out
}

// RequestCounts is API requests by "verb/resource".
type RequestCounts map[string]int

// total counts all requests but Leases'.
func (c RequestCounts) total() int {
	n := 0
	for k, v := range c {
		if !strings.HasSuffix(k, "/leases") {
			n += v
		}
	}
	return n
}

func (c RequestCounts) minus(before RequestCounts) RequestCounts {
	out := RequestCounts{}
	for k, v := range c {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// AuditEvent is what the tests read of one line of the API server's audit log (Metadata level:
// one line per stage of a request, the stages of one request sharing its audit ID).
type AuditEvent struct {
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
func auditedRequests(path string, offset, end int64, pick func(AuditEvent) bool) (RequestCounts, error) {
	events, err := readAudit(path, offset, end, pick)
	counts := RequestCounts{}
	for _, ev := range events {
		counts[ev.Verb+"/"+ev.ObjectRef.Resource]++
	}
	return counts, err
}

// AuditMark is a point in the API server's audit log: the start of a measurement window. The
// three windows (apiWindow of the benchmarks, fleetWindow of the fleet benchmark, podsWindow of
// the pod suite) each start with one and read what was logged since.
type AuditMark struct {
	path   string
	offset int64
}

// MarkAudit marks the end of the audit log at path, as it is now.
func MarkAudit(path string) (AuditMark, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return AuditMark{}, fmt.Errorf("the API server's audit log: %w", err)
	}
	return AuditMark{path: path, offset: fi.Size()}, nil
}

// Events are the requests logged since the mark, each once, at its first line pick accepts.
func (m AuditMark) Events(pick func(AuditEvent) bool) ([]AuditEvent, error) {
	now, err := MarkAudit(m.path)
	if err != nil {
		return nil, err
	}
	return readAudit(m.path, m.offset, now.offset, pick)
}

// Requests counts the requests logged since the mark by "verb/resource", each once.
func (m AuditMark) Requests(pick func(AuditEvent) bool) (RequestCounts, error) {
	now, err := MarkAudit(m.path)
	if err != nil {
		return nil, err
	}
	return auditedRequests(m.path, m.offset, now.offset, pick)
}

// readAudit reads the requests the audit log at path recorded between the byte offsets offset
// and end: each request once, at its first line that pick accepts. A line that is not a whole
// event (the last one, being written) is skipped.
func readAudit(path string, offset, end int64, pick func(AuditEvent) bool) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []AuditEvent
	sc := bufio.NewScanner(io.LimitReader(f, end-offset))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev AuditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !pick(ev) || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		out = append(out, ev)
	}
	return out, sc.Err()
}
