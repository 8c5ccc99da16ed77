package admin

// diagnose's judgement of one share once it has read it: the pod's files shown or away, read
// from the driver's events through the table both sides judge by (shareapi.FilesAfter), then the
// relist's own checks in its order (judge.go in the driver's root): the pod's access, the share,
// the source (sourcecheck.go), and what the driver last said it could not refresh.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// shareReads is what diagnose read of one share for its verdict.
type shareReads struct {
	share     Share
	specErr   error              // why the driver cannot use the share object
	ready     *metav1.Condition  // its Ready condition, nil if none
	mayUse    bool               // the pod's service account may use it (a SubjectAccessReview)
	useReason string             // the authorizer's reason
	useErr    error              // the review failed
	source    func() sourceFacts // reads the source, when the verdict needs it
}

// decide is the share's verdict from what diagnose read, before the driver pod's checks; done is
// false when it found nothing wrong.
func (j *shareJudgement) decide(r shareReads) (shareVerdictReport, bool) {
	p, ref, sa := j.pod, j.ref, podServiceAccount(j.pod)
	typeName := ref.Kind.TypeName()
	away := filesAwayEvent(j.events, ref)
	if away != nil {
		j.say("event %s %s ago: %s", away.Reason, since(away), printable(away.Message))
		if away.Reason == shareapi.ReasonShareReplaced {
			// The volume belongs to the share object it was published from (the driver's
			// shareidentity.go): another one under its name never feeds this pod.
			return j.verdict(verdictShareReplaced, fmt.Sprintf("kubectl delete pod -n %s %s   (its controller starts a new one, published from the share as it is now; "+
				"or, if the share was deleted by mistake, create it again over the source the event names)", p.Namespace, p.Name)), true
		}
		switch {
		case r.useErr != nil:
			j.couldNot("check whether the service account may use the share now", r.useErr)
			return j.verdict(verdictRevoked, "grant use again if it was meant (see UseDenied's command), then the driver restores the files at its next relist"), true
		case !r.mayUse:
			j.say("service account %s/%s may not use %s %q now (SubjectAccessReview)", p.Namespace, sa, typeName, ref.Name)
			return j.verdict(verdictRevoked, useGrantCommand(p.Namespace, sa, ref)+"   (if the revocation was not meant; the driver restores the files at its next relist)"), true
		}
		j.say("service account %s/%s may use it again (SubjectAccessReview)", p.Namespace, sa)
	} else {
		switch {
		case r.useErr != nil:
			j.couldNot(fmt.Sprintf("create a SubjectAccessReview for service account %s/%s (use %s)", p.Namespace, sa, ref.Kind.Resource()+"."+shareapi.Group), r.useErr)
		case !r.mayUse:
			j.say("service account %s/%s may not use %s %q (SubjectAccessReview; authorizer: %q)", p.Namespace, sa, typeName, ref.Name, r.useReason)
			return j.verdict(verdictUseDenied, useGrantCommand(p.Namespace, sa, ref)), true
		default:
			j.say("service account %s/%s may use %s %q (SubjectAccessReview)", p.Namespace, sa, typeName, ref.Name)
		}
	}
	if r.specErr != nil {
		j.say("%v", r.specErr)
		return j.verdict(verdictShareNotReady, fmt.Sprintf("kubectl edit %s %s", ref.Kind.Resource(), ref.Name)), true
	}
	// Files shown are refreshed, and files away (their use granted again) restored, only if the
	// relist may read the source, the source exists and is the object the share was made for, and
	// the new copy fits; only its event says it did not.
	if v, done := j.judgeSource(r.share, r.ready, r.source()); done {
		return v, true
	}
	if failed := newestShareEvent(j.events, ref, r.share.Source); failed != nil && failed.Reason == shareapi.ReasonRefreshFailed {
		j.say("event %s %s ago: %s", failed.Reason, since(failed), printable(failed.Message))
		return j.verdict(verdictNotRefreshed, "what the event says; new files that do not fit the node's budget or the volume: select fewer keys (the volume's items) "+
			"or make room (docs/operating.md, Memory). The driver tries again at every relist"), true
	}
	if away != nil {
		return j.verdict(verdictRevoked, "none: use is granted again; the driver restores the files at its next relist (--relist-interval)"), true
	}
	return shareVerdictReport{}, false
}

// filesAwayEvent is the driver's event that took the share's files away from the pod, if they
// are away: of its events naming the share, the newest that shows the files or takes them away
// (shareapi.FilesAfter) decides. With none, the files published are shown.
func filesAwayEvent(evs []corev1.Event, ref shareapi.Ref) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		f, ok := shareapi.FilesAfter(evs[i].Reason)
		if !ok || f == shareapi.FilesAsBefore || !mentionsShare(evs[i].Message, ref) {
			continue
		}
		if f == shareapi.FilesAway {
			return &evs[i]
		}
		return nil
	}
	return nil
}

// newestShareEvent is the driver's newest event about the share: one naming it, or saying the
// driver may read its source again (SharedResourceRefreshResumed names the source, not the
// share).
func newestShareEvent(evs []corev1.Event, ref shareapi.Ref, src shareapi.SourceKey) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if _, ok := shareapi.FilesAfter(evs[i].Reason); !ok {
			continue
		}
		if mentionsShare(evs[i].Message, ref) || evs[i].Reason == shareapi.ReasonRefreshResumed && mentionsSource(evs[i].Message, src) {
			return &evs[i]
		}
	}
	return nil
}
