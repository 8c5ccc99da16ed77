package share

import (
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Spec is the part of a SharedSecret/SharedConfigMap the driver uses.
type Spec struct {
	Kind Kind
	Name string
	// UID is the share object's metadata.uid: a volume belongs to the object it was published
	// from, not to its name (the root's shareidentity.go).
	UID             string
	SourceNamespace string
	SourceName      string
	// The object the share was made for, and whether it follows a re-created one
	// (pin.go).
	Pin Pin
	// Exposed is what the share exposes of its source, its spec.items (exposure.go): nil is
	// every key. (The pod's own items attribute is volumeRequest.Items.)
	Exposed Exposure
}

// SourceKey names the share's source object.
func (s Spec) SourceKey() SourceKey {
	return SourceKey{Kind: s.Kind, Namespace: s.SourceNamespace, Name: s.SourceName}
}

// FromObject reads spec.secretRef / spec.configMapRef and spec.items; a share without a
// usable ref, or with a list that cannot be read, is an error (never "every key").
func FromObject(k Kind, u *unstructured.Unstructured) (Spec, error) {
	refField := RefField(k)
	ns, _, _ := unstructured.NestedString(u.Object, "spec", refField, "namespace")
	name, _, _ := unstructured.NestedString(u.Object, "spec", refField, "name")
	s := Spec{Kind: k, Name: u.GetName(), UID: string(u.GetUID()), SourceNamespace: ns, SourceName: name, Pin: PinOf(u)}
	if !ValidLabel(ns) || !ValidName(name) {
		return s, &BadError{fmt.Sprintf("%s %q has an invalid spec.%s (namespace %q, name %q): fix the share", k.TypeName(), s.Name, refField, ns, name)}
	}
	raw, present, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", ItemsField)
	items, err := ParseExposure(raw, present)
	if err != nil {
		return s, &BadError{fmt.Sprintf("%s %q: %v: fix the share", k.TypeName(), s.Name, err)}
	}
	s.Exposed = items
	return s, nil
}

// DeletingError is a share whose deletion was asked for (metadata.deletionTimestamp is set)
// but which finalizers still keep stored. To a volume it is deleted: its files leave every volume,
// and no new volume may use it, at once, not when whatever holds the finalizer lets it go. It
// is an API NotFound (apierrors.IsNotFound), so that every caller treats it as a deleted share.
type DeletingError struct {
	kind Kind
	name string
}

func (e *DeletingError) Error() string {
	return fmt.Sprintf("%s %q is being deleted (its metadata.finalizers keep it stored until they are removed)", e.kind.TypeName(), e.name)
}

// Status makes the error an API NotFound.
func (e *DeletingError) Status() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: e.Error()}
}

// BadError is a share object that cannot be used as it is; only an admin's edit fixes it.
type BadError struct{ msg string }

func (e *BadError) Error() string { return e.msg }

// SourceKey names a Secret or ConfigMap.
type SourceKey struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (k SourceKey) String() string { return fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name) }
