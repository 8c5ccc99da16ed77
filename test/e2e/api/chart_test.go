package api

// The chart's render with every value changed (test/manifests checks the render itself, without
// a cluster) is accepted by the real API server.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/test/e2e/framework"
)

// The API server accepts the render with every value changed (a server-side dry run: nothing
// is created), once the namespace it expects exists.
func TestChartNonDefaultRenderIsAccepted(t *testing.T) {
	e := framework.E2e(t)
	values := filepath.Join(t.TempDir(), "values.yaml")
	ns := e.Namespace(t, "srcsi-chart")
	vals := strings.ReplaceAll(framework.NonDefaultValues, "srcsi-chart-test", ns)
	if err := os.WriteFile(values, []byte(vals), 0o600); err != nil {
		t.Fatal(err)
	}
	// Without Prometheus Operator's CRDs the API server knows no PodMonitor or PrometheusRule:
	// those two are checked by TestChartValuesReachTheObjects and promtool (test/manifests/monitoring_rules_test.go).
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	for _, o := range framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir, "-f", values)) {
		if !strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") {
			list["items"] = append(list["items"].([]any), o.Object)
		}
	}
	manifest, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(framework.KubectlBinary(), "--kubeconfig", e.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
	cmd.Stdin = bytes.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply --dry-run=server of the non-default render: %v\n%s", err, out)
	}
}
