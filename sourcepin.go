package main

// A share keeps pointing at the object it was made for. A share names its source by namespace
// and name only; were the source's namespace deleted, whoever may create namespaces could create
// it again with a Secret of that name, grant the driver read there (they hold get in their own
// namespace), and within one relist every consumer of the share would read their content. So the
// status writer pins the source's UID in the share's status (status.sourceUID) when it first
// reads it, and an object with another UID is not shared: volumes keep their last files and are
// not refreshed (each pod told once), new mounts fail, and the share's Ready condition is False
// with reason SourceReplaced and the command that accepts the new object.
//
// Pinning is the default, and it is loud rather than silent: an owner that deletes and re-creates
// its Secret (rather than updating it, as cert-manager and most tools do) sees every consumer
// told, and one command, or spec.sourceRecreation: Follow on the share, lets it through. A share
// that follows has its pin moved to the new object by the status writer.
//
// The first pin is trusted only with an object that is the share's first: one that existed when
// the share was made (within firstPinGrace of its creation: a share and its source applied
// together), or one created after the status writer found that the share's source did not exist
// (Ready False, SourceNotFound) while no object was ever read for the share (sawNoSource: a share
// made before its source, or whose ref named nothing until an edit corrected it). One way: once an
// object was read for the share, pinned or refused, the status records it (SourceObserved), and
// neither a source deleted later nor an edit of the share makes the next object the first. Any
// other object created after the share may be one created again while the pin was missing (the
// status writer down, lagging or not allowed to read the source): running volumes then hold to
// the object their files came from (sourcePin.orRecorded), and a first pin taking the new object
// would move them to it. So it is not pinned: the share's Ready condition is False with reason
// SourceReplaced, saying so and what accepts the object, and the pin is left to an admin (or to
// a share that follows). What this cannot tell apart: a source deleted and created again within
// firstPinGrace of the share, before the status writer read the first; and a status writer that
// never read the first object in its whole life, and first ran while no source existed, pins the
// next one.

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// pinField is where the pin lives: status.sourceUID.
	pinField = "sourceUID"
	// recreationField is spec.sourceRecreation: Pin (or absent) or Follow.
	recreationField  = "sourceRecreation"
	recreationFollow = "Follow"

	// SourceObserved (True, ObjectRead) records that an object was read for the share's current
	// spec (its observedGeneration): after it, the first pin never counts the share as made
	// before its source (sawNoSource).
	conditionSourceObserved = "SourceObserved"
	reasonObjectRead        = "ObjectRead"
)

// sourcePin is what a share says about which object it shares.
type sourcePin struct {
	UID    string // status.sourceUID; "" until the status writer first read the source
	Follow bool   // spec.sourceRecreation: Follow
}

func pinOf(u *unstructured.Unstructured) sourcePin {
	uid, _, _ := unstructured.NestedString(u.Object, "status", pinField)
	mode, _, _ := unstructured.NestedString(u.Object, "spec", recreationField)
	return sourcePin{UID: uid, Follow: mode == recreationFollow}
}

// orRecorded is the pin a running volume holds the share to: the share's own, or, while the share
// has none and does not follow (its status not written yet: the status controller down, lagging
// or unable to read the source), the UID of the object the volume's files came from (its
// record's SourceUID). Without it, a volume would follow a re-created source exactly while the
// share's pin is missing: the pin would fail open.
func (p sourcePin) orRecorded(recorded string) sourcePin {
	if p.UID == "" && !p.Follow {
		p.UID = recorded
	}
	return p
}

// refuses says whether the share refuses the object with this UID: another object than the one
// it was made for, and the share does not follow re-creations.
func (p sourcePin) refuses(uid string) bool {
	return p.UID != "" && uid != "" && uid != p.UID && !p.Follow
}

// replacedMessage says that sh's source is another object than the one it was made for, and
// what to run to share the new one.
func replacedMessage(sh shareSpec, uid string) string {
	return fmt.Sprintf("%s %s/%s was deleted and created again (UID %s; %s %q was made for UID %s): it is not shared until an admin accepts it, "+
		"and volumes keep their last files. If the new object is the one to share, run: "+
		"kubectl patch %s %s --subresource=status --type=merge -p '{\"status\":{\"%s\":\"%s\"}}' "+
		"(or set spec.%s: %s on the share to follow re-creations)",
		sh.Kind, sh.SourceNamespace, sh.SourceName, uid, sh.Kind.shareTypeName(), sh.Name, sh.Pin.UID,
		sh.Kind.shareResource(), sh.Name, pinField, uid, recreationField, recreationFollow)
}

// sourceNewerThanShareError is a source a share's first pin may not take: the share has no pin,
// does not follow re-creations, and the object was created after the share.
type sourceNewerThanShareError struct {
	share                 shareSpec
	uid                   string
	created, shareCreated time.Time
}

func (e *sourceNewerThanShareError) Error() string {
	sh := e.share
	return fmt.Sprintf("%s %s/%s (UID %s) was created at %s, after %s %q (%s): the driver does not pin an object newer than the share on its own "+
		"(an object was read for the share before, or its status never said its source did not exist), as it may have been deleted and created again by someone else; "+
		"running volumes keep the object their files came from, and new volumes mount the object that exists. "+
		"If this object is the one to share, run: "+
		"kubectl patch %s %s --subresource=status --type=merge -p '{\"status\":{\"%s\":\"%s\"}}' "+
		"(or set spec.%s: %s on the share to follow re-creations)",
		sh.Kind, sh.SourceNamespace, sh.SourceName, e.uid, e.created.UTC().Format(time.RFC3339), sh.Kind.shareTypeName(), sh.Name,
		e.shareCreated.UTC().Format(time.RFC3339), sh.Kind.shareResource(), sh.Name, pinField, e.uid, recreationField, recreationFollow)
}

// firstPinGrace is how much later than its share an object may be created and still
// count as made with it: a share and its source applied together (kubectl apply of a directory,
// a chart) are created seconds apart, in either order, often before the status controller runs.
const firstPinGrace = 10 * time.Second

// firstPinRefusal says whether a first pin of share sh, created at shareCreated, may take the
// object uid, created at created: nil when it may (the share has a pin or follows, so no first
// pin is taken here; the object is not newer than the share, by more than firstPinGrace; or the
// share's status saw no source, sawNoSource), else a *sourceNewerThanShareError.
func firstPinRefusal(sh shareSpec, shareCreated time.Time, sawNoSource bool, uid string, created time.Time) error {
	if uid == "" || sh.Pin.UID != "" || sh.Pin.Follow || sawNoSource || !created.After(shareCreated.Add(firstPinGrace)) {
		return nil
	}
	return &sourceNewerThanShareError{share: sh, uid: uid, created: created, shareCreated: shareCreated}
}

// sawNoSource says whether the share's status says that its source did not exist (Ready False,
// SourceNotFound) while no object was ever read for the share (no SourceObserved, of any
// generation, and so no pin): an object found after that is the share's first, as for a share
// made before its source, or one whose ref named nothing until an edit corrected it. One way: once
// an object was read for the share (pinned or refused: SourceObserved), neither a source deleted
// later nor an edit of the share's spec makes the next object its first.
func sawNoSource(u *unstructured.Unstructured) bool {
	conds, err := shareConditions(u)
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

// shareConditions reads a share's status.conditions: the status controller writes them, and the
// first pin reads SourceObserved from them.
func shareConditions(u *unstructured.Unstructured) ([]metav1.Condition, error) {
	items, found, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil || !found {
		return nil, err
	}
	out := make([]metav1.Condition, 0, len(items))
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("status.conditions holds a %T", it)
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
