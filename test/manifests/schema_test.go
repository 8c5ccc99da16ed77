package manifests

// Specification of the chart's values.schema.json: it describes every value of values.yaml, the
// defaults and a values file changing every value pass it, and helm refuses, when it installs
// (a client-side dry run: no cluster), renders or lints, a value of the wrong type, a misspelt
// name, and a value out of the range the driver accepts, naming the value. And of the chart's
// kubeVersion: the oldest Kubernetes minor any test runs (hack/lib/versions.sh), refused below.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/test/e2e/framework"
	"sigs.k8s.io/yaml"
)

// schemaNode is the part of a JSON schema the chart's uses to describe an object's properties.
type schemaNode struct {
	Ref                  string                 `json:"$ref"`
	Type                 any                    `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	AdditionalProperties any                    `json:"additionalProperties"`
	Defs                 map[string]*schemaNode `json:"$defs"`
}

func readSchema(t *testing.T) *schemaNode {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.ChartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	return &s
}

// Every key of values.yaml, at every depth, is a property the schema names, and every object
// of values.yaml the schema describes property by property takes no other.
func TestValuesSchemaDescribesEveryValue(t *testing.T) {
	root := readSchema(t)
	b, err := os.ReadFile(filepath.Join(framework.ChartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	resolve := func(n *schemaNode) *schemaNode {
		if name, ok := strings.CutPrefix(n.Ref, "#/$defs/"); ok {
			if d := root.Defs[name]; d != nil {
				return d
			}
			t.Errorf("values.schema.json: no $defs/%s", name)
		}
		return n
	}
	var walk func(path string, v map[string]any, n *schemaNode)
	walk = func(path string, v map[string]any, n *schemaNode) {
		n = resolve(n)
		if n.Properties == nil {
			return // a Kubernetes type (resources, affinity...), free-form by design
		}
		if n.AdditionalProperties != false {
			t.Errorf("values.schema.json: %q takes names it does not list (additionalProperties is not false)", path)
		}
		for k, sub := range v {
			p := strings.TrimPrefix(path+"."+k, ".")
			prop := n.Properties[k]
			if prop == nil {
				t.Errorf("values.schema.json does not describe %s", p)
				continue
			}
			if m, ok := sub.(map[string]any); ok {
				walk(p, m, prop)
			}
		}
	}
	walk("", values, root)
}

// helmRefuses runs helm with args and the values file of content, and says why helm refused it
// (its output), or fails t when it did not.
func helmRefuses(t *testing.T, content string, args ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(framework.HelmBinary(t), append(args, "-f", f)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none")) // no cluster
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Errorf("helm %s accepted\n%s", strings.Join(args, " "), content)
	}
	return string(out)
}

func TestValuesSchemaRefusesWrongValues(t *testing.T) {
	// The defaults and a file changing every value pass, the same ways.
	nonDefault := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(nonDefault, []byte(framework.NonDefaultValues), 0o600); err != nil {
		t.Fatal(err)
	}
	framework.RunHelm(t, "lint", "--strict", framework.ChartDir, "-f", nonDefault)
	framework.RunHelm(t, "install", "r", framework.ChartDir, "--dry-run=client", "-f", nonDefault)

	for _, tc := range []struct{ name, values, want string }{
		{"a duration given as a number", "driver: {relistInterval: 60}", "/driver/relistInterval"},
		{"a misspelt value", "driver: {relistIntervall: 60s}", "relistIntervall"},
		{"a misspelt top-level value", "imagee: {tag: v1.2.3}", "imagee"},
		{"a string for a boolean", `crds: {install: "no"}`, "/crds/install"},
		{"a list for a string", "kubeletDir: [/var/lib/kubelet]", "/kubeletDir"},
		{"a relative kubelet dir", "kubeletDir: var/lib/kubelet", "/kubeletDir"},
		{"a spread beyond 1, which the driver refuses", "driver: {relistSpread: 2}", "/driver/relistSpread"},
		{"no such pull policy", "image: {pullPolicy: Sometimes}", "/image/pullPolicy"},
		{"a port out of range", "statusController: {probePort: 70000}", "/statusController/probePort"},
		{"a namespace that is no DNS label", "sourceAccess: {namespaces: [Team_A]}", "/sourceAccess/namespaces/0"},
		{"a size that is no quantity", "driver: {tmpfsSize: 4 MB}", "/driver/tmpfsSize"},
	} {
		for _, args := range [][]string{
			{"install", "r", framework.ChartDir, "--dry-run=client"},
			{"template", "r", framework.ChartDir},
			{"lint", "--strict", framework.ChartDir},
		} {
			out := helmRefuses(t, tc.values, args...)
			if !strings.Contains(out, "schema") || !strings.Contains(out, tc.want) {
				t.Errorf("%s: helm %s refused without naming %s against the schema:\n%.600s", tc.name, args[0], tc.want, out)
			}
		}
	}
}

// The chart's kubeVersion admits the oldest minor the tests run and refuses the one before.
func TestChartKubeVersionIsTheOldestTestedMinor(t *testing.T) {
	out, err := exec.Command("bash", "-c", `. hack/lib/versions.sh && echo "${KUBE_MINORS[-1]}"`).Output()
	if err != nil {
		t.Fatalf("hack/lib/versions.sh: %v", err)
	}
	oldest := strings.TrimSpace(string(out))
	major, minor, ok := strings.Cut(oldest, ".")
	if !ok {
		t.Fatalf("oldest minor %q", oldest)
	}
	framework.RunHelm(t, "template", "r", framework.ChartDir, "--kube-version", oldest+".0")
	n, err := strconv.Atoi(minor)
	if err != nil {
		t.Fatalf("oldest minor %q: %v", oldest, err)
	}
	before := major + "." + strconv.Itoa(n-1) + ".99"
	cmd := exec.Command(framework.HelmBinary(t), "template", "r", framework.ChartDir, "--kube-version", before)
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "kubeVersion") {
		t.Errorf("helm template --kube-version %s: %v, want the chart's kubeVersion to refuse it\n%.300s", before, err, b)
	}
}
