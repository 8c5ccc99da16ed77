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

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// pinField is where the pin lives: status.sourceUID.
	pinField = "sourceUID"
	// recreationField is spec.sourceRecreation: Pin (or absent) or Follow.
	recreationField  = "sourceRecreation"
	recreationFollow = "Follow"
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
