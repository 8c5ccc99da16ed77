package framework

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
	m, err := ParseMetrics(strings.NewReader(text))
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
		if got := m.Sum(c.name, c.match); got != c.want {
			t.Errorf("sum(%s, %v) = %v, want %v", c.name, c.match, got, c.want)
		}
		if got := m.Has(c.name, c.match); got != (c.want != 0) {
			t.Errorf("has(%s, %v) = %v, want %v", c.name, c.match, got, c.want != 0)
		}
	}
	want := RequestCounts{"create/subjectaccessreviews": 3, "get/secrets": 3, "update/leases": 7}
	got := m.requests()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests() = %v, want %v", got, want)
	}
	if got.total() != 6 {
		t.Errorf("total() = %d, want 6 (Leases left out)", got.total())
	}
	if d := got.minus(RequestCounts{"create/subjectaccessreviews": 1, "update/leases": 7}); fmt.Sprint(d) != fmt.Sprint(RequestCounts{"create/subjectaccessreviews": 2, "get/secrets": 3}) {
		t.Errorf("minus = %v", d)
	}

	for _, bad := range []string{"name{label=\"unterminated} 1\n", "name not-a-number\n", "# TYPE x counter\n# TYPE x gauge\nx 1\n"} {
		if _, err := ParseMetrics(strings.NewReader(bad)); err == nil {
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

	byUser, err := auditedRequests(path, start, end, func(ev AuditEvent) bool { return ev.User.Username == driver })
	if err != nil {
		t.Fatal(err)
	}
	want := RequestCounts{"create/subjectaccessreviews": 1, "watch/secrets": 1, "get/secrets": 1, "get/": 1, "update/leases": 1}
	if fmt.Sprint(byUser) != fmt.Sprint(want) {
		t.Errorf("the driver's requests = %v, want %v", byUser, want)
	}
	completed, err := auditedRequests(path, start, end, func(ev AuditEvent) bool {
		return ev.Stage == "ResponseComplete" && strings.HasPrefix(ev.UserAgent, "shared-resource-csi/")
	})
	if err != nil {
		t.Fatal(err)
	}
	want = RequestCounts{"create/subjectaccessreviews": 1, "get/": 1, "update/leases": 1}
	if fmt.Sprint(completed) != fmt.Sprint(want) {
		t.Errorf("the driver's completed requests = %v, want %v", completed, want)
	}
}
