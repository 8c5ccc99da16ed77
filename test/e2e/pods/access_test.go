package pods

// Specification of the driver's read access as users meet it, with real pods on the real kubelet
// and the driver deployed from deploy.yaml (which grants it no read of any Secret):
//   - a source in a namespace nobody granted (kube-system) is not mounted; the pod's FailedMount
//     event and the share's Ready condition say what to run; the driver still may not read
//     kube-system after a Role limited by resourceNames lets it read one object there, which then
//     mounts while a second Secret of the namespace still does not;
//   - running the command the FailedMount event gives lets the same pod start;
//   - read taken away while a pod runs keeps the pod's files, says so on the share and on the pod.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsSourceInNamespaceNotGrantedIsNotMounted(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	ctx := context.Background()
	const sys = "kube-system"
	first, second := "srcsi-test-a-"+framework.RandSuffix(), "srcsi-test-b-"+framework.RandSuffix()
	data := map[string][]byte{"token": []byte("sys-" + framework.RandSuffix())}
	for _, name := range []string{first, second} {
		s.CreateSecret(t, sys, name, data)
		t.Cleanup(func() { _ = s.Kube.CoreV1().Secrets(sys).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	shareA, shareB := "sys-a-"+framework.RandSuffix(), "sys-b-"+framework.RandSuffix()
	s.CreateShare(t, framework.KindSecret, shareA, sys, first)
	s.CreateShare(t, framework.KindSecret, shareB, sys, second)
	ns := s.PodNamespace(t, "sys-reader")
	s.CreateServiceAccount(t, ns, "app")
	s.Grant(t, ns, framework.KindSecret, shareA, framework.ServiceAccount(ns, "app"))
	s.Grant(t, ns, framework.KindSecret, shareB, framework.ServiceAccount(ns, "app"))

	s.CreatePod(t, ns, "a", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{framework.AttrSharedSecret: shareA}})
	ev := s.WaitEvent(t, ns, "a", "FailedMount", 60*time.Second, "FailedPrecondition",
		"the driver may not read Secret "+sys+"/"+first, framework.GrantReadFix(sys), "--resource-name="+first)
	t.Logf("FailedMount: %s", ev.Message)
	c := s.WaitShareReady(t, shareA, metav1.ConditionFalse, framework.ReasonSourceForbidden, "Secret "+sys+"/"+first, framework.GrantReadFix(sys))
	t.Logf("Ready condition: %s/%s: %s", c.Status, c.Reason, c.Message)
	if got := s.CanI(t, "get", "secrets", sys); got != "no" {
		t.Fatalf("kubectl auth can-i get secrets -n %s --as %s: %q, want no", sys, framework.DriverUser, got)
	}

	// The narrowest grant: get on the one Secret, by a Role with resourceNames.
	// Both accounts that read sources, as the command in the event says: the node plugins' and
	// the status controller's (which writes the share's Ready condition).
	for _, sa := range framework.SourceReaders() {
		s.GrantGet(t, sa, sys, "secrets", first)
		s.WaitMayGet(t, sa, sys, "secrets", first, true)
	}
	start := time.Now()
	s.WaitRunning(t, ns, "a", 120*time.Second)
	t.Logf("granted: pod Running %v later (the kubelet's mount retry backoff)", time.Since(start).Round(100*time.Millisecond))
	s.WaitFiles(t, ns, "a", data, 10*time.Second)
	s.WaitShareReady(t, shareA, metav1.ConditionTrue, framework.ReasonSourceAvailable, "Secret "+sys+"/"+first)

	// Nothing else of kube-system: another Secret there is still not mounted, and the driver
	// still may not read the namespace.
	s.CreatePod(t, ns, "b", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{framework.AttrSharedSecret: shareB}})
	s.WaitEvent(t, ns, "b", "FailedMount", 60*time.Second, "the driver may not read Secret "+sys+"/"+second)
	s.WaitShareReady(t, shareB, metav1.ConditionFalse, framework.ReasonSourceForbidden, "Secret "+sys+"/"+second)
	if got := s.CanI(t, "get", "secrets", sys); got != "no" {
		t.Errorf("after the narrow grant, can-i get secrets -n %s: %q, want no", sys, got)
	}
	if got := s.CanI(t, "get", "secrets/"+first, sys); got != "yes" {
		t.Errorf("can-i get secrets/%s -n %s: %q, want yes", first, sys, got)
	}
	if p, err := s.Kube.CoreV1().Pods(ns).Get(ctx, "b", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod b: %v (%v), want Pending", p.Status.Phase, err)
	}
}

// An admin runs exactly what the FailedMount event says; the same pod then starts, and the
// share turns Ready within one status pass.
func TestPodsSourceReadGrantedWithTheCommandTheEventGives(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	src := s.Namespace(t, "ungranted")
	data := map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())}
	share, ns := s.SharedToNewPod(t, src, data)

	ev := s.WaitEvent(t, ns, "app", "FailedMount", 60*time.Second, "the driver may not read Secret "+src+"/ca-bundle", framework.GrantReadFix(src))
	s.WaitShareReady(t, share, metav1.ConditionFalse, framework.ReasonSourceForbidden, framework.GrantReadFix(src))
	s.RunFix(t, ev.Message)
	start := time.Now()
	s.WaitRunning(t, ns, "app", 120*time.Second)
	t.Logf("fixed: pod Running %v later", time.Since(start).Round(100*time.Millisecond))
	s.WaitFiles(t, ns, "app", data, 10*time.Second)
	s.WaitShareReady(t, share, metav1.ConditionTrue, framework.ReasonSourceAvailable, "Secret "+src+"/ca-bundle")
}

// Read taken away while the pod runs: its files stay (an API error is never a revocation), the
// share says SourceForbidden, the pod gets one Warning event; read back, the pod follows the
// source again.
func TestPodsDriverLosesReadWhileRunningKeepsData(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	src := s.Namespace(t, "platform")
	revokeRead := s.GrantSourceRead(t, src, framework.SourceReaders()...)
	v1 := map[string][]byte{"ca.crt": []byte("v1-" + framework.RandSuffix())}
	share, ns := s.SharedToNewPod(t, src, v1)
	s.WaitRunning(t, ns, "app", 60*time.Second)
	s.WaitFiles(t, ns, "app", v1, 10*time.Second)

	revokeRead()
	ev := s.WaitEvent(t, ns, "app", framework.ReasonRefreshFailed, framework.PodsRelist+framework.PodsRelistSlack,
		"keeps its last files and is not refreshed", "may not read Secret "+src+"/ca-bundle", framework.GrantReadFix(src))
	t.Logf("%s: %s", framework.ReasonRefreshFailed, ev.Message)
	s.WaitShareReady(t, share, metav1.ConditionFalse, framework.ReasonSourceForbidden, "keep their last data", framework.GrantReadFix(src))

	// The source changes while the driver may not read it: the pod keeps what it had.
	v2 := map[string][]byte{"ca.crt": []byte("v2-" + framework.RandSuffix())}
	s.UpdateSecret(t, src, "ca-bundle", v2)
	time.Sleep(2 * framework.PodsRelist)
	got, err := s.PodFiles(ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if d := framework.SameFiles(got, v1); d != nil {
		t.Errorf("while the driver may not read the source the pod's files changed: %s", d)
	}
	if evs, err := s.PodEvents(ns, "app", framework.ReasonRefreshFailed); err != nil || len(evs) != 1 || framework.EvCount(evs[0]) > 1 {
		t.Errorf("%s events: %d (%v), want one, recorded once", framework.ReasonRefreshFailed, len(evs), err)
	}
	if evs, _ := s.PodEvents(ns, "app", framework.ReasonRevoked); len(evs) > 0 {
		t.Errorf("losing read was taken for a revocation: %s", evs[0].Message)
	}
	s.AssertStillRunning(t, ns, "app")

	s.GrantSourceRead(t, src, framework.SourceReaders()...)
	s.WaitFiles(t, ns, "app", v2, framework.PodsRelist+framework.PodsRelistSlack)
	s.WaitEvent(t, ns, "app", framework.ReasonRefreshed, 10*time.Second)
	s.WaitShareReady(t, share, metav1.ConditionTrue, framework.ReasonSourceAvailable, fmt.Sprintf("Secret %s/ca-bundle", src))
}
