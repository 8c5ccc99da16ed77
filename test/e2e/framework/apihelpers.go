// Package framework is the end-to-end suites' shared harness: the kube env, the driver as a
// subprocess playing the kubelet over its CSI socket, the pod suite, the three nodes, counting
// (/metrics, the audit log) and the API's names.
package framework

// Helpers of the API-server suites (test/e2e/api) that other tiers use too: shares and their
// sharers, RBAC fixes as an admin runs them, the node's state before and after (hostState), the
// OpenShift objects, status conditions.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/treesnap"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// SnapshotTree describes every entry under root (treesnap.Take), or fails the test.
func SnapshotTree(t *testing.T, root string, withTimes bool) map[string]string {
	t.Helper()
	snap, err := treesnap.Take(root, withTimes)
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return snap
}

// mountTable returns the lines of /proc/self/mountinfo, byte for byte, of every mount under
// root (the driver's kubelet root and state dir, and the sentinel tree), and of every mount
// anywhere of a file system mounted under root (a bind of a volume's tmpfs that leaked out).
// Everything else on the host is left out on purpose: a kubelet and containerd, or other tests'
// drivers, may mount and unmount their own things at any moment. Mount ids are kept: a mount
// taken down and made again is a change.
func mountTable(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	type line struct{ text, device, mountPoint string }
	var lines []line
	ours := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fields := strings.Split(l, " ")
		if len(fields) < 5 {
			t.Fatalf("malformed mountinfo line %q", l)
		}
		mp := mountInfoUnescape(fields[4])
		lines = append(lines, line{l, fields[2], mp})
		if mp == root || strings.HasPrefix(mp, root+"/") {
			ours[fields[2]] = true
		}
	}
	var out []string
	for _, l := range lines {
		if l.mountPoint == root || strings.HasPrefix(l.mountPoint, root+"/") || ours[l.device] {
			out = append(out, l.text)
		}
	}
	return out
}

func diffLines(before, after []string) string {
	var lines []string
	for _, b := range before {
		if !slices.Contains(after, b) {
			lines = append(lines, "- "+b)
		}
	}
	for _, a := range after {
		if !slices.Contains(before, a) {
			lines = append(lines, "+ "+a)
		}
	}
	return strings.Join(lines, "\n")
}

// hostState is what must not change: the mount table, the driver's whole temp root (kubelet
// root, state dir, volumes; without times, since a failed publish may create and remove its
// own volume dir) and the sentinel tree (with times: nothing may even be created in it).
type hostState struct {
	mounts   []string
	tree     map[string]string
	sentinel map[string]string
}

// HostState snapshots the mounts and files under the driver's temp root and the files under sentinel.
func (p *DriverProc) HostState(t *testing.T, sentinel string) hostState {
	t.Helper()
	tree := SnapshotTree(t, p.Root, false)
	delete(tree, filepath.Base(p.LogPath)) // the driver's log grows
	return hostState{mounts: mountTable(t, p.Root), tree: tree, sentinel: SnapshotTree(t, sentinel, true)}
}

func (s hostState) AssertSame(t *testing.T, after hostState) {
	t.Helper()
	if !slices.Equal(s.mounts, after.mounts) {
		t.Errorf("the mount table changed:\n%s", diffLines(s.mounts, after.mounts))
	}
	if d := treesnap.Diff(s.tree, after.tree); d != "" {
		t.Errorf("files under the driver's root changed:\n%s", d)
	}
	if d := treesnap.Diff(s.sentinel, after.sentinel); d != "" {
		t.Errorf("the sentinel tree changed:\n%s", d)
	}
}

// ServiceAccountKubeconfig creates a ServiceAccount bound to a ClusterRole with rules, and
// writes a kubeconfig that authenticates as it with a token from the TokenRequest API.
// It returns the kubeconfig's path, the token (a secret), the ClusterRole's name and the
// service account's user name.
func (e *KubeEnv) ServiceAccountKubeconfig(t *testing.T, rules []rbacv1.PolicyRule) (path, token, role, user string) {
	t.Helper()
	ctx := context.Background()
	ns := e.Namespace(t, "driver")
	sa, err := e.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "driver"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role = "srcsi-test-driver-" + RandSuffix()
	if _, err := e.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{ServiceAccount(ns, sa.Name)},
	}
	if _, err := e.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	expiry := int64(3600)
	tr, err := e.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for the driver's service account: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeTokenKubeconfig(path, cfg, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path, tr.Status.Token, role, "system:serviceaccount:" + ns + ":" + sa.Name
}

// SetRules replaces a ClusterRole's rules and waits until the authorizer applies them to user:
// whether it may create SubjectAccessReviews.
func (e *KubeEnv) SetRules(t *testing.T, role, user string, rules []rbacv1.PolicyRule, canReview bool) {
	t.Helper()
	ctx := context.Background()
	cr, err := e.Kube.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cr.Rules = rules
	if _, err := e.Kube.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReview(t, user, nil, authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, canReview)
}

// RestartArmed kills the driver and starts it again armed to crash at step.
func (p *DriverProc) RestartArmed(step CrashStep) {
	p.Kill()
	p.Binary = p.kube.CrashBinary(p.t)
	p.env = []string{CrashEnv + "=" + string(step)}
	p.Start()
}

// FreeLocalAddr is a loopback address with a port free at the moment (for the metrics endpoint).
func FreeLocalAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ReadyConditionOfType returns the share's condition of type typ (nil if it has none).
func (e *KubeEnv) ReadyConditionOfType(k ShareKind, name, typ string) (*metav1.Condition, map[string]any, error) {
	u, err := e.Dyn.Resource(ShareGVR(k)).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	conds, err := shareConditions(u)
	if err != nil {
		return nil, u.Object, err
	}
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i], u.Object, nil
		}
	}
	return nil, u.Object, nil
}

// openShiftObjects is what a user of OpenShift's driver has created, in the shape of its
// documentation (openshift/csi-driver-shared-resource's README and examples) and of Builds for
// OpenShift's manifests and test data. $SRC is the source namespace, $APP the consumers'.
const openShiftObjects = `
apiVersion: v1
kind: Secret
metadata:
  name: entitlement-key
  namespace: $SRC
stringData:
  ORG_ID: "12345"
  KEY_NAME: builds
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: shared-config
  namespace: $SRC
data:
  config.txt: "Hello world!"
---
# Builds for OpenShift's test data sets a namespace on this cluster-scoped object.
apiVersion: sharedresource.openshift.io/v1alpha1
kind: SharedSecret
metadata:
  name: $SECRET_SHARE
  namespace: $APP
  labels:
    team: builds
spec:
  secretRef:
    name: entitlement-key
    namespace: $SRC
  description: entitlement keys for builds
---
apiVersion: sharedresource.openshift.io/v1alpha1
kind: SharedConfigMap
metadata:
  name: $CONFIG_SHARE
spec:
  configMapRef:
    name: shared-config
    namespace: $SRC
  description: shared configuration
---
# OpenShift creates it in every namespace; plain Kubernetes does not.
apiVersion: v1
kind: ServiceAccount
metadata:
  name: builder
  namespace: $APP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: shared-resource-$SECRET_SHARE
  namespace: $APP
rules:
  - apiGroups:
      - sharedresource.openshift.io
    resources:
      - sharedsecrets
    resourceNames:
      - $SECRET_SHARE
    verbs:
      - use
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: shared-resource-$SECRET_SHARE
  namespace: $APP
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: shared-resource-$SECRET_SHARE
subjects:
  - kind: ServiceAccount
    name: builder
    namespace: $APP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: use-$CONFIG_SHARE
rules:
  - apiGroups:
      - sharedresource.openshift.io
    resources:
      - sharedconfigmaps
    resourceNames:
      - $CONFIG_SHARE
    verbs:
      - use
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: use-$CONFIG_SHARE
  namespace: $APP
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: use-$CONFIG_SHARE
subjects:
  - kind: ServiceAccount
    name: default
    namespace: $APP
---
# Lets OpenShift's driver (as Builds for OpenShift deploys it) read the source.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: share-entitlement-key
  namespace: $SRC
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    resourceNames: ["entitlement-key"]
    verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: share-entitlement-key
  namespace: $SRC
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: share-entitlement-key
subjects:
  - kind: ServiceAccount
    name: csi-driver-shared-resource
    namespace: openshift-builds
`

// openShiftSetup is openShiftObjects applied with kubectl, as a user does, in fresh namespaces.
type openShiftSetup struct {
	Src, App                 string
	SecretShare, ConfigShare string
	Vars                     *strings.Replacer
}

// ApplyOpenShiftObjects applies, in new namespaces, the objects an OpenShift user of the driver has.
func (e *KubeEnv) ApplyOpenShiftObjects(t *testing.T) *openShiftSetup {
	t.Helper()
	sfx := RandSuffix()
	s := &openShiftSetup{Src: e.Namespace(t, "osh-source"), App: e.Namespace(t, "osh-app"),
		SecretShare: "osh-entitlement-" + sfx, ConfigShare: "osh-config-" + sfx}
	s.Vars = strings.NewReplacer("$SRC", s.Src, "$APP", s.App, "$SECRET_SHARE", s.SecretShare, "$CONFIG_SHARE", s.ConfigShare)
	manifest := s.Vars.Replace(openShiftObjects)
	e.Kubectl(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() {
		cmd := exec.Command(KubectlBinary(), "--kubeconfig", e.Kubeconfig, "delete", "--ignore-not-found", "--wait=false", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("deleting OpenShift's objects: %v\n%s", err, out)
		}
	})
	return s
}

// Kubectl runs kubectl as the cluster admin with stdin, failing the test on an error.
func (e *KubeEnv) Kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(KubectlBinary(), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Shell runs a documented command with bash in dir, its kubectl the test's, as the cluster admin, and
// returns its standard output.
func (e *KubeEnv) Shell(t *testing.T, dir, command string) string {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("the documented commands need jq (hack/install-deps.sh installs it): %v", err)
	}
	script := `set -eo pipefail; kubectl() { command "$SRCSI_KUBECTL" --kubeconfig "$SRCSI_KUBECONFIG" "$@"; }; ` + command
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SRCSI_KUBECTL="+KubectlBinary(), "SRCSI_KUBECONFIG="+e.Kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", command, err, out, stderr.Bytes())
	}
	return string(out)
}

// CrdGVR is the CustomResourceDefinitions resource.
var CrdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// CreateCRD creates a CRD for the test, deletes it afterwards, and waits until its resource is
// served.
func (e *KubeEnv) CreateCRD(t *testing.T, crd *unstructured.Unstructured, probe *unstructured.Unstructured, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Dyn.Resource(CrdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CRD %s: %v", crd.GetName(), err)
	}
	t.Cleanup(func() {
		if err := e.Dyn.Resource(CrdGVR).Delete(context.Background(), crd.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting CRD %s: %v", crd.GetName(), err)
		}
	})
	Eventually(t, 60*time.Second, func() error {
		_, err := e.Dyn.Resource(gvr).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// ListedShareObject is ShareObject with spec.items set to items (when not nil).
func ListedShareObject(kind ShareKind, name, ns, src string, items []any) *unstructured.Unstructured {
	u := ShareObject(kind, name, ns, src)
	if items != nil {
		// A fresh object: spec is a map, so setting spec.items cannot fail.
		_ = unstructured.SetNestedSlice(u.Object, items, "spec", "items")
	}
	return u
}

// sharer is a user who may create, update and delete shares, and nothing else until a test
// grants more: what a platform team member typically holds.
type sharer struct {
	Name string
	Dyn  dynamic.Interface
}

// NewSharer makes a user who may create shares (and what they need), for the admission tests.
func (e *KubeEnv) NewSharer(t *testing.T) *sharer {
	t.Helper()
	ctx := context.Background()
	name := "sharer-" + RandSuffix()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{ShareGroup}, Resources: []string{"sharedsecrets", "sharedconfigmaps", "sharedsecrets/status", "sharedconfigmaps/status"},
		Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}
	if _, err := e.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{UserSubject(name)}}
	if _, err := e.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = e.Kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	for _, resource := range role.Rules[0].Resources {
		e.WaitAuthorized(t, UserSubject(name), authorizationv1.ResourceAttributes{Verb: "update", Group: ShareGroup, Resource: resource})
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = name
	cfg.Impersonate.Groups = []string{"system:authenticated"}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &sharer{Name: name, Dyn: dyn}
}

// GrantGet lets subject get one object, the narrowest grant there is, until the test ends.
func (e *KubeEnv) GrantGet(t *testing.T, subject rbacv1.Subject, ns, resource, name string) {
	t.Helper()
	ctx := context.Background()
	rn := "get-" + name + "-" + RandSuffix()
	if _, err := e.Kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: rn},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, ResourceNames: []string{name}, Verbs: []string{"get"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rn},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: rn},
		Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Kube.RbacV1().RoleBindings(ns).Delete(context.Background(), rn, metav1.DeleteOptions{})
		_ = e.Kube.RbacV1().Roles(ns).Delete(context.Background(), rn, metav1.DeleteOptions{})
	})
	e.WaitAuthorized(t, subject, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: resource, Name: name})
}

// UserSubject is an RBAC subject for the user name.
func UserSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: name}
}

// ShareObject is a share of kind named name, of the source ns/src.
func ShareObject(kind ShareKind, name, ns, src string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ShareGroup + "/v1alpha1",
		"kind":       kind.ShareTypeName(),
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{ShareRefField(kind): map[string]any{"namespace": ns, "name": src}},
	}}
}

// GrantReadFix is what every message about a source the driver may not read tells an admin to
// run, for the tests' driver (deploy.yaml's account).
func GrantReadFix(ns string) string {
	return "kubectl create rolebinding shared-resource-csi-source-reader --namespace=" + ns +
		" --clusterrole=shared-resource-csi-source-reader --serviceaccount=" + DriverNamespace + ":" + DriverServiceAccount +
		" --serviceaccount=" + DriverNamespace + ":" + StatusServiceAccount
}

// RunFix runs, as the cluster admin, the commands a message tells the admin to run first (the
// narrowest grant: "run: kubectl ... && kubectl ... (or, ...").
func (e *KubeEnv) RunFix(t testing.TB, msg string) {
	t.Helper()
	_, cmdline, ok := strings.Cut(msg, "run: ")
	if !ok {
		t.Fatalf("no command to run in %q", msg)
	}
	cmdline, _, _ = strings.Cut(cmdline, " (or, ")
	for _, cmd := range strings.Split(cmdline, " && ") {
		args, ok := strings.CutPrefix(cmd, "kubectl ")
		if !ok {
			t.Fatalf("%q is not a kubectl command", cmd)
		}
		if out, err := exec.Command(KubectlBinary(), append([]string{"--kubeconfig", e.Kubeconfig}, strings.Fields(args)...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		t.Logf("ran the fix: %s", cmd)
	}
}

// WantReady checks the Ready condition's status, reason, message and observedGeneration.
func WantReady(c metav1.Condition, u *unstructured.Unstructured, status metav1.ConditionStatus, reason, msg string) error {
	if c.Status != status || c.Reason != reason {
		return fmt.Errorf("%s: Ready=%q/%q (%q), want %s/%s", u.GetName(), c.Status, c.Reason, c.Message, status, reason)
	}
	if !strings.Contains(c.Message, msg) {
		return fmt.Errorf("%s: message %q does not name %q", u.GetName(), c.Message, msg)
	}
	if c.ObservedGeneration != u.GetGeneration() {
		return fmt.Errorf("%s: observedGeneration %d, generation %d", u.GetName(), c.ObservedGeneration, u.GetGeneration())
	}
	if c.LastTransitionTime.IsZero() {
		return fmt.Errorf("%s: no lastTransitionTime", u.GetName())
	}
	return nil
}

// ReadyCondition returns the share's Ready condition (zero if it has none) and the share.
func (e *KubeEnv) ReadyCondition(kind ShareKind, name string) (metav1.Condition, *unstructured.Unstructured, error) {
	u, err := e.Dyn.Resource(ShareGVR(kind)).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return metav1.Condition{}, nil, err
	}
	conds, err := shareConditions(u)
	if err != nil {
		return metav1.Condition{}, u, err
	}
	// The literal type, not the driver's constant: it is what the CRDs' Ready column selects.
	if c := meta.FindStatusCondition(conds, "Ready"); c != nil {
		return *c, u, nil
	}
	return metav1.Condition{}, u, nil
}

// WantReadyColumn runs `kubectl get <resource> <names>` and checks the READY column (the CRD's
// printer column) of each row.
func (e *KubeEnv) WantReadyColumn(t *testing.T, resource string, want map[string]string) {
	t.Helper()
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = "kubectl"
	}
	args := []string{"--kubeconfig", e.Kubeconfig, "get", resource}
	for name := range want {
		args = append(args, name)
	}
	out, err := exec.Command(kubectl, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get %s: %v\n%s", resource, err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	// Columns are aligned: a column's value starts where its header does. Header names contain
	// spaces ("SOURCE NAMESPACE"), so splitting on whitespace would not do.
	col := strings.Index(lines[0], "READY")
	if col < 0 {
		t.Fatalf("kubectl get %s has no READY column:\n%s", resource, out)
	}
	got := map[string]string{}
	for _, l := range lines[1:] {
		ready := ""
		if len(l) > col && l[col] != ' ' {
			ready = strings.Fields(l[col:])[0]
		}
		got[strings.Fields(l)[0]] = ready
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("kubectl get %s: READY of %s is %q, want %q\n%s", resource, name, got[name], w, out)
		}
	}
}

// StatusLeaseHolder is the holder of the status controller's Lease.
func (e *KubeEnv) StatusLeaseHolder() (string, error) {
	l, err := e.Kube.CoordinationV1().Leases(DriverNamespace).Get(context.Background(), StatusLeaseName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}
