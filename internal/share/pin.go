package share

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
// the object their files came from (Pin.OrRecorded), and a first pin taking the new object
// would move them to it. So it is not pinned: the share's Ready condition is False with reason
// SourceReplaced, saying so and what accepts the object, and the pin is left to an admin (or to
// a share that follows). What this cannot tell apart: a source deleted and created again within
// firstPinGrace of the share, before the status writer read the first; and a status writer that
// never read the first object in its whole life, and first ran while no source existed, pins the
// next one.

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// PinField is where the pin lives: status.sourceUID.
	PinField = "sourceUID"
	// RecreationField is spec.sourceRecreation: Pin (or absent) or Follow.
	RecreationField = "sourceRecreation"
	// RecreationFollow is the value of spec.sourceRecreation of a share that follows re-creations.
	RecreationFollow = "Follow"
)

// Pin is what a share says about which object it shares.
type Pin struct {
	UID    string // status.sourceUID; "" until the status writer first read the source
	Follow bool   // spec.sourceRecreation: Follow
}

// PinOf reads a share's pin from its object: status.sourceUID and spec.sourceRecreation.
func PinOf(u *unstructured.Unstructured) Pin {
	uid, _, _ := unstructured.NestedString(u.Object, "status", PinField)
	mode, _, _ := unstructured.NestedString(u.Object, "spec", RecreationField)
	return Pin{UID: uid, Follow: mode == RecreationFollow}
}

// OrRecorded is the pin a running volume holds the share to: the share's own, or, while the share
// has none and does not follow (its status not written yet: the status controller down, lagging
// or unable to read the source), the UID of the object the volume's files came from (its
// record's SourceUID). Without it, a volume would follow a re-created source exactly while the
// share's pin is missing: the pin would fail open.
func (p Pin) OrRecorded(recorded string) Pin {
	if p.UID == "" && !p.Follow {
		p.UID = recorded
	}
	return p
}

// Refuses says whether the share refuses the object with this UID: another object than the one
// it was made for, and the share does not follow re-creations.
func (p Pin) Refuses(uid string) bool {
	return p.UID != "" && uid != "" && uid != p.UID && !p.Follow
}

// ReplacedMessage says that sh's source is another object than the one it was made for, and
// what to run to share the new one.
func ReplacedMessage(sh Spec, uid string) string {
	return fmt.Sprintf("%s %s/%s was deleted and created again (UID %s; %s %q was made for UID %s): it is not shared until an admin accepts it, "+
		"and volumes keep their last files. If the new object is the one to share, run: "+
		"kubectl patch %s %s --subresource=status --type=merge -p '{\"status\":{\"%s\":\"%s\"}}' "+
		"(or set spec.%s: %s on the share to follow re-creations)",
		sh.Kind, sh.SourceNamespace, sh.SourceName, uid, sh.Kind.TypeName(), sh.Name, sh.Pin.UID,
		sh.Kind.Resource(), sh.Name, PinField, uid, RecreationField, RecreationFollow)
}

// SourceNewerError is a source a share's first pin may not take: the share has no pin,
// does not follow re-creations, and the object was created after the share.
type SourceNewerError struct {
	share                 Spec
	uid                   string
	created, shareCreated time.Time
}

func (e *SourceNewerError) Error() string {
	sh := e.share
	return fmt.Sprintf("%s %s/%s (UID %s) was created at %s, after %s %q (%s): the driver does not pin an object newer than the share on its own "+
		"(an object was read for the share before, or its status never said its source did not exist), as it may have been deleted and created again by someone else; "+
		"running volumes keep the object their files came from, and new volumes mount the object that exists. "+
		"If this object is the one to share, run: "+
		"kubectl patch %s %s --subresource=status --type=merge -p '{\"status\":{\"%s\":\"%s\"}}' "+
		"(or set spec.%s: %s on the share to follow re-creations)",
		sh.Kind, sh.SourceNamespace, sh.SourceName, e.uid, e.created.UTC().Format(time.RFC3339), sh.Kind.TypeName(), sh.Name,
		e.shareCreated.UTC().Format(time.RFC3339), sh.Kind.Resource(), sh.Name, PinField, e.uid, RecreationField, RecreationFollow)
}

// firstPinGrace is how much later than its share an object may be created and still
// count as made with it: a share and its source applied together (kubectl apply of a directory,
// a chart) are created seconds apart, in either order, often before the status controller runs.
const firstPinGrace = 10 * time.Second

// FirstPinRefusal says whether a first pin of share sh, created at shareCreated, may take the
// object uid, created at created: nil when it may (the share has a pin or follows, so no first
// pin is taken here; the object is not newer than the share, by more than firstPinGrace; or the
// share's status saw no source, sawNoSource), else a *SourceNewerError.
func FirstPinRefusal(sh Spec, shareCreated time.Time, sawNoSource bool, uid string, created time.Time) error {
	if uid == "" || sh.Pin.UID != "" || sh.Pin.Follow || sawNoSource || !created.After(shareCreated.Add(firstPinGrace)) {
		return nil
	}
	return &SourceNewerError{share: sh, uid: uid, created: created, shareCreated: shareCreated}
}
