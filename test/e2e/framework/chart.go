package framework

// The chart rendered by helm and promtool, shared by test/manifests and the pod suite.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// RenderedObjects parses a multi-document render into objects.
func RenderedObjects(t testing.TB, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("parsing the render: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// FindObject is the object of kind and name among objs, or nil.
func FindObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// PromtoolBinary is $PROMTOOL or promtool on $PATH.
func PromtoolBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = "promtool"
	}
	path, err := exec.LookPath(p)
	if err != nil {
		t.Fatalf("no promtool (%v): run `make deps` (hack/install-deps.sh installs the Debian package prometheus, which ships it)", err)
	}
	return path
}

// HelmBinary is $HELM (hack/test.sh sets it) or the one `make tools` builds.
func HelmBinary(t testing.TB) string {
	t.Helper()
	h := os.Getenv("HELM")
	if h == "" {
		h = "_output/bin/helm"
	}
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("no helm binary (%v): run `make tools`, which builds it from the Go module proxy", err)
	}
	return h
}

// RunHelm runs helm with args and returns its output, or fails t.
func RunHelm(t testing.TB, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(HelmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// NonDefaultValues changes every value of values.yaml.
const NonDefaultValues = `
image: {repository: registry.example.com/team/shared-resource-csi, tag: v9.8.7, pullPolicy: Always}
namespace: {name: srcsi-chart-test, create: false}
openshift: {enabled: true}
crds: {install: false}
sourceAccess: {namespaces: [default, kube-public], clusterWide: true}
admissionPolicy: {enabled: false}
flowControl: {enabled: false, nominalConcurrencyShares: 5}
driver:
  relistInterval: 2m
  relistSpread: 0.25
  tmpfsSize: 16Mi
  cacheMaxEntries: 50
  cacheMaxBytes: 1048576
  cacheTTL: 3s
  authzCacheTTL: 4s
  kubeAPIQPS: 7.5
  kubeAPIBurst: 15
  logLevel: 4
  healthPort: 9810
  healthHost: $(HOST_IP)
  healthMaxConnections: 8
  volumeBytesBudget: 32Mi
  extraArgs: [--status-lease-duration=30s]
statusController:
  replicas: 3
  resources: {requests: {cpu: 5m, memory: 16Mi}, limits: {memory: 64Mi}}
  probePort: 9811
  networkPolicy: {enabled: false, metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: dedicated, operator: Equal, value: status, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]}}}
kubeletDir: /var/lib/k0s/kubelet
resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {memory: 128Mi}}
tolerations: [{key: dedicated, operator: Equal, value: storage, effect: NoSchedule}]
nodeSelector: {kubernetes.io/os: linux}
priorityClassName: system-cluster-critical
updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 10%}}
monitoring:
  podMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack, team: storage}}
  dashboard: {enabled: true, namespace: default, labels: {grafana_folder: storage}}
`
