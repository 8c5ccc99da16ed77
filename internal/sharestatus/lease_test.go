package sharestatus

// Specification of the Lease elector's record keeping (lease.go): transitions counted, the acquire
// time kept on renewal, a candidate's slow poll. Taking over, renewing and releasing against a real API server are in
// test/e2e/api/status_test.go.

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaseClaimCountsTransitionsAndKeepsTheAcquireTimeOnRenewal(t *testing.T) {
	e := &leaseElector{name: "l", identity: "node-a_1", duration: 15 * time.Second}
	t0 := time.Unix(1000, 0)

	created := e.claim(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, t0)
	if got := ptr.Deref(created.Spec.LeaseTransitions, -1); got != 0 {
		t.Errorf("a new Lease has %d transitions, want 0", got)
	}
	if ptr.Deref(created.Spec.HolderIdentity, "") != "node-a_1" || ptr.Deref(created.Spec.LeaseDurationSeconds, 0) != 15 {
		t.Errorf("new Lease spec %+v", created.Spec)
	}

	// Renewing our own Lease moves only the renew time.
	created.ResourceVersion = "5"
	renewed := e.claim(created, t0.Add(2*time.Second))
	if !renewed.Spec.AcquireTime.Time.Equal(t0) || !renewed.Spec.RenewTime.Time.Equal(t0.Add(2*time.Second)) {
		t.Errorf("renewal: acquire %v renew %v", renewed.Spec.AcquireTime, renewed.Spec.RenewTime)
	}
	if got := ptr.Deref(renewed.Spec.LeaseTransitions, -1); got != 0 {
		t.Errorf("renewal changed transitions to %d", got)
	}

	// Taking over another driver's (expired or released) Lease is a transition.
	theirs := created.DeepCopy()
	theirs.Spec.HolderIdentity = ptr.To("node-b_2")
	theirs.Spec.LeaseTransitions = ptr.To(int32(3))
	taken := e.claim(theirs, t0.Add(time.Minute))
	if ptr.Deref(taken.Spec.HolderIdentity, "") != "node-a_1" || ptr.Deref(taken.Spec.LeaseTransitions, 0) != 4 ||
		!taken.Spec.AcquireTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("takeover spec %+v", taken.Spec)
	}
	if ptr.Deref(theirs.Spec.HolderIdentity, "") != "node-b_2" {
		t.Error("claim modified the Lease it was given")
	}
}

// A candidate looks at a Lease another driver holds once per candidatePoll (±10%), not every
// retry period: every node but one is a candidate. After an error, or with the Lease free or
// its own, it tries again after the retry period.
func TestLeaseCandidatePollsSlowlyWhileAnotherHolds(t *testing.T) {
	e := &leaseElector{name: "l", identity: "node-a_1", retry: 2 * time.Second, candidatePoll: time.Minute}
	if got := e.nextAttempt(); got != e.retry {
		t.Errorf("with no Lease read yet (an error): wait %v, want the retry period %v", got, e.retry)
	}
	e.observed = &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b_2")}}
	for range 100 {
		if got := e.nextAttempt(); got < 54*time.Second || got > 66*time.Second {
			t.Fatalf("with the Lease held by another driver: wait %v, want within 10%% of %v", got, e.candidatePoll)
		}
	}
	e.observed.Spec.HolderIdentity = ptr.To("")
	if got := e.nextAttempt(); got != e.retry {
		t.Errorf("with the Lease released: wait %v, want the retry period %v", got, e.retry)
	}
	e.observed.Spec.HolderIdentity = ptr.To("node-b_2")
	e.candidatePoll = 0
	if got := e.nextAttempt(); got != e.retry {
		t.Errorf("with no candidatePoll: wait %v, want the retry period %v", got, e.retry)
	}
}
