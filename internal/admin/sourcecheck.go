package admin

// diagnose's judgement of a share's source: the relist's checks (judge.go in the driver's root),
// in its order.

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// sourceFacts is what diagnose read of a share's source: its UID (or why not), and whether the
// driver's first service account may read it (a SubjectAccessReview; no account: not asked).
type sourceFacts struct {
	uid           string
	err           error
	driverAccount string
	mayRead       bool
	readErr       error
}

// judgeSource is the verdict on a share's source, from what diagnose read of it and the share's
// Ready condition (nil: none); done is false when it finds nothing wrong. Its checks are the
// relist's, in the relist's order (judge.go, judgeSource): may the driver read the source, does
// it exist, is it the object the share was made for, does it hold the keys the share lists. A
// volume that does not refresh shows the files it was published with, whatever its source and
// the share's Ready say, and the relist never reads its source: none of them is judged.
func (j *shareJudgement) judgeSource(sh Share, ready *metav1.Condition, src sourceFacts) (r shareVerdictReport, done bool) {
	if !j.refresh {
		j.say("the volume has refreshResource \"false\": it keeps the files it was published with, and the driver does not read its source again")
		return shareVerdictReport{}, false
	}
	ref, key, account, srcErr := j.ref, sh.Source, j.o.driverAccounts, src.err
	if first := src.driverAccount; first != "" {
		switch {
		case src.readErr != nil:
			j.couldNot(fmt.Sprintf("create a SubjectAccessReview for the driver's service account %s (get %s)", first, shareapi.SourceGVR(key.Kind).Resource), src.readErr)
		case !src.mayRead:
			j.say("the driver's service account %s may not get %s %s/%s (SubjectAccessReview)", first, key.Kind, key.Namespace, key.Name)
			return j.verdict(verdictDriverMayNotRead, j.a.d.GrantReadHint(account, key)), true
		default:
			j.say("the driver's service account %s may get %s %s/%s (SubjectAccessReview)", first, key.Kind, key.Namespace, key.Name)
		}
	}
	if ready != nil && ready.Reason == shareapi.ReasonSourceForbidden {
		return j.verdict(verdictDriverMayNotRead, j.a.d.GrantReadHint(account, key)), true
	}
	if apierrors.IsNotFound(srcErr) || (ready != nil && ready.Reason == shareapi.ReasonSourceNotFound) {
		return j.sourceMissing(key, srcErr), true
	}
	switch {
	case srcErr == nil && sh.RefusesSource(src.uid):
		j.say("%s %s/%s has UID %s; the share was made for UID %s", key.Kind, key.Namespace, key.Name, src.uid, sh.PinUID)
		return j.verdict(verdictSourceReplaced, fmt.Sprintf(`kubectl patch %s %s --subresource=status --type=merge -p '{"status":{"%s":"%s"}}'   (if the new object is the one to share; or set spec.%s: %s)`,
			ref.Kind.Resource(), ref.Name, shareapi.PinField, src.uid, shareapi.RecreationField, shareapi.RecreationFollow)), true
	case ready != nil && ready.Reason == shareapi.ReasonSourceReplaced:
		return j.verdict(verdictSourceReplaced, "the kubectl patch the share's Ready message prints (if the new object is the one to share)"), true
	}
	if srcErr == nil && ready != nil && ready.Reason == shareapi.ReasonSourceKeyMissing {
		return j.sourceMissing(key, srcErr), true
	}
	if srcErr != nil && !apierrors.IsForbidden(srcErr) {
		j.say("reading %s %s/%s's metadata failed: %v", key.Kind, key.Namespace, key.Name, srcErr)
	}
	if ready != nil && ready.Status != metav1.ConditionTrue {
		return j.verdict(verdictShareNotReady, "what the share's Ready message says (kubectl get "+ref.Kind.Resource()+" "+ref.Name+" -o yaml)"), true
	}
	return shareVerdictReport{}, false
}

// sourceMissing is the verdict on a share whose source, or a key of it the share lists, does not
// exist (err: the error reading the source).
func (j *shareJudgement) sourceMissing(key shareapi.SourceKey, srcErr error) shareVerdictReport {
	ref := j.ref
	if apierrors.IsNotFound(srcErr) {
		j.say("%s %s/%s does not exist", key.Kind, key.Namespace, key.Name)
	}
	create := fmt.Sprintf("kubectl create secret generic %s -n %s --from-file=KEY=PATH", key.Name, key.Namespace)
	if key.Kind == shareapi.KindConfigMap {
		create = fmt.Sprintf("kubectl create configmap %s -n %s --from-file=KEY=PATH", key.Name, key.Namespace)
	}
	if srcErr == nil {
		create = fmt.Sprintf("add the missing key to %s %s/%s (kubectl edit %s %s -n %s)", key.Kind, key.Namespace, key.Name, strings.ToLower(string(key.Kind)), key.Name, key.Namespace)
	}
	return j.verdict(verdictSourceMissing, create+fmt.Sprintf("   (or point the share at an existing object: kubectl edit %s %s)", ref.Kind.Resource(), ref.Name))
}
