package admin

// Specification of diagnose's judgement of a share's source: the checks the driver's relist makes
// (judge.go, judgeSource), in its order, and none for a volume that does not refresh.

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

var testDriver = Driver{GrantReadHint: func(_ string, key shareapi.SourceKey) string { return "grant read on " + key.Name }}

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

// The driver's events on a pod, as reconcile.go writes them, for share secret/ca over Secret p/ca.
func driverEvent(minutesAgo int, reason, msg string) corev1.Event {
	return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(time.Now().Add(-time.Duration(minutesAgo) * time.Minute))}
}

var (
	evRefreshed = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRefreshed, "Updated secret/ca from Secret p/ca (resourceVersion 7)")
	}
	evRevoked = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRevoked, "The files of secret/ca were removed from the volume: denied")
	}
	evRestored = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRestored, "Access to secret/ca is granted again; its files are back")
	}
	evShareReplaced = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonShareReplaced, `The files of secret/ca were removed from the volume: SharedSecret "ca" was deleted and created again (UID u2, sharing Secret p/other)`)
	}
	evRegrantedUnreadable = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRefreshFailed, "secret/ca may be used again, but its files stay away until the driver may read its source: the driver may not read Secret p/ca")
	}
	evDoesNotFit = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRefreshFailed, "secret/ca changed, but keeps its last files: its new files do not fit on this node")
	}
	evUnreadable = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRefreshFailed, "secret/ca keeps its last files and is not refreshed: the driver may not read Secret p/ca")
	}
	evResumed = func(m int) corev1.Event {
		return driverEvent(m, shareapi.ReasonRefreshResumed, "The driver may read Secret p/ca again; its files are refreshed again")
	}
)

// What diagnose concludes from the driver's events and what it reads is what the relist decides
// (judge.go's tables): files the driver took away are reported away, with the reason that keeps
// them away; files kept unrefreshed are reported so.
func TestDiagnoseReadsTheFilesAsTheDriverLeftThem(t *testing.T) {
	readable := sourceFacts{uid: "old", driverAccount: "csi:node", mayRead: true}
	for _, c := range []struct {
		name   string
		events []corev1.Event
		mayUse bool
		src    sourceFacts
		want   string // "": nothing wrong
	}{
		{"published", []corev1.Event{evRefreshed(9)}, true, readable, ""},
		{"share replaced", []corev1.Event{evRefreshed(9), evShareReplaced(5)}, true, readable, verdictShareReplaced},
		{"revoked, still denied", []corev1.Event{evRevoked(5)}, false, readable, verdictRevoked},
		{"revoked, granted again", []corev1.Event{evRevoked(5)}, true, readable, verdictRevoked},
		{"revoked, restored", []corev1.Event{evRevoked(5), evRestored(2)}, true, readable, ""},
		// Regranted, but the relist keeps the files away: it says why, and so does diagnose.
		{"regranted, unreadable", []corev1.Event{evRevoked(5), evRegrantedUnreadable(2)}, true, sourceFacts{uid: "old", driverAccount: "csi:node"}, verdictDriverMayNotRead},
		{"regranted, source re-created", []corev1.Event{evRevoked(5)}, true, sourceFacts{uid: "new", driverAccount: "csi:node", mayRead: true}, verdictSourceReplaced},
		{"regranted, does not fit", []corev1.Event{evRevoked(5), evDoesNotFit(2)}, true, readable, verdictNotRefreshed},
		// Shown, but not refreshed: a new copy that does not fit is seen only in its event.
		{"does not fit", []corev1.Event{evRefreshed(9), evDoesNotFit(2)}, true, readable, verdictNotRefreshed},
		{"unreadable, then resumed", []corev1.Event{evRefreshed(9), evUnreadable(5), evResumed(2)}, true, readable, ""},
	} {
		j := testJudgement()
		j.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}}
		j.events = c.events
		sortEvents(j.events)
		r, done := j.decide(shareReads{share: pinnedTo("old"), mayUse: c.mayUse, source: func() sourceFacts { return c.src }})
		if got := map[bool]string{true: r.Verdict}[done]; got != c.want {
			t.Errorf("%s: %q, want %q; evidence %q, fix %q", c.name, got, c.want, r.Evidence, r.Fix)
		}
		if c.want == verdictRevoked && c.mayUse && !strings.HasPrefix(r.Fix, "none") {
			t.Errorf("%s: fix %q", c.name, r.Fix)
		}
	}
}

// who-uses reads a volume's state from the same table: files taken away by a share replaced are
// not published, and every reason that shows or takes away files is listed.
func TestWhoUsesReadsTheStateAsTheDriverLeftIt(t *testing.T) {
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	ref := shareapi.Ref{Kind: shareapi.KindSecret, Name: "ca"}
	for want, evs := range map[string][]corev1.Event{
		"published": {evRefreshed(9)},
		"replaced":  {evRefreshed(9), evShareReplaced(5)},
		"revoked":   {evRevoked(5), evRegrantedUnreadable(2)},
	} {
		sortEvents(evs)
		if got := volumeState(running, evs, ref, nil); got != want {
			t.Errorf("%s: %s", want, got)
		}
	}
	for _, r := range shareapi.ShareEventReasons() {
		if f, _ := shareapi.FilesAfter(r); f != shareapi.FilesAsBefore && !slices.Contains(whoUsesEventReasons(), r) {
			t.Errorf("who-uses does not list the events %s, which decide whether files are shown", r)
		}
	}
}

// Every reason the table says takes a share's files away gets a verdict that is not OK, with a
// fix, whatever else diagnose reads: an away reason added to the table without its verdict here
// fails.
func TestDiagnoseHasAVerdictForEveryReasonThatTakesFilesAway(t *testing.T) {
	for _, reason := range shareapi.ShareEventReasons() {
		if f, _ := shareapi.FilesAfter(reason); f != shareapi.FilesAway {
			continue
		}
		for _, mayUse := range []bool{false, true} {
			j := testJudgement()
			j.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}}
			j.events = []corev1.Event{evRefreshed(9), driverEvent(5, reason, "The files of secret/ca were removed from the volume: why")}
			r, done := j.decide(shareReads{share: pinnedTo("old"), mayUse: mayUse,
				source: func() sourceFacts { return sourceFacts{uid: "old", driverAccount: "csi:node", mayRead: true} }})
			if !done || r.Verdict == verdictOK || r.Fix == "" {
				t.Errorf("%s (may use: %v): %q, fix %q", reason, mayUse, r.Verdict, r.Fix)
			}
		}
	}
}
