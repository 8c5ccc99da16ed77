//go:build integration

package main

// Specification, with real pods, of fsGroup and of isolation: a non-root pod reading a 0440 key
// through its fsGroup, and a pod of another service account on the same node reaching no byte of
// a share it was not granted; and every file under examples/ working as a user applies it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsNonRootPodReadsA0440KeyThroughItsFsGroup(t *testing.T) {
	s := podsEnv(t, podsShared)
	marker := "s3cr3t-" + randSuffix()
	f := s.newShare(t, map[string][]byte{"id_ed25519": []byte(marker), "unused": []byte("x")})
	ns := s.podNamespace(t, "team-ssh")
	s.createServiceAccount(t, ns, "deployer")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "deployer"))

	pod := s.consumerPod(ns, "deployer", consumerSpec{sa: "deployer", attrs: map[string]string{
		attrSharedSecret: f.share, attrDefaultMode: "0440", attrItems: "id_ed25519=ssh/id_ed25519",
	}})
	uid, gid, yes := int64(1000), int64(2000), true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: &yes, FSGroup: &gid}
	if _, err := s.kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitRunning(t, ns, "deployer", 60*time.Second)

	out, stderr, err := s.exec(ns, "deployer", "sh", "-c", "id -u; stat -L -c '%a %g' "+podMount+"/ssh/id_ed25519; cat "+podMount+"/ssh/id_ed25519; echo; ls "+podMount)
	if err != nil {
		t.Fatalf("exec: %v (%s)", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 4 || lines[0] != "1000" || lines[1] != "440 2000" || lines[2] != marker || strings.Contains(string(out), "unused") {
		t.Fatalf("the non-root pod saw:\n%s\nwant uid 1000, mode 440 group 2000, the key's bytes, only ssh/", out)
	}
	s.assertNotLogged(t, []byte(marker))
}

func TestPodsOtherServiceAccountReachesNoByte(t *testing.T) {
	s := podsEnv(t, podsShared)
	marker := "s3cr3t-" + randSuffix()
	f := s.newShare(t, map[string][]byte{"token": []byte(marker)})
	ns := s.podNamespace(t, "team-iso")
	s.createServiceAccount(t, ns, "granted")
	s.createServiceAccount(t, ns, "other")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "granted"))

	s.createPod(t, ns, "granted", consumerSpec{sa: "granted", attrs: f.attrs()})
	s.waitRunning(t, ns, "granted", 60*time.Second)
	// The other service account's pod asking for the share does not start...
	s.createPod(t, ns, "denied", consumerSpec{sa: "other", attrs: f.attrs()})
	s.waitEvent(t, ns, "denied", "FailedMount", 60*time.Second, "may not use SharedSecret")
	// ...and a pod of it on the same node, running, finds the bytes nowhere it can look: not in
	// its file systems, not in any mount it has.
	other := s.consumerPod(ns, "looker", consumerSpec{sa: "other"})
	other.Spec.Volumes, other.Spec.Containers[0].VolumeMounts = nil, nil
	other.Spec.Containers[0].Command = []string{"sh", "-c", "exec sleep 3600"}
	if _, err := s.kube.CoreV1().Pods(ns).Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitRunning(t, ns, "looker", 60*time.Second)
	out, _, _ := s.exec(ns, "looker", "sh", "-c", "find / -xdev -type f 2>/dev/null | xargs grep -l -- '"+marker+"' 2>/dev/null; "+
		"for m in $(awk '{print $2}' /proc/mounts); do case $m in /|/proc*|/sys*|/dev*) ;; *) grep -rl -- '"+marker+"' $m 2>/dev/null;; esac; done; echo done")
	if strings.TrimSpace(string(out)) != "done" {
		t.Errorf("the other service account's pod can reach the share's data or mounts:\n%s", out)
	}
	got, err := s.podFiles(ns, "granted")
	if err != nil || string(got["token"]) != marker {
		t.Fatalf("the granted pod does not read its token (%v)", err)
	}
}

// The examples are the user stories as manifests: each is applied as a user would (with only the
// busybox image swapped for the locally imported one, as `make up` does), its pod must run and
// read its share, and the delegation example must let a namespace admin grant `use`.
func TestPodsExamplesWork(t *testing.T) {
	s := podsEnv(t, podsShared)
	swapImage := regexp.MustCompile(`(?m)^( *)image: busybox:.*$`)
	apply := func(t *testing.T, file string, verb string) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		manifest := swapImage.ReplaceAllString(string(b), "${1}image: "+s.busybox+"\n${1}imagePullPolicy: Never")
		cmd := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, verb, "-f", "-")
		if verb == "delete" {
			cmd.Args = append(cmd.Args, "--wait=false", "--ignore-not-found")
		}
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s %s: %v\n%s", verb, file, err, out)
		}
	}
	for _, ex := range []struct{ file, ns, pod, path, want string }{
		{"examples/ca-bundle.yaml", "team-a", "corp-ca-reader", "/etc/corp-ca/ca.crt", "BEGIN CERTIFICATE"},
		{"examples/configmap-share.yaml", "team-b", "flags-reader", "/etc/flags/flags.yaml", "newCheckout: true"},
		{"examples/credentials-rotation.yaml", "team-ci", "build", "/creds/creds/token", "EXAMPLE-TOKEN-replace-me"},
		{"examples/ca-without-key.yaml", "team-tls", "issuer-ca-reader", "/etc/issuer-ca/ca.crt", "BEGIN CERTIFICATE"},
	} {
		apply(t, ex.file, "apply")
		t.Cleanup(func() { apply(t, ex.file, "delete") })
		s.waitRunning(t, ex.ns, ex.pod, 90*time.Second)
		// The example's own container (not the suite's "app").
		out, err := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "-n", ex.ns, "exec", ex.pod, "--", "cat", ex.path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ex.want) {
			t.Errorf("%s: pod %s/%s reads %q (%v)", ex.file, ex.ns, ex.pod, out, err)
		}
	}
	// Delegation: a member of team-d-admins grants `use` on corp-ca to team-d/web, and no more.
	apply(t, "examples/delegate-use.yaml", "apply")
	t.Cleanup(func() { apply(t, "examples/delegate-use.yaml", "delete") })
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	eventually(t, 30*time.Second, func() error {
		_, err := kubectl("--as=alice", "--as-group=team-d-admins", "-n", "team-d", "create", "rolebinding", "web-uses-corp-ca",
			"--clusterrole=use-corp-ca-delegable", "--serviceaccount=team-d:web")
		return err
	})
	if _, err := kubectl("--as=alice", "--as-group=team-d-admins", "-n", "team-d", "create", "rolebinding", "too-much",
		"--clusterrole=cluster-admin", "--serviceaccount=team-d:web"); err == nil {
		t.Error("a namespace admin could bind cluster-admin through the delegation example")
	}
	eventually(t, 30*time.Second, func() error {
		// stdout only: kubectl also warns on stderr that the resource is cluster-scoped.
		b, _ := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "auth", "can-i", "use", "sharedsecrets.sharedresource.openshift.io/corp-ca",
			"-n", "team-d", "--as=system:serviceaccount:team-d:web").Output()
		if out := strings.TrimSpace(string(b)); out != "yes" {
			return fmt.Errorf("team-d/web may not use corp-ca after the delegated grant (%q)", out)
		}
		return nil
	})
}
