package pods

// Specification, with real pods, of fsGroup and of isolation: a non-root pod reading a 0440 key
// through its fsGroup, and a pod of another service account on the same node reaching no byte of
// a share it was not granted; and every file under examples/ working as a user applies it.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsNonRootPodReadsA0440KeyThroughItsFsGroup(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	marker := "s3cr3t-" + framework.RandSuffix()
	f := s.NewShare(t, map[string][]byte{"id_ed25519": []byte(marker), "unused": []byte("x")})
	ns := s.PodNamespace(t, "team-ssh")
	s.CreateServiceAccount(t, ns, "deployer")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "deployer"))

	pod := s.ConsumerPod(ns, "deployer", framework.ConsumerSpec{Sa: "deployer", Attrs: map[string]string{
		framework.AttrSharedSecret: f.Share, framework.AttrDefaultMode: "0440", framework.AttrItems: "id_ed25519=ssh/id_ed25519",
	}})
	uid, gid, yes := int64(1000), int64(2000), true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: &yes, FSGroup: &gid}
	if _, err := s.Kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitRunning(t, ns, "deployer", 60*time.Second)

	out, stderr, err := s.Exec(ns, "deployer", "sh", "-c", "id -u; stat -L -c '%a %g' "+framework.PodMount+"/ssh/id_ed25519; cat "+framework.PodMount+"/ssh/id_ed25519; echo; ls "+framework.PodMount)
	if err != nil {
		t.Fatalf("exec: %v (%s)", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 4 || lines[0] != "1000" || lines[1] != "440 2000" || lines[2] != marker || strings.Contains(string(out), "unused") {
		t.Fatalf("the non-root pod saw:\n%s\nwant uid 1000, mode 440 group 2000, the key's bytes, only ssh/", out)
	}
	s.AssertNotLogged(t, []byte(marker))
}

func TestPodsOtherServiceAccountReachesNoByte(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	marker := "s3cr3t-" + framework.RandSuffix()
	f := s.NewShare(t, map[string][]byte{"token": []byte(marker)})
	ns := s.PodNamespace(t, "team-iso")
	s.CreateServiceAccount(t, ns, "granted")
	s.CreateServiceAccount(t, ns, "other")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "granted"))

	s.CreatePod(t, ns, "granted", framework.ConsumerSpec{Sa: "granted", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "granted", 60*time.Second)
	// The other service account's pod asking for the share does not start...
	s.CreatePod(t, ns, "denied", framework.ConsumerSpec{Sa: "other", Attrs: f.Attrs()})
	s.WaitEvent(t, ns, "denied", "FailedMount", 60*time.Second, "may not use SharedSecret")
	// ...and a pod of it on the same node, running, finds the bytes nowhere it can look: not in
	// its file systems, not in any mount it has.
	other := s.ConsumerPod(ns, "looker", framework.ConsumerSpec{Sa: "other"})
	other.Spec.Volumes, other.Spec.Containers[0].VolumeMounts = nil, nil
	other.Spec.Containers[0].Command = []string{"sh", "-c", "exec sleep 3600"}
	if _, err := s.Kube.CoreV1().Pods(ns).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.WaitRunning(t, ns, "looker", 60*time.Second)
	out, _, _ := s.Exec(ns, "looker", "sh", "-c", "find / -xdev -type f 2>/dev/null | xargs grep -l -- '"+marker+"' 2>/dev/null; "+
		"for m in $(awk '{print $2}' /proc/mounts); do case $m in /|/proc*|/sys*|/dev*) ;; *) grep -rl -- '"+marker+"' $m 2>/dev/null;; esac; done; echo done")
	if strings.TrimSpace(string(out)) != "done" {
		t.Errorf("the other service account's pod can reach the share's data or mounts:\n%s", out)
	}
	got, err := s.PodFiles(ns, "granted")
	if err != nil || string(got["token"]) != marker {
		t.Fatalf("the granted pod does not read its token (%v)", err)
	}
}

// The examples are the user stories as manifests: each is applied as a user would (with only the
// busybox image swapped for the locally imported one, as `make up` does), its pod must run and
// read its share, and the delegation example must let a namespace admin grant `use`.
func TestPodsExamplesWork(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	swapImage := regexp.MustCompile(`(?m)^( *)image: busybox:.*$`)
	apply := func(t *testing.T, file string, verb string) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		manifest := swapImage.ReplaceAllString(string(b), "${1}image: "+s.Busybox+"\n${1}imagePullPolicy: Never")
		cmd := exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, verb, "-f", "-")
		if verb == "delete" {
			cmd.Args = append(cmd.Args, "--wait=false", "--ignore-not-found")
		}
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s %s: %v\n%s", verb, file, err, out)
		}
	}
	readers := []struct{ file, ns, pod, path, want string }{
		{"examples/ca-bundle.yaml", "team-a", "corp-ca-reader", "/etc/corp-ca/ca.crt", "BEGIN CERTIFICATE"},
		{"examples/configmap-share.yaml", "team-b", "flags-reader", "/etc/flags/flags.yaml", "newCheckout: true"},
		{"examples/credentials-rotation.yaml", "team-ci", "build", "/creds/creds/token", "EXAMPLE-TOKEN-replace-me"},
		{"examples/ca-without-key.yaml", "team-tls", "issuer-ca-reader", "/etc/issuer-ca/ca.crt", "BEGIN CERTIFICATE"},
	}
	// Every file under examples/ is applied by a test: those above, the delegation below, and
	// restart-on-change.yaml by TestPodsRestartOnChangeExampleWorks, env-from-share.yaml by
	// TestPodsEnvFromShareExampleWorks. A new example without a
	// check fails here.
	covered := map[string]bool{"examples/delegate-use.yaml": true, "examples/restart-on-change.yaml": true,
		"examples/env-from-share.yaml": true} // TestPodsEnvFromShareExampleWorks
	for _, r := range readers {
		covered[r.file] = true
	}
	files, err := filepath.Glob("examples/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no file under examples/ (%v)", err)
	}
	for _, f := range files {
		if !covered[f] {
			t.Errorf("%s is applied by no test: add it to TestPodsExamplesWork with what it must do", f)
		}
	}
	for _, ex := range readers {
		apply(t, ex.file, "apply")
		t.Cleanup(func() { apply(t, ex.file, "delete") })
		s.WaitRunning(t, ex.ns, ex.pod, 90*time.Second)
		// The example's own container (not the suite's "app").
		out, err := exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, "-n", ex.ns, "exec", ex.pod, "--", "cat", ex.path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ex.want) {
			t.Errorf("%s: pod %s/%s reads %q (%v)", ex.file, ex.ns, ex.pod, out, err)
		}
	}
	// Delegation: a member of team-d-admins grants `use` on corp-ca to team-d/web, and no more.
	apply(t, "examples/delegate-use.yaml", "apply")
	t.Cleanup(func() { apply(t, "examples/delegate-use.yaml", "delete") })
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command(s.Kubectl, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	framework.Eventually(t, 30*time.Second, func() error {
		_, err := kubectl("--as=alice", "--as-group=team-d-admins", "-n", "team-d", "create", "rolebinding", "web-uses-corp-ca",
			"--clusterrole=use-corp-ca-delegable", "--serviceaccount=team-d:web")
		return err
	})
	if _, err := kubectl("--as=alice", "--as-group=team-d-admins", "-n", "team-d", "create", "rolebinding", "too-much",
		"--clusterrole=cluster-admin", "--serviceaccount=team-d:web"); err == nil {
		t.Error("a namespace admin could bind cluster-admin through the delegation example")
	}
	framework.Eventually(t, 30*time.Second, func() error {
		// stdout only: kubectl also warns on stderr that the resource is cluster-scoped.
		b, _ := exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, "auth", "can-i", "use", "sharedsecrets.sharedresource.openshift.io/corp-ca",
			"-n", "team-d", "--as=system:serviceaccount:team-d:web").Output()
		if out := strings.TrimSpace(string(b)); out != "yes" {
			return fmt.Errorf("team-d/web may not use corp-ca after the delegated grant (%q)", out)
		}
		return nil
	})
}
