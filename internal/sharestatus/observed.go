package sharestatus

// What the status writer records of the first pin (internal/share/pin.go says what the pin is and
// when a first pin is trusted).

import (
	"fmt"

	"github.com/shared-resource/csi-driver/internal/share"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// SourceObserved (True, ObjectRead) records that an object was read for the share's current
	// spec (its observedGeneration): after it, the first pin never counts the share as made
	// before its source (sawNoSource).
	conditionSourceObserved = "SourceObserved"
	reasonObjectRead        = "ObjectRead"
)

// sawNoSource says whether the share's status says that its source did not exist (Ready False,
// SourceNotFound) while no object was ever read for the share (no SourceObserved, of any
// generation, and so no pin): an object found after that is the share's first, as for a share
// made before its source, or one whose ref named nothing until an edit corrected it. One way: once
// an object was read for the share (pinned or refused: SourceObserved), neither a source deleted
// later nor an edit of the share's spec makes the next object its first.
func sawNoSource(u *unstructured.Unstructured) bool {
	conds, err := share.Conditions(u)
	if err != nil {
		return false
	}
	c := meta.FindStatusCondition(conds, conditionReady)
	return c != nil && c.Reason == reasonSourceNotFound && meta.FindStatusCondition(conds, conditionSourceObserved) == nil
}

// observedForSpec says whether conds record that an object was read for the share's spec of
// generation gen (SourceObserved).
func observedForSpec(conds []metav1.Condition, gen int64) bool {
	c := meta.FindStatusCondition(conds, conditionSourceObserved)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
}

// recordObserved adds SourceObserved to conds, for generation gen, if an object was read for it:
// now (seen, its UID) or by an earlier check whose Ready condition says so. It says whether it
// added it. Called before Ready is overwritten: once recorded, a later "no source" does not make
// the next object the share's first (sawNoSource).
func recordObserved(conds *[]metav1.Condition, gen int64, seen string) bool {
	if observedForSpec(*conds, gen) || (seen == "" && !readObjectBefore(*conds, gen)) {
		return false
	}
	what := "the source"
	if seen != "" {
		what = fmt.Sprintf("the source (UID %s)", seen)
	}
	return meta.SetStatusCondition(conds, metav1.Condition{Type: conditionSourceObserved, Status: metav1.ConditionTrue, Reason: reasonObjectRead,
		ObservedGeneration: gen,
		Message: "the driver read " + what + " for this spec of the share: from now on the driver pins an object created after the share " +
			"only if an admin accepts it (or the share follows re-creations), even after the source is deleted"})
}

// readObjectBefore says whether a Ready condition of conds for generation gen says an object was
// read (a status written before SourceObserved existed): it is recorded as observed before
// Ready is overwritten.
func readObjectBefore(conds []metav1.Condition, gen int64) bool {
	c := meta.FindStatusCondition(conds, conditionReady)
	if c == nil || c.ObservedGeneration != gen {
		return false
	}
	switch c.Reason {
	case reasonSourceAvailable, reasonSourceReplaced, reasonSourceKeyMissing:
		return true
	}
	return false
}
