//go:build integration

package main

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
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestPodsShareRecreatedOverAnotherSecretDoesNotFeedRunningPods(t *testing.T) {
	s := podsEnv(t, podsShared)
	ctx := context.Background()
	realCA := map[string][]byte{"ca.crt": []byte("REAL-CA " + randSuffix())}
	attacker := map[string][]byte{"ca.crt": []byte("ATTACKER-CA " + randSuffix())}
	f := s.newShare(t, realCA)

	// The tenant: may manage shares, may read the platform's CA (so the policy admits their
	// delete), and has a Secret of their own that the driver may read.
	tenant := s.newSharer(t)
	tenantNS := s.sourceNamespace(t, "tenant")
	s.createSecret(t, tenantNS, "mine", attacker)
	s.grantGet(t, userSubject(tenant.name), tenantNS, "secrets", "mine")
	s.grantGet(t, userSubject(tenant.name), f.platform, "secrets", f.secret)

	ns := s.podNamespace(t, "identity")
	s.grant(t, ns, kindSecret, f.share, serviceAccount(ns, "default"))
	s.createPod(t, ns, "reader", consumerSpec{attrs: f.attrs()})
	s.waitRunning(t, ns, "reader", 60*time.Second)
	s.waitFiles(t, ns, "reader", realCA, 10*time.Second)

	// What the running pod sees, each distinct view in order, from here on.
	var seen []string
	look := func() {
		got, err := s.podFiles(ns, "reader")
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

	shares := tenant.dyn.Resource(shareGVR(kindSecret))
	eventually(t, 30*time.Second, func() error { // the tenant's RBAC reaches the authorizer
		return shares.Delete(ctx, f.share, metav1.DeleteOptions{})
	})
	s.waitFiles(t, ns, "reader", map[string][]byte{}, podsRelist+podsRelistSlack)
	look()
	recreated := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": shareGroup + "/v1alpha1", "kind": kindSecret.shareTypeName(),
		"metadata": map[string]any{"name": f.share},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": tenantNS, "name": "mine"}},
	}}
	eventually(t, 30*time.Second, func() error { // admitted once the tenant's get on "mine" applies
		_, err := shares.Create(ctx, recreated.DeepCopy(), metav1.CreateOptions{})
		return err
	})
	// The watch's add, and two relists after it.
	for end := time.Now().Add(2*podsRelist + podsRelistSlack); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		look()
	}
	t.Logf("the running pod saw: %q", seen)
	if len(seen) != 2 || !strings.HasPrefix(seen[0], "REAL-CA") || seen[1] != "(empty)" {
		t.Fatalf("the running pod saw %q, want the real CA, then nothing: a share re-created over another Secret fed it", seen)
	}
	ev := s.waitEvent(t, ns, "reader", reasonShareReplaced, 10*time.Second,
		"was deleted and created again", "sharing Secret "+tenantNS+"/mine", "kubectl delete pod --namespace="+ns+" reader")
	if ev.Type != "Warning" {
		t.Errorf("the %s event is %s, want Warning", reasonShareReplaced, ev.Type)
	}
	if evs, err := s.podEvents(ns, "reader", reasonShareReplaced); err != nil || len(evs) != 1 || evs[0].Count > 1 {
		t.Errorf("want one %s event, told once: %d events (%v)", reasonShareReplaced, len(evs), err)
	}

	// A new pod is a new publish: it uses the share as it is now.
	s.createPod(t, ns, "newcomer", consumerSpec{attrs: f.attrs()})
	s.waitRunning(t, ns, "newcomer", 60*time.Second)
	s.waitFiles(t, ns, "newcomer", attacker, 10*time.Second)

	// The admin puts the share back over the platform's Secret: the running pod resumes.
	s.deleteShare(t, kindSecret, f.share)
	eventually(t, 30*time.Second, func() error {
		if _, err := s.dyn.Resource(shareGVR(kindSecret)).Get(ctx, f.share, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("share %s still there", f.share)
		}
		return nil
	})
	s.createShare(t, kindSecret, f.share, f.platform, f.secret)
	s.waitFiles(t, ns, "reader", realCA, podsRelist+podsRelistSlack)
	s.assertStillRunning(t, ns, "reader")
}
