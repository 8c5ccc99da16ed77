package pods

// Specification, with real pods, of telling the application (docs/telling-the-application.md):
// a Deployment's pod running `shared-resource-csi watch` as a sidecar with a
// restartPolicyRules entry RestartAllContainers on its exit code is restarted in place when the
// Secret behind its share changes (same pod, same node, the volume not published again, the
// restarted app reading the new bytes), and not when refreshResource is "false", when only a key
// the pod does not see changes, or when the driver restarts; the signal variant signals the app
// once per change and both keep running; examples/restart-on-change.yaml works as a user applies
// it. Needs Kubernetes 1.36 or later (RestartAllContainersOnContainerExits on).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsRestartInPlaceWhenTheShareChanges(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca-v0"), "unseen": []byte("u0")})
	ns := s.PodNamespace(t, "notify")
	s.CreateServiceAccount(t, ns, "web")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "web"))
	// The pod sees ca.crt only (items): "unseen" is a key of the share it is not given.
	pod := s.NotifyPod(t, s.NotifyDeployment(ns, "web", "web", map[string]string{framework.AttrSharedSecret: f.Share, framework.AttrItems: "ca.crt"}, false))
	s.LogContainersIfFailed(t, ns, pod.Name)
	if log := s.AppLog(t, ns, pod.Name); !strings.Contains(log, "ca-v0") {
		t.Fatalf("the app did not read its CA at start: %q", log)
	}
	if n := s.Publishes(t, ns, pod.Name); n != 1 {
		t.Fatalf("the driver logged %d publishes of the pod's volume, want 1", n)
	}

	// A key the pod does not see changes: its view is the same, nothing restarts.
	s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte("ca-v0"), "unseen": []byte("u1")})
	s.AssertNoRestart(t, ns, pod.Name, "only a key the pod does not see changed")

	// Each change of ca.crt restarts the app in place, once, and it reads the new bytes.
	var took []time.Duration
	for i := 1; i <= 8; i++ {
		v := fmt.Sprintf("ca-v%d-%s", i, framework.RandSuffix())
		start := time.Now()
		s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte(v), "unseen": []byte("u1")})
		var p *corev1.Pod
		framework.Eventually(t, framework.NotifyRestartBound, func() error {
			p = s.GetPod(t, ns, pod.Name)
			if n, running := framework.Restarts(p); n != int32(i) || !running {
				return fmt.Errorf("change %d: app restartCount %d, running %v, want %d and running (%s)", i, n, running, i, s.WhyNotRunning(p))
			}
			return nil
		})
		took = append(took, time.Since(start))
		// What the status says of the restart: the kubelet records a synthetic last state for
		// every container (reason RestartingAllContainers, exit 137, no times), the watcher's
		// exit 42 included; the restart counts of both go up by one.
		for _, cs := range p.Status.InitContainerStatuses {
			if term := cs.LastTerminationState.Terminated; cs.Name == "share-watcher" && term != nil {
				t.Logf("change %d: share-watcher restartCount %d, last state %s, exit %d", i, cs.RestartCount, term.Reason, term.ExitCode)
			}
		}
		if p.UID != pod.UID || p.Spec.NodeName != pod.Spec.NodeName {
			t.Fatalf("change %d: the pod is another one (uid %s on %s, was %s on %s)", i, p.UID, p.Spec.NodeName, pod.UID, pod.Spec.NodeName)
		}
		framework.Eventually(t, 10*time.Second, func() error {
			if log := s.AppLog(t, ns, pod.Name); !strings.Contains(log, v) {
				return fmt.Errorf("change %d: the restarted app read %q, want the new CA", i, log)
			}
			return nil
		})
		// One change, one restart: nothing more follows.
		time.Sleep(framework.PodsRelist)
		if n, _ := framework.Restarts(s.GetPod(t, ns, pod.Name)); n != int32(i) {
			t.Fatalf("change %d: restartCount %d, want %d: restarted more than once", i, n, i)
		}
	}
	if n := s.Publishes(t, ns, pod.Name); n != 1 {
		t.Errorf("the driver logged %d publishes of the pod's volume after the restarts, want 1: the kubelet published it again", n)
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("Secret update to the app running again, over %d changes (relist %v): median %v, min %v, max %v; in order: %v",
		len(took), framework.PodsRelist, sorted[len(sorted)/2].Round(10*time.Millisecond), sorted[0].Round(10*time.Millisecond),
		sorted[len(sorted)-1].Round(10*time.Millisecond), took)
	// The kubelet's crash-loop back-off does not apply: the last restart is not slower than the
	// first by more than a relist interval (a back-off would add 10 s, 20 s, 40 s...).
	if took[len(took)-1] > took[0]+framework.PodsRelist+5*time.Second {
		t.Errorf("restarts slow down change after change (%v): the kubelet's back-off applies", took)
	}
}

func TestPodsNoRestartWhenRefreshIsFalse(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f, ns := s.NotifyShare(t, "notify-pinned")
	pod := s.NotifyPod(t, s.NotifyDeployment(ns, "web", "web", map[string]string{framework.AttrSharedSecret: f.Share, framework.AttrRefreshResource: "false"}, false))
	s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte("ca-v1")})
	s.AssertNoRestart(t, ns, pod.Name, `refreshResource: "false"`)
}

func TestPodsNoRestartWhenTheDriverRestarts(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsAlone)
	f, ns := s.NotifyShare(t, "notify-driver")
	pod := s.NotifyPod(t, s.NotifyDeployment(ns, "web", "web", map[string]string{framework.AttrSharedSecret: f.Share}, false))
	old, err := s.DriverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kube.CoreV1().Pods(framework.PodsDriverNS).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitDriver(context.Background(), old.UID, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	s.AssertNoRestart(t, ns, pod.Name, "the driver restarted and resumed the volume")
	// The watcher still works with the new driver.
	s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte("ca-v1")})
	framework.Eventually(t, framework.NotifyRestartBound, func() error {
		if n, running := framework.Restarts(s.GetPod(t, ns, pod.Name)); n != 1 || !running {
			return fmt.Errorf("after a change through the new driver: app restartCount %d, running %v; want 1, running", n, running)
		}
		return nil
	})
}

func TestPodsSignalTheAppOncePerChange(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	f, ns := s.NotifyShare(t, "notify-signal")
	pod := s.NotifyPod(t, s.NotifyDeployment(ns, "proxy", "web", map[string]string{framework.AttrSharedSecret: f.Share}, true))
	s.LogContainersIfFailed(t, ns, pod.Name) // what the watcher saw and signalled
	hups := func() (int, error) {
		out, stderr, err := s.Exec(ns, pod.Name, "cat", "/work/hups")
		if err != nil {
			return 0, fmt.Errorf("cat /work/hups: %v: %s", err, stderr)
		}
		return strings.Count(string(out), "HUP"), nil
	}
	// The app makes /work/hups once its trap is set: a SIGHUP before that would end it.
	framework.Eventually(t, 30*time.Second, func() error {
		_, err := hups()
		return err
	})
	for i := 1; i <= 3; i++ {
		s.UpdateSecret(t, f.Platform, f.Secret, map[string][]byte{"ca.crt": []byte(fmt.Sprintf("ca-v%d", i))})
		framework.Eventually(t, framework.PodsRelist+framework.PodsRelistSlack+5*time.Second, func() error {
			n, err := hups()
			if err == nil && n != i {
				err = fmt.Errorf("change %d: the app got %d SIGHUPs", i, n)
			}
			return err
		})
	}
	time.Sleep(framework.PodsRelist + framework.PodsRelistSlack) // no further signal without a change
	if n, err := hups(); err != nil || n != 3 {
		t.Errorf("after 3 changes the app got %d SIGHUPs (%v), want 3", n, err)
	}
	p := s.GetPod(t, ns, pod.Name)
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.RestartCount != 0 || cs.State.Running == nil {
			t.Errorf("container %s: restartCount %d, running %v: the signal variant must restart nothing", cs.Name, cs.RestartCount, cs.State.Running != nil)
		}
	}
}

// The example a user copies: applied as is (the images swapped for the local ones), its pod
// restarts in place when the example's Secret changes.
func TestPodsRestartOnChangeExampleWorks(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	const file, ns = "examples/restart-on-change.yaml", "team-web"
	manifest := s.ExampleManifest(t, file)
	kubectl := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(s.Kubectl, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	// Before 1.36 (RestartAllContainersOnContainerExits off) the API server refuses the
	// Deployment, saying why; docs/telling-the-application.md says what to use there.
	if v, err := s.Kube.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	} else if minor, _ := strconv.Atoi(strings.TrimRight(v.Minor, "+")); minor < 36 {
		cmd := exec.Command(s.Kubectl, "--kubeconfig", s.Kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		t.Cleanup(func() { kubectl(manifest, "delete", "-f", "-", "--wait=false", "--ignore-not-found") })
		if err == nil || !strings.Contains(string(out), "restartPolicyRules") {
			t.Fatalf("Kubernetes 1.%d: applying %s: %v, want it refused naming restartPolicyRules:\n%s", minor, file, err, out)
		}
		return
	}
	kubectl(manifest, "apply", "-f", "-")
	t.Cleanup(func() { kubectl(manifest, "delete", "-f", "-", "--wait=false", "--ignore-not-found") })
	var pod *corev1.Pod
	framework.Eventually(t, 90*time.Second, func() error {
		pods, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) != 1 || !framework.PodReady(&pods.Items[0]) {
			return fmt.Errorf("the example's pod is not Ready (%v)", err)
		}
		pod = &pods.Items[0]
		return nil
	})
	// The sidecar runs what the example says (`watch`) and keeps running: an image without the
	// subcommand would exit 2 at once.
	if cs := initStatus(pod, "share-watcher"); cs == nil || cs.State.Running == nil || cs.RestartCount != 0 {
		t.Fatalf("the example's share-watcher sidecar is not running from its first start: %+v", cs)
	}
	s.UpdateSecret(t, "platform-web", "web-ca", map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nROTATED\n-----END CERTIFICATE-----\n")})
	framework.Eventually(t, framework.NotifyRestartBound, func() error {
		p := s.GetPod(t, ns, pod.Name)
		if n, running := framework.Restarts(p); n != 1 || !running || p.UID != pod.UID {
			return fmt.Errorf("the example's app: restartCount %d, running %v, same pod %v", n, running, p.UID == pod.UID)
		}
		return nil
	})
}

// initStatus is the status of the pod's init container (or sidecar) name, or nil.
func initStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}
