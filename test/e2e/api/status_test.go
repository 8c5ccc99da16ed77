package api

// Specification of share status (internal/sharestatus): each SharedSecret/SharedConfigMap carries a
// Ready condition telling whether its source exists and the driver can read it, shown in
// `kubectl get`'s Ready column and written by exactly one status controller replica at a time
// (--role=status, roles.go), the holder of a Lease; never by a node plugin.
//
// The replicas here run as the status controller's ServiceAccount deploy.yaml creates, with
// deploy.yaml's RBAC, so the test also proves that RBAC is enough; the node plugin beside them
// runs as the node plugins' account, which may not write status (test/e2e/api/leastprivilege_test.go).
// The condition's wording for each answer about the source is specified without a cluster in
// status_test.go. The chart's Deployment writing status in a real cluster:
// TestPodsStatusWrittenByTheStatusController.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Lease duration of these tests. Short, so the test is quick, but with a renew deadline (2/3 of
// it, derived by the driver like the retry period, 2/15) that a loaded machine still meets: a
// leader must not lose the Lease while it is alive.
const statusLease = 6 * time.Second

// statusTakeover bounds how long a killed leader blocks status: the lease duration counted from
// its last renewal, which the follower only sees at its next poll, and the poll at which it sees
// the expiry (a follower polls once per relist interval, +10%), plus API round trips.
const statusTakeover = statusLease + 2*relist*11/10 + time.Second

func TestShareStatusReadyConditionWrittenByOneLeader(t *testing.T) {
	e := framework.E2e(t)
	// A node plugin given the status flags an older manifest gave every node: it must not
	// campaign, nor write.
	nodePlugin := e.StartDriver(t, framework.WithArgs("--status-lease-namespace="+framework.DriverNamespace, "--status-lease-duration="+statusLease.String()))
	leaseArg := framework.WithArgs("--status-lease-duration=" + statusLease.String())
	drivers := map[string]*framework.DriverProc{
		"replica-a": e.StartStatusController(t, leaseArg),
		"replica-b": e.StartStatusController(t, leaseArg),
	}

	// Each replica campaigns under its own identity: its host name (in a pod, the pod's name)
	// and a random suffix.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	identities := map[string]string{}
	for node, p := range drivers {
		framework.Eventually(t, 10*time.Second, func() error {
			id := leaseIdentity(readLog(t, p))
			if !strings.HasPrefix(id, host+"_") {
				return fmt.Errorf("replica %s logged no status writer identity starting with %q (got %q)", node, host+"_", id)
			}
			identities[node] = id
			return nil
		})
	}
	if identities["replica-a"] == identities["replica-b"] {
		t.Fatalf("both replicas campaign as %q", identities["replica-a"])
	}
	// Exactly one of them holds the Lease. (A driver of an earlier, killed test run may still
	// hold it until its own lease duration, 15s by default, runs out.)
	var leaderNode string
	framework.Eventually(t, 60*time.Second, func() error {
		holder, err := e.StatusLeaseHolder()
		if err != nil {
			return err
		}
		for node, id := range identities {
			if holder == id {
				leaderNode = node
				return nil
			}
		}
		return fmt.Errorf("the Lease is held by %q, not by %v", holder, identities)
	})
	followerNode := "replica-a"
	if leaderNode == "replica-a" {
		followerNode = "replica-b"
	}
	leader, follower := drivers[leaderNode], drivers[followerNode]
	t.Logf("leader %s, follower %s", leaderNode, followerNode)

	platform := e.SourceNamespace(t, "platform")
	secretData := map[string][]byte{"ca.crt": leader.Secret("ca")}
	follower.Secrets = append(follower.Secrets, leader.Secrets...)
	e.CreateSecret(t, platform, "present", secretData)
	if _, err := e.Kube.CoreV1().ConfigMaps(platform).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "b"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	okShare, missingShare, cmShare := "ok-"+framework.RandSuffix(), "missing-"+framework.RandSuffix(), "cm-"+framework.RandSuffix()
	e.CreateShare(t, framework.KindSecret, okShare, platform, "present")
	e.CreateShare(t, framework.KindSecret, missingShare, platform, "missing")
	e.CreateShare(t, framework.KindConfigMap, cmShare, platform, "settings")

	// A new share is checked at once (the share watch), not only at the next interval.
	var okReady, missingReady metav1.Condition
	var okVersion string
	framework.Eventually(t, relist+relistSlack, func() error {
		var err error
		var u *unstructured.Unstructured
		if okReady, u, err = e.ReadyCondition(framework.KindSecret, okShare); err != nil {
			return err
		}
		okVersion = u.GetResourceVersion()
		if err := framework.WantReady(okReady, u, metav1.ConditionTrue, framework.ReasonSourceAvailable, "Secret "+platform+"/present"); err != nil {
			return err
		}
		if missingReady, u, err = e.ReadyCondition(framework.KindSecret, missingShare); err != nil {
			return err
		}
		if err := framework.WantReady(missingReady, u, metav1.ConditionFalse, framework.ReasonSourceNotFound, "Secret "+platform+"/missing"); err != nil {
			return err
		}
		c, u, err := e.ReadyCondition(framework.KindConfigMap, cmShare)
		if err != nil {
			return err
		}
		return framework.WantReady(c, u, metav1.ConditionTrue, framework.ReasonSourceAvailable, "ConfigMap "+platform+"/settings")
	})
	// What an admin sees.
	e.WantReadyColumn(t, "sharedsecrets", map[string]string{okShare: "True", missingShare: "False"})
	e.WantReadyColumn(t, "sharedconfigmaps", map[string]string{cmShare: "True"})

	// The source appears: the periodic check flips the share to True. lastTransitionTime moves;
	// the wait makes sure it lands in a later second (the API keeps whole seconds).
	time.Sleep(time.Until(missingReady.LastTransitionTime.Add(1100 * time.Millisecond)))
	e.CreateSecret(t, platform, "missing", secretData)
	framework.Eventually(t, relist+relistSlack, func() error {
		c, u, err := e.ReadyCondition(framework.KindSecret, missingShare)
		if err != nil {
			return err
		}
		if err := framework.WantReady(c, u, metav1.ConditionTrue, framework.ReasonSourceAvailable, "Secret "+platform+"/missing"); err != nil {
			return err
		}
		if !c.LastTransitionTime.After(missingReady.LastTransitionTime.Time) {
			return fmt.Errorf("lastTransitionTime %v did not move from %v", c.LastTransitionTime, missingReady.LastTransitionTime)
		}
		return nil
	})
	e.WantReadyColumn(t, "sharedsecrets", map[string]string{okShare: "True", missingShare: "True"})

	// A spec change is observed (observedGeneration follows metadata.generation) without a
	// transition: lastTransitionTime stays.
	cmBefore, _, err := e.ReadyCondition(framework.KindConfigMap, cmShare)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindConfigMap)).Patch(context.Background(), cmShare, "application/merge-patch+json",
		[]byte(`{"spec":{"description":"edited"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, relist+relistSlack, func() error {
		c, u, err := e.ReadyCondition(framework.KindConfigMap, cmShare)
		if err != nil {
			return err
		}
		if u.GetGeneration() < 2 {
			return fmt.Errorf("generation %d after a spec change", u.GetGeneration())
		}
		if err := framework.WantReady(c, u, metav1.ConditionTrue, framework.ReasonSourceAvailable, "ConfigMap "+platform+"/settings"); err != nil {
			return err
		}
		if !c.LastTransitionTime.Equal(&cmBefore.LastTransitionTime) {
			return fmt.Errorf("lastTransitionTime moved from %v to %v without a transition", cmBefore.LastTransitionTime, c.LastTransitionTime)
		}
		return nil
	})

	// The node plugin neither campaigned nor wrote: it warned that it ignores the flag.
	if log := readLog(t, nodePlugin); strings.Contains(log, `"Share status writer campaigning"`) || strings.Contains(log, `"Share status updated"`) ||
		!strings.Contains(log, `flag="--status-lease-namespace"`) {
		t.Errorf("the node plugin campaigned or wrote status, or did not warn that it ignores --status-lease-namespace:\n%s", framework.Tail([]byte(log), 30))
	}
	// Only the leader wrote; the follower only campaigned.
	if n := strings.Count(readLog(t, leader), `"Share status updated"`); n < 4 {
		t.Errorf("the leader logged %d status writes, want at least 4", n)
	}
	if log := readLog(t, follower); strings.Contains(log, `"Leading the share status writer"`) || strings.Contains(log, `"Share status updated"`) {
		t.Errorf("the follower led or wrote status while the leader was alive:\n%s", framework.Tail([]byte(log), 30))
	}

	// The leader dies without releasing the Lease: the follower takes over within the lease
	// duration (see statusTakeover) and keeps status current.
	leader.Kill()
	killed := time.Now()
	framework.Eventually(t, statusTakeover, func() error {
		holder, err := e.StatusLeaseHolder()
		if err != nil {
			return err
		}
		if holder != identities[followerNode] {
			return fmt.Errorf("the Lease is held by %q, want %s (%s)", holder, followerNode, identities[followerNode])
		}
		return nil
	})
	t.Logf("%s took over %v after the leader was killed", followerNode, time.Since(killed).Round(100*time.Millisecond))
	if err := e.Kube.CoreV1().Secrets(platform).Delete(context.Background(), "missing", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, relist+relistSlack, func() error {
		c, u, err := e.ReadyCondition(framework.KindSecret, missingShare)
		if err != nil {
			return err
		}
		return framework.WantReady(c, u, metav1.ConditionFalse, framework.ReasonSourceNotFound, "Secret "+platform+"/missing")
	})
	e.WantReadyColumn(t, "sharedsecrets", map[string]string{okShare: "True", missingShare: "False"})
	if !strings.Contains(readLog(t, follower), `"Share status updated"`) {
		t.Error("the new leader logged no status write")
	}

	// Status is written only when it changes: the share that was fine all along was written
	// once, through many periodic checks and a change of leader. The API server turns an
	// identical update into a no-op that keeps the resourceVersion, so the drivers' own record
	// of their writes is counted too.
	u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(context.Background(), okShare, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.GetResourceVersion() != okVersion {
		c, _, _ := e.ReadyCondition(framework.KindSecret, okShare)
		t.Errorf("share %s was written again without a change (resourceVersion %s -> %s, condition %+v)", okShare, okVersion, u.GetResourceVersion(), c)
	}
	writes := 0
	for _, p := range drivers {
		for _, line := range strings.Split(readLog(t, p), "\n") {
			if strings.Contains(line, `"Share status updated"`) && strings.Contains(line, `share="`+okShare+`"`) {
				writes++
			}
		}
	}
	if writes != 1 {
		t.Errorf("share %s, unchanged all along, was written %d times, want once", okShare, writes)
	}

	// A leader that is stopped cleanly (SIGTERM, as in a rollout) releases the Lease before it
	// exits, so the next driver takes over at once rather than after the lease duration.
	newLeader := follower
	_ = newLeader.Cmd.Process.Signal(syscall.SIGTERM)
	if err := newLeader.Cmd.Wait(); err != nil {
		t.Fatalf("the driver did not exit cleanly on SIGTERM: %v", err)
	}
	if holder, err := e.StatusLeaseHolder(); err != nil || holder != "" {
		t.Errorf("after a clean exit the Lease is held by %q (%v), want released", holder, err)
	}
}

// leaseIdentity finds the Lease holder identity a driver's log says it campaigns under.
func leaseIdentity(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"Share status writer campaigning"`) {
			continue
		}
		if _, after, ok := strings.Cut(line, `identity="`); ok {
			id, _, _ := strings.Cut(after, `"`)
			return id
		}
	}
	return ""
}

func readLog(t *testing.T, p *framework.DriverProc) string {
	t.Helper()
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
