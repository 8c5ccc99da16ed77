package share

// The two kinds of share, SharedSecret and SharedConfigMap. Everything that differs between them
// is one row of the table kinds (which importers read through AllKinds); the rest of the driver
// asks the row and never switches on the kind, so a third kind is one more row here and one in
// internal/shareapi (what the kind is called, which the admin's commands read too), and in the
// chart its CRD with its row beside it (templates/crds.yaml: the chart's RBAC and admission
// policy take their resources from those).

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// Group is the API group of both share CRDs, and of the `use` verb RBAC grants on them.
const Group = shareapi.Group

// Kind says which custom resource a volume refers to and which object it copies. Its value
// is the Kind of the source ("Secret", "ConfigMap"); records store it (record.json's "kind"), so
// the values never change.
type Kind string

// The two kinds: a SharedSecret shares a Secret, a SharedConfigMap a ConfigMap.
const (
	KindSecret    = Kind(shareapi.KindSecret)
	KindConfigMap = Kind(shareapi.KindConfigMap)
)

// KindInfo is one kind of share.
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
	// Source is the resource of the objects shared: the driver GETs them, and an admin grants
	// it read on them.
	Source schema.GroupVersionResource
	// NewSource is an empty source object, for a GET's answer to be decoded into; Files lists
	// the keys and values of one so decoded.
	NewSource func() SourceObject
	Files     func(SourceObject) map[string][]byte
}

// SourceObject is a decoded Secret or ConfigMap: an API object with its own protobuf decoder.
type SourceObject interface {
	runtime.Object
	metav1.Object
	ProtoUnmarshaler
}

// ProtoUnmarshaler is a generated API type's protobuf decoder.
type ProtoUnmarshaler interface{ Unmarshal([]byte) error }

// kinds is every kind of share: what each is called (shareapi.AllKinds, in its order), and
// how its source is decoded.
var kinds = []KindInfo{
	kindRow(shareapi.KindSecret, func() SourceObject { return &corev1.Secret{} }, secretFiles),
	kindRow(shareapi.KindConfigMap, func() SourceObject { return &corev1.ConfigMap{} }, configMapFiles),
}

// AllKinds returns every kind of share, in the table's order: a copy, which the caller may keep
// or change without changing the table.
func AllKinds() []KindInfo { return slices.Clone(kinds) }

// kindRow is the row of kind k: its names from shareapi, its decoding from the arguments.
func kindRow(k shareapi.Kind, newSource func() SourceObject, files func(SourceObject) map[string][]byte) KindInfo {
	i, _ := k.Info()
	return KindInfo{Kind: Kind(k), TypeName: i.TypeName, Resource: i.Resource, Attribute: i.Attribute,
		RefField: i.RefField, Source: i.Source, NewSource: newSource, Files: files}
}

// Info returns the kind's row; ok is false for a kind that is not in the table (only a corrupt
// record or a bug can hold one: requests and records are checked with Known).
func (k Kind) Info() (info KindInfo, ok bool) {
	for _, row := range kinds {
		if row.Kind == k {
			return row, true
		}
	}
	return KindInfo{}, false
}

// Known says whether the kind is in the table.
func (k Kind) Known() bool {
	_, ok := k.Info()
	return ok
}

// The kind's facts, one accessor each (the zero value for a kind not in the table).

// TypeName is the custom resource's Kind, for messages.
func (k Kind) TypeName() string { i, _ := k.Info(); return i.TypeName }

// Resource is the RBAC resource name the `use` verb is checked against.
func (k Kind) Resource() string { i, _ := k.Info(); return i.Resource }

// GVR is the resource of the kind's share objects.
func GVR(k Kind) schema.GroupVersionResource {
	return shareapi.ShareGVR(shareapi.Kind(k))
}

// RefField is the spec field naming a share's source.
func RefField(k Kind) string { i, _ := k.Info(); return i.RefField }

// SourceGVR is the resource of the objects a share of kind k points at.
func SourceGVR(k Kind) schema.GroupVersionResource { i, _ := k.Info(); return i.Source }

// ListName is the kind as the shares attribute writes it (secret/NAME, configmap/NAME).
func (k Kind) ListName() string { return strings.ToLower(string(k)) }

// Attributes are the kinds' volume attributes (sharedSecret, sharedConfigMap), in the table's
// order.
func Attributes() []string {
	var out []string
	for _, row := range kinds {
		out = append(out, row.Attribute)
	}
	return out
}

// SourceKindsText names the kinds of source in the table's order, for messages: "Secret and
// ConfigMap".
func SourceKindsText() string {
	var names []string
	for _, row := range kinds {
		names = append(names, string(row.Kind))
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// ListForms are the forms of an entry of the shares attribute: secret/NAME, configmap/NAME.
func ListForms() []string {
	var out []string
	for _, row := range kinds {
		out = append(out, row.Kind.ListName()+"/NAME")
	}
	return out
}

// KindOfListName is the kind a shares attribute entry names, or "" for none.
func KindOfListName(s string) Kind {
	for _, row := range kinds {
		if row.Kind.ListName() == s {
			return row.Kind
		}
	}
	return ""
}

// Ref names one share: of a volume (its request and its record, where it is stored as
// "kind" and "name"), and in the queues of share events and of share status.
type Ref struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
}

// String is the form used in the shares attribute and in messages: secret/NAME, configmap/NAME.
func (s Ref) String() string { return s.Kind.ListName() + "/" + s.Name }

// secretFiles is a Secret's data.
func secretFiles(o SourceObject) map[string][]byte { return o.(*corev1.Secret).Data }

// configMapFiles is a ConfigMap's data and binaryData, both as files (the API server keeps
// their keys apart).
func configMapFiles(o SourceObject) map[string][]byte {
	cm := o.(*corev1.ConfigMap)
	files := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		files[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		files[k] = v
	}
	return files
}
