package pods

// Specification of a running volume keeping to the share object it was published from
// (shareidentity.go), with real pods, the real API server and deploy.yaml's admission policy:
// a tenant who may delete and create shares (and read the platform's CA, so the policy lets
// them delete its share) deletes the share and creates it again under its name over a Secret of
// their own. The running consumer sees the CA, then nothing, and never the tenant's CA; it is
// told, once, that the share was replaced and what accepts the new object; a new pod uses the
// share as it is now; the admin re-creating the share over the platform's Secret brings the
// running consumer back. (On the code before volumes knew their share's UID, the consumer saw
// REAL-CA, then nothing, then ATTACKER-CA.) The same story on a fake node:
// shareidentity_test.go. Deleting a share whose source the user may not read is refused:
// TestSharePolicyRequiresReadOnTheSource.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestPodsShareRecreatedOverAnotherSecretDoesNotFeedRunningPods(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	ctx := context.Background()
	realCA := map[string][]byte{"ca.crt": []byte("REAL-CA " + framework.RandSuffix())}
	attacker := map[string][]byte{"ca.crt": []byte("ATTACKER-CA " + framework.RandSuffix())}
	f := s.NewShare(t, realCA)

	// The tenant: may manage shares, may read the platform's CA (so the policy admits their
	// delete), and has a Secret of their own that the driver may read.
	tenant := s.NewSharer(t)
	tenantNS := s.SourceNamespace(t, "tenant")
	s.CreateSecret(t, tenantNS, "mine", attacker)
	s.GrantGet(t, framework.UserSubject(tenant.Name), tenantNS, "secrets", "mine")
	s.GrantGet(t, framework.UserSubject(tenant.Name), f.Platform, "secrets", f.Secret)

	ns := s.PodNamespace(t, "identity")
	s.Grant(t, ns, framework.KindSecret, f.Share, framework.ServiceAccount(ns, "default"))
	s.CreatePod(t, ns, "reader", framework.ConsumerSpec{Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "reader", 60*time.Second)
	s.WaitFiles(t, ns, "reader", realCA, 10*time.Second)

	// What the running pod sees, each distinct view in order, from here on.
	var seen []string
	look := func() {
		got, err := s.PodFiles(ns, "reader")
		if err != nil {
			t.Fatal(err)
		}
		view := strings.TrimSpace(string(got["ca.crt"]))
		if len(got) == 0 {
			view = "(empty)"
		}
		if len(seen) == 0 || seen[len(seen)-1] != view {
			seen = append(seen, view)
		}
	}
	look()

	shares := tenant.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	framework.Eventually(t, 30*time.Second, func() error { // the tenant's RBAC reaches the authorizer
		return shares.Delete(ctx, f.Share, metav1.DeleteOptions{})
	})
	s.WaitFiles(t, ns, "reader", map[string][]byte{}, framework.PodsRelist+framework.PodsRelistSlack)
	look()
	recreated := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": framework.ShareGroup + "/v1alpha1", "kind": framework.KindSecret.ShareTypeName(),
		"metadata": map[string]any{"name": f.Share},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": tenantNS, "name": "mine"}},
	}}
	framework.Eventually(t, 30*time.Second, func() error { // admitted once the tenant's get on "mine" applies
		_, err := shares.Create(ctx, recreated.DeepCopy(), metav1.CreateOptions{})
		return err
	})
	// The watch's add, and two relists after it.
	for end := time.Now().Add(2*framework.PodsRelist + framework.PodsRelistSlack); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		look()
	}
	t.Logf("the running pod saw: %q", seen)
	if len(seen) != 2 || !strings.HasPrefix(seen[0], "REAL-CA") || seen[1] != "(empty)" {
		t.Fatalf("the running pod saw %q, want the real CA, then nothing: a share re-created over another Secret fed it", seen)
	}
	ev := s.WaitEvent(t, ns, "reader", framework.ReasonShareReplaced, 10*time.Second,
		"was deleted and created again", "sharing Secret "+tenantNS+"/mine", "kubectl delete pod --namespace="+ns+" reader")
	if ev.Type != "Warning" {
		t.Errorf("the %s event is %s, want Warning", framework.ReasonShareReplaced, ev.Type)
	}
	if evs, err := s.PodEvents(ns, "reader", framework.ReasonShareReplaced); err != nil || len(evs) != 1 || evs[0].Count > 1 {
		t.Errorf("want one %s event, told once: %d events (%v)", framework.ReasonShareReplaced, len(evs), err)
	}

	// A new pod is a new publish: it uses the share as it is now.
	s.CreatePod(t, ns, "newcomer", framework.ConsumerSpec{Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "newcomer", 60*time.Second)
	s.WaitFiles(t, ns, "newcomer", attacker, 10*time.Second)

	// The admin puts the share back over the platform's Secret: the running pod resumes.
	s.DeleteShare(t, framework.KindSecret, f.Share)
	framework.Eventually(t, 30*time.Second, func() error {
		if _, err := s.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(ctx, f.Share, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("share %s still there", f.Share)
		}
		return nil
	})
	s.CreateShare(t, framework.KindSecret, f.Share, f.Platform, f.Secret)
	s.WaitFiles(t, ns, "reader", realCA, framework.PodsRelist+framework.PodsRelistSlack)
	s.AssertStillRunning(t, ns, "reader")
}
