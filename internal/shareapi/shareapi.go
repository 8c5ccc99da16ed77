// Package shareapi is the vocabulary the node plugin and the admin's commands share: the driver's
// name, the API group and version of the share CRDs, the kinds of share and what each is called,
// a share's name in a volume, and the words the driver writes where others read them (the
// reasons of its events on pods, the Ready condition of a share and its reasons, the pin's
// fields).
//
// The contract: names and constants only, and the few pure functions over them. It reads
// nothing, writes nothing and holds no state; it imports nothing of the driver's, so both the
// root and internal/admin may import it. Every value here is written by one side and read by the
// other (records, events, conditions, RBAC rules, CRD paths): a change here is a change of the
// API, and both sides move with it.
package shareapi

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DriverName is the CSI driver's name: the kubelet's, a pod's csi volume's driver, the plugin dir.
const DriverName = "csi.sharedresource.openshift.io"

// Group is the API group of both share CRDs, and of the `use` verb RBAC grants on them; Version
// is the CRDs' version.
const (
	Group   = "sharedresource.openshift.io"
	Version = "v1alpha1"
)

// Kind says which custom resource a volume refers to and which object it copies. Its value is
// the Kind of the source ("Secret", "ConfigMap"); records store it (record.json's "kind"), so the
// values never change.
type Kind string

// The two kinds: a SharedSecret shares a Secret, a SharedConfigMap a ConfigMap.
const (
	KindSecret    Kind = "Secret"
	KindConfigMap Kind = "ConfigMap"
)

// KindInfo is what one kind of share is called, everywhere it is named.
type KindInfo struct {
	Kind Kind
	// TypeName is the CRD's Kind, as messages name it.
	TypeName string
	// Resource is the CRD's resource: in its API path, and what RBAC grants `use` on.
	Resource string
	// Attribute is the volume attribute that names one share of this kind (OpenShift's).
	Attribute string
	// RefField is the spec field naming the source: spec.<RefField>.{namespace,name}.
	RefField string
	// Source is the resource of the objects shared: the driver GETs them, and an admin grants it
	// read on them.
	Source schema.GroupVersionResource
}

// kinds is every kind of share, in the order messages list them: the one place they are named.
var kinds = []KindInfo{
	{Kind: KindSecret, TypeName: "SharedSecret", Resource: "sharedsecrets", Attribute: "sharedSecret", RefField: "secretRef",
		Source: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}},
	{Kind: KindConfigMap, TypeName: "SharedConfigMap", Resource: "sharedconfigmaps", Attribute: "sharedConfigMap", RefField: "configMapRef",
		Source: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
}

// AllKinds returns every kind of share, in the order messages list them: a copy, which the caller
// may keep or change without changing the table.
func AllKinds() []KindInfo { return slices.Clone(kinds) }

// Info is the kind's row of the table; ok is false for a kind that is not in it.
func (k Kind) Info() (info KindInfo, ok bool) {
	for _, row := range kinds {
		if row.Kind == k {
			return row, true
		}
	}
	return KindInfo{}, false
}

// TypeName is the custom resource's Kind, for messages ("" for a kind not in the table).
func (k Kind) TypeName() string { i, _ := k.Info(); return i.TypeName }

// Resource is the RBAC resource name the `use` verb is checked against.
func (k Kind) Resource() string { i, _ := k.Info(); return i.Resource }

// ListName is the kind as the shares attribute writes it (secret/NAME, configmap/NAME).
func (k Kind) ListName() string { return strings.ToLower(string(k)) }

// ShareGVR is the resource of the kind's share objects.
func ShareGVR(k Kind) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: Version, Resource: k.Resource()}
}

// SourceGVR is the resource of the objects a share of kind k points at.
func SourceGVR(k Kind) schema.GroupVersionResource { i, _ := k.Info(); return i.Source }

// Ref names one share, as a volume's attributes and the driver's messages name it.
type Ref struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
}

// String is the form used in the shares attribute and in messages: secret/NAME, configmap/NAME.
func (r Ref) String() string { return r.Kind.ListName() + "/" + r.Name }

// SourceKey names the object a share points at.
type SourceKey struct {
	Kind      Kind
	Namespace string
	Name      string
}

// EventComponent is the source component of the events the driver records on pods; the admin's
// commands read the driver's events by it.
const EventComponent = "shared-resource-csi"

// The reasons of the driver's events on a pod about one of its shares, which name the share as
// Ref.String() does.
const (
	ReasonRevoked        = "SharedResourceAccessRevoked"
	ReasonRestored       = "SharedResourceAccessRestored"
	ReasonRefreshed      = "SharedResourceRefreshed"
	ReasonShareReplaced  = "SharedResourceReplaced"
	ReasonRefreshFailed  = "SharedResourceRefreshFailed"
	ReasonRefreshResumed = "SharedResourceRefreshResumed"
	ReasonKeysChanged    = "SharedResourceKeysChanged"
)

// Files is whether a pod sees a share's files after an event of the driver on it.
type Files int

// What an event leaves of a share's files.
const (
	// FilesAsBefore: the event does not change whether the files are shown: they are shown
	// after it if they were before it (the event says why they were not refreshed, or which of
	// them left with the share's list of keys).
	FilesAsBefore Files = iota
	// FilesShown: the pod sees the share's files after the event.
	FilesShown
	// FilesAway: the share's files are away from the pod's view after the event.
	FilesAway
)

// ShareEventReasons is every reason of the driver's events on a pod about one of its shares.
func ShareEventReasons() []string {
	return []string{ReasonRevoked, ReasonShareReplaced, ReasonRestored, ReasonRefreshed, ReasonRefreshResumed,
		ReasonRefreshFailed, ReasonKeysChanged}
}

// FilesAfter is what the pod sees of a share's files after the driver's event with this reason
// on it; ok is false for a reason that is not one of ShareEventReasons. It is the one table both
// sides judge by: the driver's relist records these events when a share's state changes (its
// test walks every state and outcome through this table), and the admin's commands read whether
// a share's files are shown from the newest event naming it that is FilesShown or FilesAway.
func FilesAfter(reason string) (f Files, ok bool) {
	switch reason {
	case ReasonRevoked, ReasonShareReplaced:
		return FilesAway, true
	case ReasonRestored, ReasonRefreshed, ReasonRefreshResumed:
		return FilesShown, true
	case ReasonRefreshFailed, ReasonKeysChanged:
		return FilesAsBefore, true
	}
	return FilesAsBefore, false
}

// The share's Ready condition, which the status controller writes, and the reasons of it the
// admin's diagnose acts on.
const (
	ConditionReady         = "Ready"
	ReasonSourceNotFound   = "SourceNotFound"
	ReasonSourceForbidden  = "SourceForbidden"
	ReasonSourceReplaced   = "SourceReplaced"
	ReasonSourceKeyMissing = "SourceKeyMissing"
)

// The source pin's fields: status.sourceUID, the object the share was made for, and
// spec.sourceRecreation: Pin (or absent) or Follow.
const (
	PinField         = "sourceUID"
	RecreationField  = "sourceRecreation"
	RecreationFollow = "Follow"
)
