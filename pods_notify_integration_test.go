//go:build integration

package main

// Specification, with real pods, of telling the application (README.md, "Telling the
// application"): a Deployment's pod running `shared-resource-csi watch` as a sidecar with a
// restartPolicyRules entry RestartAllContainers on its exit code is restarted in place when the
// Secret behind its share changes (same pod, same node, the volume not published again, the
// restarted app reading the new bytes), and not when refreshResource is "false", when only a key
// the pod does not see changes, or when the driver restarts; the signal variant signals the app
// once per change and both keep running; examples/restart-on-change.yaml works as a user applies
// it. Needs Kubernetes 1.36 or later (RestartAllContainersOnContainerExits on).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	notifyExitCode = 42 // the watcher's default --exit-code
	// notifyRestartBound: the relist bound, then the kubelet noticing the exit (PLEG), removing
	// every container and starting them again in order (the sidecar first).
	notifyRestartBound = podsRelist + podsRelistSlack + 20*time.Second
	// notifyQuiet: how long a test waits to see that nothing restarts: two relist bounds.
	notifyQuiet = 2 * (podsRelist + podsRelistSlack)
)

// notifyDeployment is the recipe: the app reads its share once at start (its log shows what it
// read), the watcher sidecar exits 42 on a real change, and RestartAllContainers restarts both.
// signal: the watcher signals the app's shell instead (shareProcessNamespace), which counts
// the SIGHUPs in a file.
func (s *podSuite) notifyDeployment(ns, name, sa string, attrs map[string]string, signal bool) *appsv1.Deployment {
	ro, no, grace := true, false, int64(1)
	uid, gid := int64(1000), int64(2000)
	mount := []corev1.VolumeMount{{Name: podVolName, MountPath: podMount, ReadOnly: true}}
	watcher := corev1.Container{
		Name:          "share-watcher",
		Image:         s.image,
		Args:          []string{"watch", "--dir=" + podMount},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		RestartPolicyRules: []corev1.ContainerRestartRule{{
			Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{notifyExitCode}},
		}},
		SecurityContext: &corev1.SecurityContext{
			ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: mount,
	}
	app := corev1.Container{
		Name:            "app",
		Image:           s.busybox,
		ImagePullPolicy: corev1.PullNever,
		// Reads its CA once, at start, as the apps this is for do.
		Command:      []string{"sh", "-c", "echo started; cat " + podMount + "/ca.crt; echo; exec sleep 3600"},
		VolumeMounts: mount,
	}
	volumes := []corev1.Volume{{Name: podVolName, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: driverName, ReadOnly: &ro, VolumeAttributes: attrs,
	}}}}
	var share *bool
	if signal {
		share = ptr.To(true)
		watcher.RestartPolicyRules = nil
		watcher.Args = append(watcher.Args, "--signal=HUP", "--process=sh")
		// sleep in the background so the shell runs its trap at once.
		app.Command = []string{"sh", "-c", "trap 'echo HUP >> /work/hups' HUP; : > /work/hups; while true; do sleep 1 & wait $!; done"}
		app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "work", MountPath: "/work"})
		volumes = append(volumes, corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            sa,
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					ShareProcessNamespace:         share,
					SecurityContext:               &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: ptr.To(true), FSGroup: &gid},
					InitContainers:                []corev1.Container{watcher},
					Containers:                    []corev1.Container{app},
					Volumes:                       volumes,
				},
			},
		},
	}
}

// notifyPod creates the Deployment and returns its one pod, running and Ready.
func (s *podSuite) notifyPod(t *testing.T, d *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	if _, err := s.kube.AppsV1().Deployments(d.Namespace).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
	var name string
	eventually(t, 60*time.Second, func() error {
		pods, err := s.kube.CoreV1().Pods(d.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + d.Name})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("Deployment %s/%s has %d pods", d.Namespace, d.Name, len(pods.Items))
		}
		name = pods.Items[0].Name
		return nil
	})
	return s.waitRunning(t, d.Namespace, name, 90*time.Second)
}

// restarts is the app container's restartCount and whether it runs now.
func restarts(p *corev1.Pod) (count int32, running bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			return cs.RestartCount, cs.State.Running != nil
		}
	}
	return -1, false
}

func (s *podSuite) getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := s.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// appLog is what the app container's current run printed.
func (s *podSuite) appLog(t *testing.T, ns, pod string) string {
	t.Helper()
	b, err := s.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// publishes counts the driver's "Published volume" lines for the pod: NodePublishVolume calls
// that published it (a repeated call for a published volume logs nothing).
func (s *podSuite) publishes(t *testing.T, ns, pod string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(s.driverLog(t), "\n") {
		if strings.Contains(line, `"Published volume"`) && strings.Contains(line, `pod="`+ns+"/"+pod+`"`) {
			n++
		}
	}
	return n
}

// assertNoRestart checks for notifyQuiet that the app never restarts.
func (s *podSuite) assertNoRestart(t *testing.T, ns, pod, why string) {
	t.Helper()
	deadline := time.Now().Add(notifyQuiet)
	for time.Now().Before(deadline) {
		if n, _ := restarts(s.getPod(t, ns, pod)); n != 0 {
			t.Fatalf("%s: the app restarted (restartCount %d)", why, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestPodsRestartInPlaceWhenTheShareChanges(t *testing.T) {
	s := podsEnv(t, podsShared)
	f := s.newShare(t, map[string][]byte{"ca.crt": []byte("ca-v0"), "unseen": []byte("u0")})
	ns := s.podNamespace(t, "notify")
	s.createServiceAccount(t, ns, "web")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "web"))
	// The pod sees ca.crt only (items): "unseen" is a key of the share it is not given.
	pod := s.notifyPod(t, s.notifyDeployment(ns, "web", "web", map[string]string{attrSharedSecret: f.share, attrItems: "ca.crt"}, false))
	if log := s.appLog(t, ns, pod.Name); !strings.Contains(log, "ca-v0") {
		t.Fatalf("the app did not read its CA at start: %q", log)
	}
	if n := s.publishes(t, ns, pod.Name); n != 1 {
		t.Fatalf("the driver logged %d publishes of the pod's volume, want 1", n)
	}

	// A key the pod does not see changes: its view is the same, nothing restarts.
	s.updateSecret(t, f.platform, f.secret, map[string][]byte{"ca.crt": []byte("ca-v0"), "unseen": []byte("u1")})
	s.assertNoRestart(t, ns, pod.Name, "only a key the pod does not see changed")

	// Each change of ca.crt restarts the app in place, once, and it reads the new bytes.
	var took []time.Duration
	for i := 1; i <= 8; i++ {
		v := fmt.Sprintf("ca-v%d-%s", i, randSuffix())
		start := time.Now()
		s.updateSecret(t, f.platform, f.secret, map[string][]byte{"ca.crt": []byte(v), "unseen": []byte("u1")})
		var p *corev1.Pod
		eventually(t, notifyRestartBound, func() error {
			p = s.getPod(t, ns, pod.Name)
			if n, running := restarts(p); n != int32(i) || !running {
				return fmt.Errorf("change %d: app restartCount %d, running %v, want %d and running (%s)", i, n, running, i, s.whyNotRunning(p))
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
		eventually(t, 10*time.Second, func() error {
			if log := s.appLog(t, ns, pod.Name); !strings.Contains(log, v) {
				return fmt.Errorf("change %d: the restarted app read %q, want the new CA", i, log)
			}
			return nil
		})
		// One change, one restart: nothing more follows.
		time.Sleep(podsRelist)
		if n, _ := restarts(s.getPod(t, ns, pod.Name)); n != int32(i) {
			t.Fatalf("change %d: restartCount %d, want %d: restarted more than once", i, n, i)
		}
	}
	if n := s.publishes(t, ns, pod.Name); n != 1 {
		t.Errorf("the driver logged %d publishes of the pod's volume after the restarts, want 1: the kubelet published it again", n)
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("Secret update to the app running again, over %d changes (relist %v): median %v, min %v, max %v; in order: %v",
		len(took), podsRelist, sorted[len(sorted)/2].Round(10*time.Millisecond), sorted[0].Round(10*time.Millisecond),
		sorted[len(sorted)-1].Round(10*time.Millisecond), took)
	// The kubelet's crash-loop back-off does not apply: the last restart is not slower than the
	// first by more than a relist interval (a back-off would add 10 s, 20 s, 40 s...).
	if took[len(took)-1] > took[0]+podsRelist+5*time.Second {
		t.Errorf("restarts slow down change after change (%v): the kubelet's back-off applies", took)
	}
}

func TestPodsNoRestartWhenRefreshIsFalse(t *testing.T) {
	s := podsEnv(t, podsShared)
	f, ns := s.notifyShare(t, "notify-pinned")
	pod := s.notifyPod(t, s.notifyDeployment(ns, "web", "web", map[string]string{attrSharedSecret: f.share, attrRefreshResource: "false"}, false))
	s.updateSecret(t, f.platform, f.secret, map[string][]byte{"ca.crt": []byte("ca-v1")})
	s.assertNoRestart(t, ns, pod.Name, `refreshResource: "false"`)
}

func TestPodsNoRestartWhenTheDriverRestarts(t *testing.T) {
	s := podsEnv(t, podsAlone)
	f, ns := s.notifyShare(t, "notify-driver")
	pod := s.notifyPod(t, s.notifyDeployment(ns, "web", "web", map[string]string{attrSharedSecret: f.share}, false))
	old, err := s.driverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.kube.CoreV1().Pods(podsDriverNS).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.waitDriver(context.Background(), old.UID, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	s.assertNoRestart(t, ns, pod.Name, "the driver restarted and resumed the volume")
	// The watcher still works with the new driver.
	s.updateSecret(t, f.platform, f.secret, map[string][]byte{"ca.crt": []byte("ca-v1")})
	eventually(t, notifyRestartBound, func() error {
		if n, running := restarts(s.getPod(t, ns, pod.Name)); n != 1 || !running {
			return fmt.Errorf("after a change through the new driver: app restartCount %d, running %v; want 1, running", n, running)
		}
		return nil
	})
}

func TestPodsSignalTheAppOncePerChange(t *testing.T) {
	s := podsEnv(t, podsShared)
	f, ns := s.notifyShare(t, "notify-signal")
	pod := s.notifyPod(t, s.notifyDeployment(ns, "proxy", "web", map[string]string{attrSharedSecret: f.share}, true))
	hups := func() (int, error) {
		out, stderr, err := s.exec(ns, pod.Name, "cat", "/work/hups")
		if err != nil {
			return 0, fmt.Errorf("cat /work/hups: %v: %s", err, stderr)
		}
		return strings.Count(string(out), "HUP"), nil
	}
	for i := 1; i <= 3; i++ {
		s.updateSecret(t, f.platform, f.secret, map[string][]byte{"ca.crt": []byte(fmt.Sprintf("ca-v%d", i))})
		eventually(t, podsRelist+podsRelistSlack+5*time.Second, func() error {
			n, err := hups()
			if err == nil && n != i {
				err = fmt.Errorf("change %d: the app got %d SIGHUPs", i, n)
			}
			return err
		})
	}
	time.Sleep(podsRelist + podsRelistSlack) // no further signal without a change
	if n, err := hups(); err != nil || n != 3 {
		t.Errorf("after 3 changes the app got %d SIGHUPs (%v), want 3", n, err)
	}
	p := s.getPod(t, ns, pod.Name)
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.RestartCount != 0 || cs.State.Running == nil {
			t.Errorf("container %s: restartCount %d, running %v: the signal variant must restart nothing", cs.Name, cs.RestartCount, cs.State.Running != nil)
		}
	}
}

// The example a user copies: applied as is (the images swapped for the local ones), its pod
// restarts in place when the example's Secret changes.
func TestPodsRestartOnChangeExampleWorks(t *testing.T) {
	s := podsEnv(t, podsShared)
	const file, ns = "examples/restart-on-change.yaml", "team-web"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	manifest := regexp.MustCompile(`(?m)^( *)image: busybox:.*$`).ReplaceAllString(string(b), "${1}image: "+s.busybox+"\n${1}imagePullPolicy: Never")
	manifest = regexp.MustCompile(`(?m)^( *)image: ghcr.io/shared-resource/shared-resource-csi:.*$`).ReplaceAllString(manifest, "${1}image: "+s.image)
	kubectl := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	// Before 1.36 (RestartAllContainersOnContainerExits off) the API server refuses the
	// Deployment, saying why; the README says what to use there.
	if v, err := s.kube.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	} else if minor, _ := strconv.Atoi(strings.TrimRight(v.Minor, "+")); minor < 36 {
		cmd := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "apply", "-f", "-")
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
	eventually(t, 90*time.Second, func() error {
		pods, err := s.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) != 1 || !podReady(&pods.Items[0]) {
			return fmt.Errorf("the example's pod is not Ready (%v)", err)
		}
		pod = &pods.Items[0]
		return nil
	})
	s.updateSecret(t, "platform-web", "web-ca", map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nROTATED\n-----END CERTIFICATE-----\n")})
	eventually(t, notifyRestartBound, func() error {
		p := s.getPod(t, ns, pod.Name)
		if n, running := restarts(p); n != 1 || !running || p.UID != pod.UID {
			return fmt.Errorf("the example's app: restartCount %d, running %v, same pod %v", n, running, p.UID == pod.UID)
		}
		return nil
	})
}

// notifyShare is a share of a Secret holding ca.crt = ca-v0, and a namespace (named from prefix)
// whose service account "web" may use it.
func (s *podSuite) notifyShare(t *testing.T, prefix string) (*shareFixture, string) {
	t.Helper()
	f := s.newShare(t, map[string][]byte{"ca.crt": []byte("ca-v0")})
	ns := s.podNamespace(t, prefix)
	s.createServiceAccount(t, ns, "web")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "web"))
	return f, ns
}
