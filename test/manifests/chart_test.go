package manifests

// Specification of the Helm chart (charts/shared-resource-csi), the one source of the
// manifests: it lints; deploy.yaml and deploy/cluster-wide-read.yaml are exactly what it renders
// (hack/manifests.sh); every value reaches the objects it sets, and a render with every value
// changed is accepted by the API server (but for Prometheus Operator's kinds, which a plain
// cluster lacks); the values table (the chart's README) is checked by docs_test.go. The pod
// suite installs the driver with this chart (`helm upgrade --install`, test/e2e/pods/pods_test.go).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

func TestChartLints(t *testing.T) {
	out := framework.RunHelm(t, "lint", "--strict", framework.ChartDir)
	t.Logf("%s", out)
}

func TestDeployManifestsAreTheChartRendered(t *testing.T) {
	framework.HelmBinary(t)
	out, err := exec.Command("hack/manifests.sh", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("hack/manifests.sh --check: %v\n%s", err, out)
	}
}

func TestChartValuesReachTheObjects(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(framework.NonDefaultValues), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir, "-f", values))

	for _, gone := range []string{"Namespace", "CustomResourceDefinition", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
		"FlowSchema", "PriorityLevelConfiguration", "NetworkPolicy"} {
		if o := framework.FindObject(objs, gone, ""); o != nil {
			t.Errorf("%s %s rendered although its value turns it off", gone, o.GetName())
		}
	}
	for _, ns := range []string{"default", "kube-public"} {
		var rb rbacv1.RoleBinding
		fromObject(t, objs, "RoleBinding", "", &rb, func(o *unstructured.Unstructured) bool { return o.GetNamespace() == ns })
		// Both accounts that read sources: the node plugins' and the status controller's.
		if rb.RoleRef.Name != framework.SourceReaderRole || len(rb.Subjects) != 2 || rb.Subjects[0].Name != framework.DriverServiceAccount ||
			rb.Subjects[1].Name != framework.StatusServiceAccount || rb.Subjects[0].Namespace != "srcsi-chart-test" || rb.Subjects[1].Namespace != "srcsi-chart-test" {
			t.Errorf("source RoleBinding in %s: %+v", ns, rb)
		}
	}
	if framework.FindObject(objs, "ClusterRoleBinding", "shared-resource-csi-source-reader-all-namespaces") == nil {
		t.Error("sourceAccess.clusterWide did not render the cluster-wide binding")
	}
	// openshift.enabled: the driver's ServiceAccount may use the privileged SCC, in its own
	// namespace only.
	var scc rbacv1.ClusterRole
	fromObject(t, objs, "ClusterRole", sccRBACName, &scc, nil)
	wantSCC := []rbacv1.PolicyRule{{APIGroups: []string{"security.openshift.io"}, Resources: []string{"securitycontextconstraints"},
		ResourceNames: []string{"privileged"}, Verbs: []string{"use"}}}
	if fmt.Sprint(scc.Rules) != fmt.Sprint(wantSCC) {
		t.Errorf("%s rules %v, want %v", sccRBACName, scc.Rules, wantSCC)
	}
	var sccBinding rbacv1.RoleBinding
	fromObject(t, objs, "RoleBinding", sccRBACName, &sccBinding, nil)
	if sccBinding.Namespace != "srcsi-chart-test" || sccBinding.RoleRef.Kind != "ClusterRole" || sccBinding.RoleRef.Name != sccRBACName ||
		fmt.Sprint(sccBinding.Subjects) != fmt.Sprint([]rbacv1.Subject{{Kind: "ServiceAccount", Name: framework.DriverServiceAccount, Namespace: "srcsi-chart-test"}}) {
		t.Errorf("RoleBinding %s: %+v", sccRBACName, sccBinding)
	}

	var ds appsv1.DaemonSet
	fromObject(t, objs, "DaemonSet", "shared-resource-csi-driver", &ds, nil)
	if ds.Namespace != "srcsi-chart-test" {
		t.Errorf("DaemonSet in namespace %q", ds.Namespace)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	for _, check := range []struct{ what, got, want string }{
		{"image", c.Image, "registry.example.com/team/shared-resource-csi:v9.8.7"},
		{"pull policy", string(c.ImagePullPolicy), "Always"},
		{"priority class", spec.PriorityClassName, "system-cluster-critical"},
		{"node selector", fmt.Sprint(spec.NodeSelector), "map[kubernetes.io/os:linux]"},
		{"tolerations", fmt.Sprint(spec.Tolerations[0].Key, spec.Tolerations[0].Value, spec.Tolerations[0].Effect), "dedicatedstorageNoSchedule"},
		{"update strategy", ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "10%"},
		{"memory limit", c.Resources.Limits.Memory().String(), "128Mi"},
		{"cpu request", c.Resources.Requests.Cpu().String(), "20m"},
		{"health port", fmt.Sprint(c.Ports[0].ContainerPort), "9810"},
		{"kubelet dir mount", c.VolumeMounts[0].MountPath, "/var/lib/k0s/kubelet"},
		{"kubelet dir hostPath", spec.Volumes[0].HostPath.Path, "/var/lib/k0s/kubelet"},
	} {
		if check.got != check.want {
			t.Errorf("%s: %q, want %q", check.what, check.got, check.want)
		}
	}
	wantArgs := []string{
		"--role=node",
		"--endpoint=unix:///var/lib/k0s/kubelet/plugins/csi.sharedresource.openshift.io/csi.sock",
		"--state-dir=/var/lib/k0s/kubelet/plugins/csi.sharedresource.openshift.io",
		"--kubelet-root-dir=/var/lib/k0s/kubelet", "--registration-dir=/var/lib/k0s/kubelet/plugins_registry",
		"--health-address=$(HOST_IP):9810", "--health-max-connections=8", "--relist-interval=2m", "--relist-spread=0.25", "--tmpfs-size=16Mi", "--volume-bytes-budget=32Mi", "--cache-max-entries=50",
		"--cache-max-bytes=1048576", "--cache-ttl=3s", "--authz-cache-ttl=4s", "--kube-api-qps=7.5",
		"--kube-api-burst=15", "--v=4",
		"--service-account=srcsi-chart-test:shared-resource-csi-driver,srcsi-chart-test:shared-resource-csi-status",
		"--status-lease-duration=30s",
	}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("driver args\n got %q\nwant %q", c.Args, wantArgs)
	}
	checkStatusController(t, objs)
	checkStatusControllerDefaults(t)
	// flowControl's level, rendered with its share changed.
	plc := framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir, "--set", "flowControl.nominalConcurrencyShares=5",
		"--show-only", "templates/flowcontrol.yaml"))
	var pl flowcontrolv1.PriorityLevelConfiguration
	fromObject(t, plc, "PriorityLevelConfiguration", "shared-resource-csi", &pl, nil)
	if got := *pl.Spec.Limited.NominalConcurrencyShares; got != 5 {
		t.Errorf("nominalConcurrencyShares %d, want 5", got)
	}
	// The driver itself accepts the args.
	if err := framework.DriverAcceptsArgs(c.Args); err != nil {
		t.Errorf("the driver refuses the chart's args: %v", err)
	}
	checkMonitoringObjects(t, objs)
}

// checkStatusController: the status controller's Deployment takes the image, the namespace, its
// replicas and resources, and the shared driver values; on OpenShift (framework.NonDefaultValues) it leaves
// the user to the restricted SCC; its args are accepted by the binary.
func checkStatusController(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var dep appsv1.Deployment
	fromObject(t, objs, "Deployment", "shared-resource-csi-status", &dep, nil)
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	for _, check := range []struct{ what, got, want string }{
		{"namespace", dep.Namespace, "srcsi-chart-test"},
		{"service account", spec.ServiceAccountName, framework.StatusServiceAccount},
		{"replicas", fmt.Sprint(*dep.Spec.Replicas), "3"},
		{"image", c.Image, "registry.example.com/team/shared-resource-csi:v9.8.7"},
		{"pull policy", string(c.ImagePullPolicy), "Always"},
		{"memory limit", c.Resources.Limits.Memory().String(), "64Mi"},
		{"cpu request", c.Resources.Requests.Cpu().String(), "5m"},
		{"health port", fmt.Sprint(c.Ports[0].ContainerPort), "9810"},
		{"probe port", fmt.Sprint(c.Ports[1].Name, c.Ports[1].ContainerPort), "probes9811"},
		{"liveness probe port", c.LivenessProbe.HTTPGet.Port.String(), "probes"},
		{"readiness probe port", c.ReadinessProbe.HTTPGet.Port.String(), "probes"},
		{"node selector", fmt.Sprint(spec.NodeSelector), "map[node-role.kubernetes.io/control-plane:]"},
		{"tolerations", fmt.Sprint(spec.Tolerations), "[{dedicated Equal status NoSchedule <nil>}]"},
		{"affinity", fmt.Sprintf("%v %v %v", spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions,
			spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, spec.Affinity.PodAntiAffinity), "[{kubernetes.io/os In [linux]}] [] nil"},
		{"host network", fmt.Sprint(spec.HostNetwork), "false"},
		{"volumes", fmt.Sprint(len(spec.Volumes)), "0"},
		{"run as user (OpenShift assigns one)", fmt.Sprint(spec.SecurityContext.RunAsUser), "<nil>"},
		{"non-root", fmt.Sprint(*spec.SecurityContext.RunAsNonRoot), "true"},
		{"read-only root", fmt.Sprint(*c.SecurityContext.ReadOnlyRootFilesystem), "true"},
		{"privileged", fmt.Sprint(*c.SecurityContext.Privileged), "false"},
		{"privilege escalation", fmt.Sprint(*c.SecurityContext.AllowPrivilegeEscalation), "false"},
	} {
		if check.got != check.want {
			t.Errorf("status controller %s: %q, want %q", check.what, check.got, check.want)
		}
	}
	wantArgs := []string{"--role=status", "--status-lease-namespace=srcsi-chart-test", "--relist-interval=2m", "--health-address=:9810",
		"--probe-address=:9811", "--kube-api-qps=7.5", "--kube-api-burst=15", "--v=4",
		"--service-account=srcsi-chart-test:shared-resource-csi-driver,srcsi-chart-test:shared-resource-csi-status",
		"--status-lease-duration=30s"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("status controller args\n got %q\nwant %q", c.Args, wantArgs)
	}
	if err := framework.DriverAcceptsArgs(c.Args); err != nil || !slices.Contains(c.Args, "--role="+framework.RoleStatus) {
		t.Errorf("the binary refuses the status controller's args, or they name another role: %v", err)
	}
}

// checkStatusControllerDefaults: by default the status controller prefers control-plane nodes
// and tolerates their taint, but requires nothing of a node (a cluster without control-plane
// nodes still runs it), and its NetworkPolicy admits no pod; metricsFrom admits the peers it
// lists to the metrics port alone, never to the probes' port.
func checkStatusControllerDefaults(t *testing.T) {
	t.Helper()
	objs := framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir))
	var dep appsv1.Deployment
	fromObject(t, objs, "Deployment", "shared-resource-csi-status", &dep, nil)
	spec := dep.Spec.Template.Spec
	const cp = "node-role.kubernetes.io/control-plane"
	na := spec.Affinity.NodeAffinity
	if len(spec.NodeSelector) != 0 || na == nil || na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Errorf("the status controller requires something of a node by default: nodeSelector %v, node affinity %+v", spec.NodeSelector, na)
	} else if p := na.PreferredDuringSchedulingIgnoredDuringExecution; len(p) != 1 || len(p[0].Preference.MatchExpressions) != 1 ||
		p[0].Preference.MatchExpressions[0].Key != cp || p[0].Preference.MatchExpressions[0].Operator != corev1.NodeSelectorOpExists {
		t.Errorf("the status controller's preferred node affinity %+v, want %s Exists", p, cp)
	}
	if fmt.Sprint(spec.Tolerations) != "[{"+cp+" Exists  NoSchedule <nil>}]" {
		t.Errorf("the status controller's tolerations %v, want the control-plane taint's", spec.Tolerations)
	}
	if spec.Affinity.PodAntiAffinity == nil {
		t.Error("the status controller's replicas are no longer spread over nodes")
	}
	var np networkingv1.NetworkPolicy
	fromObject(t, objs, "NetworkPolicy", "shared-resource-csi-status", &np, nil)
	if fmt.Sprint(np.Spec.PodSelector.MatchLabels) != fmt.Sprint(dep.Spec.Selector.MatchLabels) ||
		fmt.Sprint(np.Spec.PolicyTypes) != "[Ingress]" || len(np.Spec.Ingress) != 0 || np.Namespace != dep.Namespace {
		t.Errorf("the default NetworkPolicy selects %v, types %v, admits %v in %s: want the status controller's pods, none admitted",
			np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes, np.Spec.Ingress, np.Namespace)
	}
	objs = framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir,
		"--set-json", `statusController.networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		"--show-only", "templates/networkpolicy.yaml"))
	fromObject(t, objs, "NetworkPolicy", "shared-resource-csi-status", &np, nil)
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.String() != "9809" ||
		len(np.Spec.Ingress[0].From) != 1 || fmt.Sprint(np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels) != "map[kubernetes.io/metadata.name:monitoring]" {
		t.Errorf("metricsFrom: the NetworkPolicy admits %+v, want the monitoring namespace to port 9809 alone", np.Spec.Ingress)
	}
}

// checkMonitoringObjects: the monitoring values of framework.NonDefaultValues reach the PodMonitor, the
// PrometheusRule and the dashboard's ConfigMap, which hold the chart's files as they are.
func checkMonitoringObjects(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	pm := framework.FindObject(objs, "PodMonitor", "shared-resource-csi")
	if pm == nil {
		t.Fatal("monitoring.podMonitor.enabled did not render the PodMonitor")
	}
	for _, check := range []struct {
		what   string
		fields []string
		want   string
	}{
		{"namespace", []string{"metadata", "namespace"}, "srcsi-chart-test"},
		{"extra label", []string{"metadata", "labels", "release"}, "kube-prometheus-stack"},
		{"job label", []string{"spec", "jobLabel"}, "app.kubernetes.io/name"},
		{"selected namespace", []string{"spec", "namespaceSelector", "matchNames"}, "[srcsi-chart-test]"},
		{"selected pods", []string{"spec", "selector", "matchLabels"}, "map[app.kubernetes.io/component:node-plugin app.kubernetes.io/name:shared-resource-csi]"},
	} {
		v, _, _ := unstructured.NestedFieldNoCopy(pm.Object, check.fields...)
		if got := fmt.Sprint(v); got != check.want {
			t.Errorf("PodMonitor %s: %s, want %s", check.what, got, check.want)
		}
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 || fmt.Sprintf("%v %v", eps[0].(map[string]any)["port"], eps[0].(map[string]any)["interval"]) != "healthz 15s" {
		t.Errorf("PodMonitor endpoints: %v, want the port healthz every 15s", eps)
	}

	rule := framework.FindObject(objs, "PrometheusRule", "shared-resource-csi")
	if rule == nil {
		t.Fatal("monitoring.prometheusRule.enabled did not render the PrometheusRule")
	}
	if l := rule.GetLabels(); rule.GetNamespace() != "srcsi-chart-test" || l["release"] != "kube-prometheus-stack" || l["team"] != "storage" {
		t.Errorf("PrometheusRule in %q labelled %v", rule.GetNamespace(), l)
	}
	file, err := os.ReadFile(framework.MonitoringRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(file, &want); err != nil {
		t.Fatal(err)
	}
	if got := rule.Object["spec"]; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the PrometheusRule's spec is not %s", framework.MonitoringRulesFile)
	}

	cm := framework.FindObject(objs, "ConfigMap", "shared-resource-csi-dashboard")
	if cm == nil {
		t.Fatal("monitoring.dashboard.enabled did not render the dashboard's ConfigMap")
	}
	if l := cm.GetLabels(); cm.GetNamespace() != "default" || l["grafana_dashboard"] != "1" || l["grafana_folder"] != "storage" {
		t.Errorf("dashboard ConfigMap in %q labelled %v", cm.GetNamespace(), l)
	}
	dashboard, err := os.ReadFile(framework.MonitoringDashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "shared-resource-csi.json")
	if !json.Valid([]byte(data)) || data != strings.TrimSpace(string(dashboard)) {
		t.Errorf("the ConfigMap's shared-resource-csi.json is not %s", framework.MonitoringDashboardFile)
	}
}

// deploy.yaml (openshift.enabled false) holds one OpenShift part, harmless elsewhere: the
// CSIDriver's profile, which OpenShift's CSI volume admission needs to let pods of restricted
// namespaces (its default) mount shares. The grant of OpenShift's privileged SCC is not in it.
func TestDeployOpenShiftParts(t *testing.T) {
	b, err := os.ReadFile("deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := framework.RenderedObjects(t, b)
	d := framework.FindObject(objs, "CSIDriver", "csi.sharedresource.openshift.io")
	if d == nil {
		t.Fatal("deploy.yaml has no CSIDriver csi.sharedresource.openshift.io")
	}
	if got := d.GetLabels()["security.openshift.io/csi-ephemeral-volume-profile"]; got != "restricted" {
		t.Errorf("CSIDriver label security.openshift.io/csi-ephemeral-volume-profile = %q, want restricted", got)
	}
	for _, o := range objs {
		if o.GetName() == sccRBACName {
			t.Errorf("deploy.yaml has %s %s, which only openshift.enabled renders", o.GetKind(), o.GetName())
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			if groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups"); slices.Contains(groups, "security.openshift.io") {
				t.Errorf("deploy.yaml's %s %s has a rule on security.openshift.io: %v", o.GetKind(), o.GetName(), r)
			}
		}
	}
}

// sccRBACName names the ClusterRole and RoleBinding that openshift.enabled renders.
const sccRBACName = "shared-resource-csi-privileged-scc"

// fromObject converts the (first matching) rendered object into a typed one, or fails.
func fromObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any, match func(*unstructured.Unstructured) bool) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) && (match == nil || match(o)) {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %q rendered", kind, name)
}
