package sharestatus

// The status a check of its source gives a share: the Ready condition (its reason and the message
// an admin reads, bounded as the CRDs' schema requires), the pin, SourceObserved (observed.go)
// and status.exposedKeys, written together by the writer (writer.go).

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/sourceaccess"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// The condition the CRDs' Ready printer column shows (.status.conditions[?(@.type=="Ready")]).
const (
	conditionReady = "Ready"

	reasonSourceAvailable   = "SourceAvailable"   // True
	reasonSourceNotFound    = "SourceNotFound"    // False
	reasonSourceForbidden   = "SourceForbidden"   // False
	reasonInvalidShare      = "InvalidShare"      // False: the spec's ref cannot be used
	reasonSourceReplaced    = "SourceReplaced"    // False: another object than the pinned one (internal/share/pin.go)
	reasonSourceKeyMissing  = "SourceKeyMissing"  // False: the source lacks a key the share lists
	reasonSourceCheckFailed = "SourceCheckFailed" // Unknown: the API server could not answer
)

// statusAfterCheck is u with the status a check of its source gives it: the Ready condition cond,
// the pin (uid: "" when it may not be pinned), SourceObserved (seen: the UID read, "" for none),
// status.exposedKeys. changed is false when the status says all that already (u not copied).
func statusAfterCheck(k share.Kind, u *unstructured.Unstructured, cond metav1.Condition, uid, seen string) (out *unstructured.Unstructured, changed bool, err error) {
	conds, err := share.Conditions(u)
	if err != nil {
		// Only a writer ignoring the CRD schema gets here; the driver's condition replaces it.
		klog.V(2).InfoS("Replacing unreadable share status", "kind", k.TypeName(), "share", u.GetName(), "err", err)
		conds = nil
	}
	// The pin is set when the source is first read, if it is the share's first object, and moved
	// to a re-created source only by a share that follows re-creations (internal/share/pin.go). uid is ""
	// when the source may not be pinned.
	pinned := share.PinOf(u)
	pin := pinned.UID
	if uid != "" && (pin == "" || pinned.Follow) {
		pin = uid
	}
	// Recorded before Ready is overwritten (observed.go).
	observed := recordObserved(&conds, u.GetGeneration(), seen)
	// lastTransitionTime moves only when the status does; reason, message and
	// observedGeneration are updated in place.
	condChanged := meta.SetStatusCondition(&conds, cond) || observed
	if kept := withinMaxConditions(conds); len(kept) < len(conds) {
		conds, condChanged = kept, true
	}
	exposed := share.ExposedNames(k, u)
	had, _, _ := unstructured.NestedStringSlice(u.Object, "status", "exposedKeys")
	if !condChanged && slices.Equal(had, exposed) && pin == pinned.UID {
		return u, false, nil
	}
	u = u.DeepCopy()
	if pin != "" {
		if err := unstructured.SetNestedField(u.Object, pin, "status", share.PinField); err != nil {
			return nil, false, err
		}
	}
	if exposed == nil {
		unstructured.RemoveNestedField(u.Object, "status", "exposedKeys")
	} else if err := unstructured.SetNestedStringSlice(u.Object, exposed, "status", "exposedKeys"); err != nil {
		return nil, false, err
	}
	items := make([]any, 0, len(conds))
	for i := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			return nil, false, err
		}
		items = append(items, m)
	}
	if err := unstructured.SetNestedSlice(u.Object, items, "status", "conditions"); err != nil {
		return nil, false, err
	}
	return u, true, nil
}

// maxConditions is the most conditions the CRDs' schema takes (status.conditions' maxItems).
const maxConditions = 8

// withinMaxConditions is conds with at most maxConditions conditions: Ready and SourceObserved
// (the driver's), and the first of the others. A status holding more (written before the schema
// bounded them) would have every write of it refused.
func withinMaxConditions(conds []metav1.Condition) []metav1.Condition {
	if len(conds) <= maxConditions {
		return conds
	}
	others := maxConditions - len(slices.DeleteFunc(slices.Clone(conds), func(c metav1.Condition) bool { return !driversCondition(c.Type) }))
	return slices.DeleteFunc(slices.Clone(conds), func(c metav1.Condition) bool {
		if driversCondition(c.Type) {
			return false
		}
		others--
		return others < 0
	})
}

// driversCondition says whether a condition type is one the driver writes.
func driversCondition(t string) bool {
	return t == conditionReady || t == conditionSourceObserved
}

// readyCondition turns the answer to a GET of the share's source into the Ready condition. The
// messages say what to do: they are what an admin reads in `kubectl describe`. A message that
// would be longer than the schema allows is cut (boundedMessage).
func readyCondition(sh share.Spec, uid string, getErr error, account sourceaccess.DriverAccount) metav1.Condition {
	c := unboundedReadyCondition(sh, uid, getErr, account)
	c.Message = boundedMessage(c.Message)
	return c
}

// maxConditionMessage is the longest message the CRDs' schema takes (metav1.Condition's): a
// status with a longer one is refused whole, its pin with it.
const maxConditionMessage = 32768

// boundedMessage is msg cut to maxConditionMessage bytes, on a character's boundary, saying so. A
// share listing some 127 keys of 253 bytes or more makes a longer message (it names them all);
// status.exposedKeys names them in full.
func boundedMessage(msg string) string {
	if len(msg) <= maxConditionMessage {
		return msg
	}
	suffix := fmt.Sprintf(" ... (cut: the message was %d bytes; status.exposedKeys lists every name)", len(msg))
	cut := maxConditionMessage - len(suffix)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + suffix
}

func unboundedReadyCondition(sh share.Spec, uid string, getErr error, account sourceaccess.DriverAccount) metav1.Condition {
	src := fmt.Sprintf("%s %s/%s", sh.Kind, sh.SourceNamespace, sh.SourceName)
	c := metav1.Condition{Type: conditionReady}
	var missing *share.MissingSharedKeysError
	switch {
	case getErr == nil && sh.Pin.Refuses(uid):
		c.Status, c.Reason = metav1.ConditionFalse, reasonSourceReplaced
		c.Message = share.ReplacedMessage(sh, uid)
	case errors.As(getErr, new(*share.SourceNewerError)):
		c.Status, c.Reason = metav1.ConditionFalse, reasonSourceReplaced
		c.Message = getErr.Error()
	case getErr == nil:
		c.Status, c.Reason = metav1.ConditionTrue, reasonSourceAvailable
		c.Message = src + " exists and the driver can read it; the share exposes "
		if sh.Exposed.All() {
			c.Message += "every key of it"
		} else {
			c.Message += "only " + share.QuoteAll(sh.Exposed.Names())
		}
	case errors.As(getErr, &missing):
		c.Status, c.Reason = metav1.ConditionFalse, reasonSourceKeyMissing
		c.Message = fmt.Sprintf("pods cannot mount %s %q, and volumes already using it are not refreshed: %v",
			sh.Kind.TypeName(), sh.Name, missing)
	case apierrors.IsNotFound(getErr):
		c.Status, c.Reason = metav1.ConditionFalse, reasonSourceNotFound
		c.Message = fmt.Sprintf("%s does not exist: pods cannot mount %s %q until it is created (or spec.%s is corrected)",
			src, sh.Kind.TypeName(), sh.Name, share.RefField(sh.Kind))
	case apierrors.IsForbidden(getErr):
		c.Status, c.Reason = metav1.ConditionFalse, reasonSourceForbidden
		c.Message = fmt.Sprintf("the driver may not read %s: pods cannot mount %s %q, and volumes already using it keep their last data but are not refreshed; %s",
			src, sh.Kind.TypeName(), sh.Name, account.GrantReadHint(sh.SourceKey()))
	default:
		c.Status, c.Reason = metav1.ConditionUnknown, reasonSourceCheckFailed
		c.Message = fmt.Sprintf("checking %s failed: %v", src, getErr)
	}
	return c
}
