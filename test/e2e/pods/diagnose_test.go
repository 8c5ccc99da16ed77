package pods

// Specification, against the real cluster, of the admin's commands (docs/operating.md,
// "Diagnose" and "Who uses a share"): for each verdict of `diagnose` the failure is made to
// happen, the command is run as the cluster admin, and its verdict and the fix it prints are
// checked (where the fix is a plain kubectl command, it is run and the pod then starts); a
// caller lacking a permission is told which instead of a verdict; `who-uses` finds the pods of
// several namespaces mounting a share, or its Secret, each with whether it may use the share,
// also as a kubectl plugin. Each test logs the command's output for people.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The JSON the commands print (-o json).
type diagShare struct {
	Volume, Share, Verdict, Fix, LastVersion string
	Evidence                                 []string
}
type diagPod struct {
	Namespace, Pod, Node, ServiceAccount, Phase string
	Shares                                      []diagShare
}
type diagReport struct {
	Pods         []diagPod
	CallerLacked []string
	Reads        []string
}
type whoRow struct {
	Namespace, Pod, ServiceAccount, Node, Phase, Volume, Share, MayUse, State, LastVersion string
}
type whoReport struct {
	Shares       []string
	Pods         []whoRow
	CallerLacked []string
	Reads        []string
}

func driverBinary(t *testing.T) string {
	if b := os.Getenv("DRIVER_BINARY"); b != "" {
		return b
	}
	b, err := filepath.Abs("_output/bin/shared-resource-csi")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// admin runs the driver's binary with args as the holder of kubeconfig; it returns stdout and
// the exit code.
func admin(t *testing.T, kubeconfig string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(driverBinary(t), append(args, "--kubeconfig", kubeconfig)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ee.ExitCode() == 1 || ee.ExitCode() == 2 {
			t.Fatalf("%v: exit %d: %s", args, ee.ExitCode(), stderr.String())
		}
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), 0
}

// waitVerdict runs diagnose until the pod's one share has the verdict, logs the report for
// people, and returns the share's part of it.
func waitVerdict(t *testing.T, _ *framework.PodSuite, kubeconfig, ns, target, want string) diagShare {
	t.Helper()
	var got diagShare
	framework.Eventually(t, 60*time.Second, func() error {
		out, code := admin(t, kubeconfig, "diagnose", target, "-n", ns, "-o", "json")
		var r diagReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if len(r.Pods) != 1 || len(r.Pods[0].Shares) != 1 {
			return fmt.Errorf("want one pod with one share: %s", out)
		}
		got = r.Pods[0].Shares[0]
		if got.Verdict != want {
			return fmt.Errorf("verdict %s, want %s: %s", got.Verdict, want, out)
		}
		if wantCode := map[bool]int{true: 0, false: 3}[want == "OK"]; code != wantCode {
			return fmt.Errorf("exit %d, want %d", code, wantCode)
		}
		return nil
	})
	text, _ := admin(t, kubeconfig, "diagnose", target, "-n", ns)
	t.Logf("diagnose %s -n %s (%s):\n%s", target, ns, want, text)
	return got
}

func wantFix(t *testing.T, got diagShare, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(got.Fix, p) {
			t.Errorf("the fix %q does not say %q", got.Fix, p)
		}
	}
}

// runKubectlFix runs the plain kubectl commands of a fix (joined by &&, up to "   (").
func runKubectlFix(t *testing.T, s *framework.PodSuite, fix string) {
	t.Helper()
	fix, _, _ = strings.Cut(fix, "   (")
	// As an admin runs it: in a shell, with kubectl on the PATH and the cluster's kubeconfig.
	cmd := exec.Command("sh", "-c", fix)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(s.Kubectl)+":"+os.Getenv("PATH"), "KUBECONFIG="+s.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", fix, err, out)
	}
	t.Logf("ran the fix: %s", fix)
}

// grantedPod is a running pod of service account web in a new namespace, mounting f's share.
func grantedPod(t *testing.T, s *framework.PodSuite, f *framework.ShareFixture, prefix string) (ns, pod string, revoke func()) {
	t.Helper()
	ns = s.PodNamespace(t, prefix)
	s.CreateServiceAccount(t, ns, "web")
	revoke = s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "web"))
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "web", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "app", 90*time.Second)
	return ns, "app", revoke
}

func TestPodsDiagnoseAllWell(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f, ns := s.NotifyShare(t, "diag-ok")
	s.NotifyPod(t, s.NotifyDeployment(ns, "web", "web", map[string]string{framework.AttrSharedSecret: f.Share}, false))
	got := waitVerdict(t, s, s.Kubeconfig, ns, "deployment/web", "OK")
	if !strings.Contains(got.LastVersion, "first published") {
		t.Errorf("before any change, last version %q", got.LastVersion)
	}
	s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte("ca-v1")})
	sec, err := s.Kube.CoreV1().Secrets(f.Platform).Get(context.Background(), f.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.NotifyRestartBound, func() error {
		out, _ := admin(t, s.Kubeconfig, "diagnose", "deployment/web", "-n", ns, "-o", "json")
		if !strings.Contains(out, "resourceVersion "+sec.ResourceVersion) {
			return fmt.Errorf("the last version is not resourceVersion %s: %s", sec.ResourceVersion, out)
		}
		return nil
	})
	text, _ := admin(t, s.Kubeconfig, "diagnose", "deployment/web", "-n", ns)
	t.Logf("after the Secret's update to resourceVersion %s:\n%s", sec.ResourceVersion, text)
}

func TestPodsDiagnoseShareMissing(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	ns := s.PodNamespace(t, "diag-noshare")
	share := "no-such-share-" + framework.RandSuffix()
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Attrs: map[string]string{framework.AttrSharedSecret: share}})
	got := waitVerdict(t, s, s.Kubeconfig, ns, "app", "ShareMissing")
	wantFix(t, got, "kubectl get sharedsecrets", `SharedSecret "`+share+`"`)
}

func TestPodsDiagnoseUseDenied(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca")})
	ns := s.PodNamespace(t, "diag-denied")
	s.CreateServiceAccount(t, ns, "web")
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "web", Attrs: f.Attrs()})
	got := waitVerdict(t, s, s.Kubeconfig, ns, "app", "UseDenied")
	wantFix(t, got, `"name":"use-`+f.Share+`","namespace":"`+ns+`"`, `"verbs":["use"]`, "kubectl apply -f -", "--serviceaccount="+ns+":web")
	runKubectlFix(t, s, got.Fix)
	s.WaitRunning(t, ns, "app", 2*time.Minute)
	waitVerdict(t, s, s.Kubeconfig, ns, "app", "OK")
}

func TestPodsDiagnoseDriverMayNotRead(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	src := s.Namespace(t, "diag-noread") // the driver may not read here
	s.CreateSecret(t, src, "creds", map[string][]byte{"k": []byte("v")})
	share := "diag-noread-" + framework.RandSuffix()
	s.CreateShare(t, framework.KindSecret, share, src, "creds")
	ns := s.PodNamespace(t, "diag-noread-app")
	s.CreateServiceAccount(t, ns, "web")
	s.Grant(t, ns, framework.KindSecret, share, framework.ServiceAccount(ns, "web"))
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "web", Attrs: map[string]string{framework.AttrSharedSecret: share}})
	got := waitVerdict(t, s, s.Kubeconfig, ns, "app", "DriverMayNotRead")
	wantFix(t, got, "kubectl create role shared-resource-csi-read-creds --namespace="+src, "--resource-name=creds")
	s.RunFix(t, got.Fix)
	s.WaitRunning(t, ns, "app", 2*time.Minute)
	waitVerdict(t, s, s.Kubeconfig, ns, "app", "OK")
}

func TestPodsDiagnoseSourceMissing(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	src := s.SourceNamespace(t, "diag-nosrc")
	share := "diag-nosrc-" + framework.RandSuffix()
	s.CreateShare(t, framework.KindSecret, share, src, "absent")
	ns := s.PodNamespace(t, "diag-nosrc-app")
	s.CreateServiceAccount(t, ns, "web")
	s.Grant(t, ns, framework.KindSecret, share, framework.ServiceAccount(ns, "web"))
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "web", Attrs: map[string]string{framework.AttrSharedSecret: share}})
	got := waitVerdict(t, s, s.Kubeconfig, ns, "app", "SourceMissing")
	wantFix(t, got, "kubectl create secret generic absent -n "+src)
	s.CreateSecret(t, src, "absent", map[string][]byte{"k": []byte("v")})
	s.WaitRunning(t, ns, "app", 2*time.Minute)
}

func TestPodsDiagnoseSourceReplaced(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca")})
	ns, pod, _ := grantedPod(t, s, f, "diag-replaced")
	s.WaitShareReady(t, f.Share, metav1.ConditionTrue, framework.ReasonSourceAvailable)
	if err := s.Kube.CoreV1().Secrets(f.Platform).Delete(context.Background(), f.Secret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.CreateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte("other")})
	sec, err := s.Kube.CoreV1().Secrets(f.Platform).Get(context.Background(), f.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := waitVerdict(t, s, s.Kubeconfig, ns, pod, "SourceReplaced")
	wantFix(t, got, "kubectl patch sharedsecrets "+f.Share+" --subresource=status", string(sec.UID))
}

func TestPodsDiagnoseRevoked(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca")})
	ns, pod, revoke := grantedPod(t, s, f, "diag-revoked")
	revoke()
	s.WaitEvent(t, ns, pod, framework.ReasonRevoked, framework.PodsRelist+framework.PodsRelistSlack+10*time.Second)
	got := waitVerdict(t, s, s.Kubeconfig, ns, pod, "Revoked")
	wantFix(t, got, `"name":"use-`+f.Share+`","namespace":"`+ns+`"`, "kubectl apply -f -")
	runKubectlFix(t, s, got.Fix)
	s.WaitEvent(t, ns, pod, framework.ReasonRestored, framework.PodsRelist+framework.PodsRelistSlack+10*time.Second)
	waitVerdict(t, s, s.Kubeconfig, ns, pod, "OK")
}

// The driver pod is taken off the node (a nodeSelector no node has), then put back.
func TestPodsDiagnoseDriverNotReady(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca")})
	ns, pod, _ := grantedPod(t, s, f, "diag-nodriver")
	old, err := s.DriverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	patch := func(v string) {
		t.Helper()
		p := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"srcsi-e2e/nowhere":%s}}}}}`, v)
		if _, err := s.Kube.AppsV1().DaemonSets(framework.PodsDriverNS).Patch(context.Background(), framework.DriverDaemonSet, types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(`"true"`)
	t.Cleanup(func() {
		patch("null")
		if _, err := s.WaitDriver(context.Background(), old.UID, 2*time.Minute); err != nil {
			t.Errorf("the driver did not come back: %v", err)
		}
	})
	// The old driver pod takes a while to go; until then the verdict names it (describe, logs).
	framework.Eventually(t, 2*time.Minute, func() error {
		node := s.GetPod(t, ns, pod).Spec.NodeName
		pods, err := s.Kube.CoreV1().Pods(framework.PodsDriverNS).List(context.Background(), metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + node, LabelSelector: "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=node-plugin"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return fmt.Errorf("the driver's pod %s is still on node %s", p.Name, node)
			}
		}
		return nil
	})
	got := waitVerdict(t, s, s.Kubeconfig, ns, pod, "DriverNotReady")
	wantFix(t, got, "kubectl -n "+framework.PodsDriverNS+" get daemonset", "kubectl describe node")
}

func TestPodsDiagnoseSaysWhatTheCallerLacks(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca")})
	ns, pod, _ := grantedPod(t, s, f, "diag-lacks")
	// May read pods, events and shares, but not create SubjectAccessReviews.
	kubeconfig, _, _, _ := s.ServiceAccountKubeconfig(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{framework.ShareGroup}, Resources: []string{"sharedsecrets"}, Verbs: []string{"get"}},
	})
	got := waitVerdict(t, s, kubeconfig, ns, pod, "Undetermined")
	wantFix(t, got, "create subjectaccessreviews.authorization.k8s.io")
	out, _ := admin(t, kubeconfig, "diagnose", pod, "-n", ns, "-o", "json")
	var r diagReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(r.CallerLacked, ";"), "create subjectaccessreviews.authorization.k8s.io") {
		t.Errorf("callerLacked %q does not name the SubjectAccessReviews", r.CallerLacked)
	}
}

func TestPodsWhoUsesAcrossNamespaces(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca")})
	nsA, _, _ := grantedPod(t, s, f, "who-a")
	nsB, _, _ := grantedPod(t, s, f, "who-b")
	nsC := s.PodNamespace(t, "who-c") // may not use it: its pod waits
	s.CreatePod(t, nsC, "app", framework.ConsumerSpec{Attrs: f.Attrs()})
	other := s.NewShare(t, map[string][]byte{"x": []byte("x")})
	grantedPod(t, s, other, "who-other") // another share: not listed
	s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte("ca-v1")})
	for _, nsP := range []string{nsA, nsB} {
		s.WaitEvent(t, nsP, "app", framework.ReasonRefreshed, framework.PodsRelist+framework.PodsRelistSlack+10*time.Second)
	}
	want := map[string]string{nsA: "yes published", nsB: "yes published", nsC: "no pending"}
	for _, target := range [][]string{{"sharedsecret/" + f.Share}, {"secret/" + f.Secret, "-n", f.Platform}} {
		out, code := admin(t, s.Kubeconfig, append([]string{"who-uses", "-o", "json"}, target...)...)
		var r whoReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("%v: exit %d %v: %s", target, code, err, out)
		}
		got := map[string]string{}
		for _, row := range r.Pods {
			got[row.Namespace] = row.MayUse + " " + row.State
			if row.Node == "" && row.State != "pending" || row.Share != "secret/"+f.Share {
				t.Errorf("%v: row %+v", target, row)
			}
			if row.State == "published" && !strings.HasPrefix(row.LastVersion, "resourceVersion ") {
				t.Errorf("%v: %s's last version %q", target, row.Namespace, row.LastVersion)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v: pods %v, want %v", target, got, want)
		}
		if reads := strings.Join(r.Reads, ", "); !strings.Contains(reads, "1× LIST pods (all namespaces)") {
			t.Errorf("%v: reads %q: want one LIST of pods", target, reads)
		}
	}
	// As a kubectl plugin: the binary linked as kubectl-shared_resource on $PATH.
	dir := t.TempDir()
	if err := os.Symlink(driverBinary(t), filepath.Join(dir, "kubectl-shared_resource")); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig as kubectl users have it: $KUBECONFIG, which the plugin reads as kubectl does.
	cmd := exec.Command(s.Kubectl, "shared-resource", "who-uses", "sharedsecret/"+f.Share)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "KUBECONFIG="+s.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl shared-resource who-uses: %v\n%s", err, out)
	}
	t.Logf("kubectl shared-resource who-uses sharedsecret/%s:\n%s", f.Share, out)
	for _, ns := range []string{nsA, nsB, nsC} {
		if !strings.Contains(string(out), ns) {
			t.Errorf("the plugin's table lacks namespace %s", ns)
		}
	}
}
