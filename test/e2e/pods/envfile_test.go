package pods

// Specification, with real pods, of environment variables from a share
// (docs/telling-the-application.md, "Environment variables"): an init container running
// `shared-resource-csi env-file` turns the share's files into an env file in a memory emptyDir,
// the kubelet gives the app the variables through fileKeyRef; with the watch sidecar and
// RestartAllContainers a change of the Secret restarts the pod in place (same UID, same node)
// and the app's new environment holds the new values; a key that cannot be a variable's name is
// refused as documented; no value reaches the driver's log or the init container's.
// Needs Kubernetes 1.36 or later (EnvFiles and RestartAllContainersOnContainerExits on).

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func resourceMi(n int64) resource.Quantity { return *resource.NewQuantity(n<<20, resource.BinarySI) }

var metav1Create = metav1.CreateOptions{}

func listApp(name string) metav1.ListOptions { return metav1.ListOptions{LabelSelector: "app=" + name} }

const envVolume, envMount, envFile = "env", "/env", "share.env"

// envDeployment is NotifyDeployment's pod with an env-file init container first (args after
// --dir and --out), the env file's memory emptyDir, and an app that prints its environment's
// USER and DB_PASSWORD (read from the env file by the kubelet) and mounts nothing.
func envDeployment(s *framework.PodSuite, ns, name string, attrs map[string]string, args ...string) *appsv1.Deployment {
	d := s.NotifyDeployment(ns, name, "web", attrs, false)
	spec := &d.Spec.Template.Spec
	envInit := corev1.Container{
		Name:  "env-file",
		Image: s.Image,
		Args:  append([]string{"env-file", "--dir=" + framework.PodMount, "--out=" + envMount + "/" + envFile}, args...),
		SecurityContext: &corev1.SecurityContext{
			ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: framework.PodVolName, MountPath: framework.PodMount, ReadOnly: true},
			{Name: envVolume, MountPath: envMount},
		},
	}
	spec.InitContainers = append([]corev1.Container{envInit}, spec.InitContainers...)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: envVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resourceMi(1))}}})
	app := &spec.Containers[0]
	app.VolumeMounts = nil
	app.Command = []string{"sh", "-c", `echo "USER=$USER"; echo "DB_PASSWORD=$DB_PASSWORD"; exec sleep 3600`}
	for _, v := range []string{"USER", "DB_PASSWORD"} {
		app.Env = append(app.Env, corev1.EnvVar{Name: v, ValueFrom: &corev1.EnvVarSource{
			FileKeyRef: &corev1.FileKeySelector{VolumeName: envVolume, Path: envFile, Key: v}}})
	}
	return d
}

func TestPodsEnvFromShareFollowsRotation(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	pw := func(i int) string { return fmt.Sprintf("pw-v%d-%s", i, framework.RandSuffix()) }
	data := func(p string) map[string][]byte {
		return map[string][]byte{"USER": []byte("alice"), "db.password": []byte(p), "tls.key": []byte("not-selected")}
	}
	secrets := [][]byte{[]byte("alice")}
	first := pw(0)
	secrets = append(secrets, []byte(first))
	f := s.NewShare(t, data(first))
	ns := s.PodNamespace(t, "envfile")
	s.CreateServiceAccount(t, ns, "web")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "web"))
	pod := s.NotifyPod(t, envDeployment(s, ns, "web", map[string]string{framework.AttrSharedSecret: f.Share},
		"--key=USER", "--key=db.password=DB_PASSWORD"))
	want := func(p string) string { return "USER=alice\nDB_PASSWORD=" + p + "\n" }
	if log := s.AppLog(t, ns, pod.Name); log != want(first) {
		t.Fatalf("the app's environment: %q, want %q", log, want(first))
	}

	var took []time.Duration
	for i := 1; i <= 6; i++ {
		p := pw(i)
		secrets = append(secrets, []byte(p))
		start := time.Now()
		s.UpdateSecret(t, f.Platform, f.Secret, data(p))
		framework.Eventually(t, framework.NotifyRestartBound, func() error {
			got := s.GetPod(t, ns, pod.Name)
			if n, running := framework.Restarts(got); n != int32(i) || !running {
				return fmt.Errorf("change %d: app restartCount %d, running %v (%s)", i, n, running, s.WhyNotRunning(got))
			}
			if log := s.AppLog(t, ns, pod.Name); log != want(p) {
				return fmt.Errorf("change %d: the app's environment %q, want %q", i, log, want(p))
			}
			return nil
		})
		took = append(took, time.Since(start))
		if got := s.GetPod(t, ns, pod.Name); got.UID != pod.UID || got.Spec.NodeName != pod.Spec.NodeName {
			t.Fatalf("change %d: another pod (uid %s on %s, was %s on %s)", i, got.UID, got.Spec.NodeName, pod.UID, pod.Spec.NodeName)
		}
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("Secret update to the restarted app's new environment, over %d changes (relist %v): median %v, min %v, max %v; in order: %v",
		len(took), framework.PodsRelist, sorted[len(sorted)/2].Round(10*time.Millisecond), sorted[0].Round(10*time.Millisecond),
		sorted[len(sorted)-1].Round(10*time.Millisecond), took)

	// Nothing of the values in the init container's log (it names the variables) or the driver's.
	initLog, err := s.Kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "env-file"}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(initLog), "wrote 2 variable(s)") || !strings.Contains(string(initLog), "USER, DB_PASSWORD") {
		t.Errorf("the init container's log does not say what it wrote: %q", initLog)
	}
	for _, v := range secrets[1:] {
		if strings.Contains(string(initLog), string(v)) {
			t.Errorf("the init container's log holds a value: %q", initLog)
		}
	}
	s.AssertNotLogged(t, secrets[1:]...)
}

func TestPodsEnvFileRefusesAKeyThatCannotBeAVariable(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	const value = "refused-value-never-logged"
	f := s.NewShare(t, map[string][]byte{"USER": []byte("bob"), "DB_PASSWORD": []byte("x"), "tls.crt": []byte(value)})
	ns := s.PodNamespace(t, "envfile-bad")
	s.CreateServiceAccount(t, ns, "web")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "web"))
	// tls.crt asked for by name: refused. (Without --key it would be left out and the others
	// written: internal/podcmd's TestEnvFileLeavesOutWhatItCannotWrite.)
	d := envDeployment(s, ns, "bad", map[string]string{framework.AttrSharedSecret: f.Share}, "--key=USER", "--key=DB_PASSWORD", "--key=tls.crt")
	if _, err := s.Kube.AppsV1().Deployments(ns).Create(context.Background(), d, metav1Create); err != nil {
		t.Fatal(err)
	}
	var log string
	framework.Eventually(t, 90*time.Second, func() error {
		pods, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), listApp("bad"))
		if err != nil || len(pods.Items) != 1 {
			return fmt.Errorf("pods: %v", err)
		}
		p := pods.Items[0]
		for _, cs := range p.Status.InitContainerStatuses {
			term := cs.State.Terminated
			if term == nil {
				term = cs.LastTerminationState.Terminated
			}
			if cs.Name == "env-file" && term != nil {
				if term.ExitCode != 1 {
					return fmt.Errorf("env-file exited %d, want 1", term.ExitCode)
				}
				b, err := s.Kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "env-file", Previous: cs.State.Terminated == nil}).DoRaw(context.Background())
				log = string(b)
				return err
			}
		}
		return fmt.Errorf("env-file has not exited yet (phase %s)", p.Status.Phase)
	})
	t.Logf("env-file refused: %s", strings.TrimSpace(log))
	for _, w := range []string{`key "tls.crt"`, "cannot be a variable's name", "--key=tls.crt=TLS_CRT"} {
		if !strings.Contains(log, w) {
			t.Errorf("the refusal %q does not say %q", log, w)
		}
	}
	if strings.Contains(log, value) {
		t.Errorf("the refusal shows the value: %q", log)
	}
	s.AssertNotLogged(t, []byte(value))
}

// The example a user copies: applied as is (the images swapped for the local ones), the app's
// environment holds the Secret's values, and after the Secret's update the new ones, in the
// same pod.
func TestPodsEnvFromShareExampleWorks(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	const file, ns = "examples/env-from-share.yaml", "team-db"
	manifest := s.ExampleManifest(t, file)
	s.KubeEnv.Kubectl(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() { s.KubeEnv.Kubectl(t, manifest, "delete", "-f", "-", "--wait=false", "--ignore-not-found") })
	var pod *corev1.Pod
	framework.Eventually(t, 90*time.Second, func() error {
		pods, err := s.Kube.CoreV1().Pods(ns).List(context.Background(), listApp("db-client"))
		if err != nil || len(pods.Items) != 1 || !framework.PodReady(&pods.Items[0]) {
			return fmt.Errorf("db-client's pod not Ready yet (%v)", err)
		}
		pod = &pods.Items[0]
		return nil
	})
	if log := s.AppLog(t, ns, pod.Name); !strings.Contains(log, "connecting as app (password: 18 characters)") {
		t.Fatalf("the example's app printed %q", log)
	}
	s.UpdateSecret(t, "platform-db", "db-creds", map[string][]byte{"USER": []byte("app2"), "db.password": []byte("new")})
	framework.Eventually(t, framework.NotifyRestartBound, func() error {
		// While the containers restart, the kubelet may not serve the app's log: asked again.
		b, err := s.Kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "app"}).DoRaw(context.Background())
		if log := string(b); err != nil || !strings.Contains(log, "connecting as app2 (password: 3 characters)") {
			return fmt.Errorf("after the update the app printed %q (%v)", log, err)
		}
		return nil
	})
	if got := s.GetPod(t, ns, pod.Name); got.UID != pod.UID {
		t.Errorf("the example's pod was replaced, not restarted in place")
	}
}
