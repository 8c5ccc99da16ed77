package framework

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// renderedObjects parses a multi-document render into objects.
func RenderedObjects(t testing.TB, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("parsing the render: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func FindObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// promtoolBinary is $PROMTOOL or promtool on $PATH.
func PromtoolBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = "promtool"
	}
	path, err := exec.LookPath(p)
	if err != nil {
		t.Fatalf("no promtool (%v): run `make deps` (hack/install-deps.sh installs the Debian package prometheus, which ships it)", err)
	}
	return path
}
