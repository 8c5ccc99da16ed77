package admin

// What the admin's commands take from the node plugin's own code.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// Driver is how the node plugin reads what diagnose and who-uses judge: a volume's attributes, a
// share object, a share's conditions, the driver's service accounts, and the command that lets
// them read a source. main hands in the node plugin's own functions, so that the admin's
// verdicts rest on the very reading the driver makes, never on a second copy of it that could
// drift. Every function is pure: it reads its arguments, nothing else.
type Driver struct {
	// Version is the binary's version, for the User-Agent of the admin's requests.
	Version string
	// ShareAttributes is the shares a csi volume's attributes name, or why they name none.
	ShareAttributes func(attrs map[string]string) ([]shareapi.Ref, error)
	// Refreshes says whether a csi volume with these attributes is refreshed from its sources
	// (refreshResource), or why the driver refuses the attributes.
	Refreshes func(attrs map[string]string) (bool, error)
	// Share reads a share object of kind k; an error says why the driver cannot use it.
	Share func(k shareapi.Kind, u *unstructured.Unstructured) (Share, error)
	// Conditions is the share object's status.conditions.
	Conditions func(u *unstructured.Unstructured) ([]metav1.Condition, error)
	// CheckAccounts checks a --driver-service-accounts value (NAMESPACE:NAME,...).
	CheckAccounts func(accounts string) error
	// GrantReadHint is what an admin runs so that the driver's service accounts may read key.
	GrantReadHint func(accounts string, key shareapi.SourceKey) string
}

// Share is what the admin's commands use of a share object.
type Share struct {
	Name   string
	Source shareapi.SourceKey
	// PinUID is the UID of the object the share was made for (status.sourceUID), "" if none yet.
	PinUID string
	// RefusesSource says whether the share refuses the source object with this UID: another
	// object than the one it was made for, and it does not follow re-creations.
	RefusesSource func(uid string) bool
}
