package admin

// Specification of diagnose's judgement of a share's source: the checks the driver's relist makes
// (judge.go, judgeSource), in its order, and none for a volume that does not refresh.

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

var testDriver = Driver{GrantReadHint: func(accounts string, key shareapi.SourceKey) string { return "grant read on " + key.Name }}

func testJudgement() *shareJudgement {
	return &shareJudgement{a: &adminClient{d: testDriver}, o: &adminOptions{driverAccounts: "csi:node"}, refresh: true, ref: shareapi.Ref{Kind: shareapi.KindSecret, Name: "ca"}}
}

func pinnedTo(uid string) Share {
	return Share{Name: "ca", Source: shareapi.SourceKey{Kind: shareapi.KindSecret, Namespace: "p", Name: "ca"}, PinUID: uid,
		RefusesSource: func(u string) bool { return u != uid }}
}

func TestDiagnoseChecksTheSourceInTheRelistsOrder(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "ca")
	for _, c := range []struct {
		name string
		src  sourceFacts
		want string
	}{
		// The relist reads the source first: a driver that may not read it never sees its UID.
		{"may not read, and re-created", sourceFacts{uid: "new", driverAccount: "csi:node"}, verdictDriverMayNotRead},
		{"may not read, and missing", sourceFacts{err: notFound, driverAccount: "csi:node"}, verdictDriverMayNotRead},
		// A missing source keeps the last files, whatever the pin.
		{"missing", sourceFacts{err: notFound, driverAccount: "csi:node", mayRead: true}, verdictSourceMissing},
		{"re-created", sourceFacts{uid: "new", driverAccount: "csi:node", mayRead: true}, verdictSourceReplaced},
	} {
		r, done := testJudgement().judgeSource(pinnedTo("old"), nil, c.src)
		if !done || r.Verdict != c.want {
			t.Errorf("%s: %q (found a problem: %v), want %s; evidence %q", c.name, r.Verdict, done, c.want, r.Evidence)
		}
	}
	if r, done := testJudgement().judgeSource(pinnedTo("old"), nil, sourceFacts{uid: "old", driverAccount: "csi:node", mayRead: true}); done {
		t.Errorf("the pinned source, readable: %s", r.Verdict)
	}
}

// refreshResource=false: the files published stay, and the relist never reads the source; a
// source missing, unreadable or re-created, or a share not Ready over it, is no verdict.
func TestDiagnoseJudgesNoSourceOfAVolumeThatDoesNotRefresh(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "ca")
	notReady := &metav1.Condition{Type: shareapi.ConditionReady, Status: metav1.ConditionFalse, Reason: shareapi.ReasonSourceNotFound}
	for name, src := range map[string]sourceFacts{
		"missing":     {err: notFound, driverAccount: "csi:node", mayRead: true},
		"unreadable":  {uid: "old", driverAccount: "csi:node"},
		"re-created":  {uid: "new", driverAccount: "csi:node", mayRead: true},
		"not read at": {},
	} {
		j := testJudgement()
		j.refresh = false
		if r, done := j.judgeSource(pinnedTo("old"), notReady, src); done {
			t.Errorf("%s: %s, want no verdict on the source; evidence %q", name, r.Verdict, r.Evidence)
		}
	}
}
