package main

// The two kinds of share, SharedSecret and SharedConfigMap. Everything that differs between them
// is one row of shareKindTable; the rest of the driver asks the row and never switches on the
// kind, so a third kind is one more row here and one in internal/shareapi (what the kind is
// called, which the admin's commands read too), and in the chart its CRD with its row beside it
// (templates/crds.yaml: the chart's RBAC and admission policy take their resources from those).

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// shareGroup is the API group of both share CRDs, and of the `use` verb RBAC grants on them.
const shareGroup = shareapi.Group

// shareKind says which custom resource a volume refers to and which object it copies. Its value
// is the Kind of the source ("Secret", "ConfigMap"); records store it (record.json's "kind"), so
// the values never change.
type shareKind string

const (
	kindSecret    = shareKind(shareapi.KindSecret)
	kindConfigMap = shareKind(shareapi.KindConfigMap)
)

// shareKindInfo is one kind of share.
type shareKindInfo struct {
	kind shareKind
	// typeName is the CRD's Kind, as messages name it.
	typeName string
	// resource is the CRD's resource: in its API path, and what RBAC grants `use` on.
	resource string
	// attribute is the volume attribute that names one share of this kind (OpenShift's).
	attribute string
	// refField is the spec field naming the source: spec.<refField>.{namespace,name}.
	refField string
	// source is the resource of the objects shared: the driver GETs them, and an admin grants
	// it read on them.
	source schema.GroupVersionResource
	// newSource is an empty source object, for a GET's answer to be decoded into; files lists
	// the keys and values of one so decoded.
	newSource func() sourceObject
	files     func(sourceObject) map[string][]byte
}

// sourceObject is a decoded Secret or ConfigMap: an API object with its own protobuf decoder.
type sourceObject interface {
	runtime.Object
	metav1.Object
	protoUnmarshaler
}

// shareKindTable is every kind of share: what each is called (shareapi.Kinds, in its order), and
// how its source is decoded.
var shareKindTable = []shareKindInfo{
	kindRow(shareapi.KindSecret, func() sourceObject { return &corev1.Secret{} }, secretFiles),
	kindRow(shareapi.KindConfigMap, func() sourceObject { return &corev1.ConfigMap{} }, configMapFiles),
}

// kindRow is the row of kind k: its names from shareapi, its decoding from the arguments.
func kindRow(k shareapi.Kind, newSource func() sourceObject, files func(sourceObject) map[string][]byte) shareKindInfo {
	i, _ := k.Info()
	return shareKindInfo{kind: shareKind(k), typeName: i.TypeName, resource: i.Resource, attribute: i.Attribute,
		refField: i.RefField, source: i.Source, newSource: newSource, files: files}
}

// info returns the kind's row; ok is false for a kind that is not in the table (only a corrupt
// record or a bug can hold one: requests and records are checked with known).
func (k shareKind) info() (info shareKindInfo, ok bool) {
	for _, row := range shareKindTable {
		if row.kind == k {
			return row, true
		}
	}
	return shareKindInfo{}, false
}

func (k shareKind) known() bool {
	_, ok := k.info()
	return ok
}

// The kind's facts, one accessor each (the zero value for a kind not in the table).

// shareTypeName is the custom resource's Kind, for messages.
func (k shareKind) shareTypeName() string { i, _ := k.info(); return i.typeName }

// shareResource is the RBAC resource name the `use` verb is checked against.
func (k shareKind) shareResource() string { i, _ := k.info(); return i.resource }

// shareGVR is the resource of the kind's share objects.
func shareGVR(k shareKind) schema.GroupVersionResource {
	return shareapi.ShareGVR(shareapi.Kind(k))
}

// shareRefField is the spec field naming a share's source.
func shareRefField(k shareKind) string { i, _ := k.info(); return i.refField }

// sourceGVR is the resource of the objects a share of kind k points at.
func sourceGVR(k shareKind) schema.GroupVersionResource { i, _ := k.info(); return i.source }

// listName is the kind as the shares attribute writes it (secret/NAME, configmap/NAME).
func (k shareKind) listName() string { return strings.ToLower(string(k)) }

// shareAttributes are the kinds' volume attributes (sharedSecret, sharedConfigMap), in the table's
// order.
func shareAttributes() []string {
	var out []string
	for _, row := range shareKindTable {
		out = append(out, row.attribute)
	}
	return out
}

// sourceKindsText names the kinds of source in the table's order, for messages: "Secret and
// ConfigMap".
func sourceKindsText() string {
	var kinds []string
	for _, row := range shareKindTable {
		kinds = append(kinds, string(row.kind))
	}
	if len(kinds) < 2 {
		return strings.Join(kinds, "")
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
}

// shareListForms are the forms of an entry of the shares attribute: secret/NAME, configmap/NAME.
func shareListForms() []string {
	var out []string
	for _, row := range shareKindTable {
		out = append(out, row.kind.listName()+"/NAME")
	}
	return out
}

// kindOfListName is the kind a shares attribute entry names, or "" for none.
func kindOfListName(s string) shareKind {
	for _, row := range shareKindTable {
		if row.kind.listName() == s {
			return row.kind
		}
	}
	return ""
}

// shareRef names one share: of a volume (its request and its record, where it is stored as
// "kind" and "name"), and in the queues of share events and of share status.
type shareRef struct {
	Kind shareKind `json:"kind"`
	Name string    `json:"name"`
}

// String is the form used in the shares attribute and in messages: secret/NAME, configmap/NAME.
func (s shareRef) String() string { return s.Kind.listName() + "/" + s.Name }

// secretFiles is a Secret's data.
func secretFiles(o sourceObject) map[string][]byte { return o.(*corev1.Secret).Data }

// configMapFiles is a ConfigMap's data and binaryData, both as files (the API server keeps
// their keys apart).
func configMapFiles(o sourceObject) map[string][]byte {
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
