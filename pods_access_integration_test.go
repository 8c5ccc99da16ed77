//go:build integration

package main

// Specification of the driver's read access as users meet it, with real pods on the real kubelet
// and the driver deployed from deploy.yaml (which grants it no read of any Secret):
//   - a source in a namespace nobody granted (kube-system) is not mounted; the pod's FailedMount
//     event and the share's Ready condition say what to run; the driver still may not read
//     kube-system after a Role limited by resourceNames lets it read one object there, which then
//     mounts while a second Secret of the namespace still does not;
//   - running the command the FailedMount event gives lets the same pod start;
//   - read taken away while a pod runs keeps the pod's files, says so on the share and on the pod.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// canI runs `kubectl auth can-i VERB RESOURCE -n NS --as <the driver>` and returns its answer.
func (s *podSuite) canI(t *testing.T, verb, resource, ns string) string {
	t.Helper()
	out, _ := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "auth", "can-i", verb, resource, "-n", ns, "--as", driverUser).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// waitShareReady waits (one status pass and slack) for the share's Ready condition.
func (s *podSuite) waitShareReady(t *testing.T, share string, status metav1.ConditionStatus, reason string, msg ...string) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	eventually(t, podsRelist+podsRelistSlack, func() error {
		cond, u, err := s.readyCondition(kindSecret, share)
		if err != nil {
			return err
		}
		for _, m := range append([]string{""}, msg...) {
			if err := wantReady(cond, u, status, reason, m); err != nil {
				return err
			}
		}
		c = cond
		return nil
	})
	return c
}

// sharedToNewPod shares a new Secret ca-bundle of src holding data, and starts pod "app" using
// it in a new namespace whose service account "app" may use the share.
func (s *podSuite) sharedToNewPod(t *testing.T, src string, data map[string][]byte) (share, ns string) {
	t.Helper()
	s.createSecret(t, src, "ca-bundle", data)
	share = "src-" + randSuffix()
	s.createShare(t, kindSecret, share, src, "ca-bundle")
	ns = s.podNamespace(t, "consumer")
	s.createServiceAccount(t, ns, "app")
	s.grant(t, ns, kindSecret, share, serviceAccount(ns, "app"))
	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: map[string]string{attrSharedSecret: share}})
	return share, ns
}

func TestPodsSourceInNamespaceNotGrantedIsNotMounted(t *testing.T) {
	s := podsEnv(t, podsShared)
	ctx := context.Background()
	const sys = "kube-system"
	first, second := "srcsi-test-a-"+randSuffix(), "srcsi-test-b-"+randSuffix()
	data := map[string][]byte{"token": []byte("sys-" + randSuffix())}
	for _, name := range []string{first, second} {
		s.createSecret(t, sys, name, data)
		t.Cleanup(func() { s.kube.CoreV1().Secrets(sys).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	shareA, shareB := "sys-a-"+randSuffix(), "sys-b-"+randSuffix()
	s.createShare(t, kindSecret, shareA, sys, first)
	s.createShare(t, kindSecret, shareB, sys, second)
	ns := s.podNamespace(t, "sys-reader")
	s.createServiceAccount(t, ns, "app")
	s.grant(t, ns, kindSecret, shareA, serviceAccount(ns, "app"))
	s.grant(t, ns, kindSecret, shareB, serviceAccount(ns, "app"))

	s.createPod(t, ns, "a", consumerSpec{sa: "app", attrs: map[string]string{attrSharedSecret: shareA}})
	ev := s.waitEvent(t, ns, "a", "FailedMount", 60*time.Second, "FailedPrecondition",
		"the driver may not read Secret "+sys+"/"+first, grantReadFix(sys), "--resource-name="+first)
	t.Logf("FailedMount: %s", ev.Message)
	c := s.waitShareReady(t, shareA, metav1.ConditionFalse, reasonSourceForbidden, "Secret "+sys+"/"+first, grantReadFix(sys))
	t.Logf("Ready condition: %s/%s: %s", c.Status, c.Reason, c.Message)
	if got := s.canI(t, "get", "secrets", sys); got != "no" {
		t.Fatalf("kubectl auth can-i get secrets -n %s --as %s: %q, want no", sys, driverUser, got)
	}

	// The narrowest grant: get on the one Secret, by a Role with resourceNames.
	// Both accounts that read sources, as the command in the event says: the node plugins' and
	// the status controller's (which writes the share's Ready condition).
	for _, sa := range sourceReaders() {
		s.grantGet(t, sa, sys, "secrets", first)
		s.waitMayGet(t, sa, sys, "secrets", first, true)
	}
	start := time.Now()
	s.waitRunning(t, ns, "a", 120*time.Second)
	t.Logf("granted: pod Running %v later (the kubelet's mount retry backoff)", time.Since(start).Round(100*time.Millisecond))
	s.waitFiles(t, ns, "a", data, 10*time.Second)
	s.waitShareReady(t, shareA, metav1.ConditionTrue, reasonSourceAvailable, "Secret "+sys+"/"+first)

	// Nothing else of kube-system: another Secret there is still not mounted, and the driver
	// still may not read the namespace.
	s.createPod(t, ns, "b", consumerSpec{sa: "app", attrs: map[string]string{attrSharedSecret: shareB}})
	s.waitEvent(t, ns, "b", "FailedMount", 60*time.Second, "the driver may not read Secret "+sys+"/"+second)
	s.waitShareReady(t, shareB, metav1.ConditionFalse, reasonSourceForbidden, "Secret "+sys+"/"+second)
	if got := s.canI(t, "get", "secrets", sys); got != "no" {
		t.Errorf("after the narrow grant, can-i get secrets -n %s: %q, want no", sys, got)
	}
	if got := s.canI(t, "get", "secrets/"+first, sys); got != "yes" {
		t.Errorf("can-i get secrets/%s -n %s: %q, want yes", first, sys, got)
	}
	if p, err := s.kube.CoreV1().Pods(ns).Get(ctx, "b", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod b: %v (%v), want Pending", p.Status.Phase, err)
	}
}

// An admin runs exactly what the FailedMount event says; the same pod then starts, and the
// share turns Ready within one status pass.
func TestPodsSourceReadGrantedWithTheCommandTheEventGives(t *testing.T) {
	s := podsEnv(t, podsShared)
	src := s.namespace(t, "ungranted")
	data := map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())}
	share, ns := s.sharedToNewPod(t, src, data)

	ev := s.waitEvent(t, ns, "app", "FailedMount", 60*time.Second, "the driver may not read Secret "+src+"/ca-bundle", grantReadFix(src))
	s.waitShareReady(t, share, metav1.ConditionFalse, reasonSourceForbidden, grantReadFix(src))
	s.runFix(t, ev.Message)
	start := time.Now()
	s.waitRunning(t, ns, "app", 120*time.Second)
	t.Logf("fixed: pod Running %v later", time.Since(start).Round(100*time.Millisecond))
	s.waitFiles(t, ns, "app", data, 10*time.Second)
	s.waitShareReady(t, share, metav1.ConditionTrue, reasonSourceAvailable, "Secret "+src+"/ca-bundle")
}

// Read taken away while the pod runs: its files stay (an API error is never a revocation), the
// share says SourceForbidden, the pod gets one Warning event; read back, the pod follows the
// source again.
func TestPodsDriverLosesReadWhileRunningKeepsData(t *testing.T) {
	s := podsEnv(t, podsShared)
	src := s.namespace(t, "platform")
	revokeRead := s.grantSourceRead(t, src, sourceReaders()...)
	v1 := map[string][]byte{"ca.crt": []byte("v1-" + randSuffix())}
	share, ns := s.sharedToNewPod(t, src, v1)
	s.waitRunning(t, ns, "app", 60*time.Second)
	s.waitFiles(t, ns, "app", v1, 10*time.Second)

	revokeRead()
	ev := s.waitEvent(t, ns, "app", reasonRefreshFailed, podsRelist+podsRelistSlack,
		"keeps its last files and is not refreshed", "may not read Secret "+src+"/ca-bundle", grantReadFix(src))
	t.Logf("%s: %s", reasonRefreshFailed, ev.Message)
	s.waitShareReady(t, share, metav1.ConditionFalse, reasonSourceForbidden, "keep their last data", grantReadFix(src))

	// The source changes while the driver may not read it: the pod keeps what it had.
	v2 := map[string][]byte{"ca.crt": []byte("v2-" + randSuffix())}
	s.updateSecret(t, src, "ca-bundle", v2)
	time.Sleep(2 * podsRelist)
	got, err := s.podFiles(ns, "app")
	if err != nil {
		t.Fatal(err)
	}
	if d := sameFiles(got, v1); d != nil {
		t.Errorf("while the driver may not read the source the pod's files changed: %s", d)
	}
	if evs, err := s.podEvents(ns, "app", reasonRefreshFailed); err != nil || len(evs) != 1 || evCount(evs[0]) > 1 {
		t.Errorf("%s events: %d (%v), want one, recorded once", reasonRefreshFailed, len(evs), err)
	}
	if evs, _ := s.podEvents(ns, "app", reasonRevoked); len(evs) > 0 {
		t.Errorf("losing read was taken for a revocation: %s", evs[0].Message)
	}
	s.assertStillRunning(t, ns, "app")

	s.grantSourceRead(t, src, sourceReaders()...)
	s.waitFiles(t, ns, "app", v2, podsRelist+podsRelistSlack)
	s.waitEvent(t, ns, "app", reasonRefreshed, 10*time.Second)
	s.waitShareReady(t, share, metav1.ConditionTrue, reasonSourceAvailable, fmt.Sprintf("Secret %s/ca-bundle", src))
}
