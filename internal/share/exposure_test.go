package share

// Specification of a share's list of keys (exposure.go): which spec.items the driver accepts
// (the CRD schema's rules, restated; the schema itself is tested against the API server in
// test/e2e/pods/keys_test.go), and the filter that leaves nothing of an unlisted key: no
// name, no byte. FuzzExposureFilter checks both against the API server's own key rule
// (k8s.io/apimachinery's IsConfigMapKey), which shares no code with the driver's.

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

func entry(key string, path ...string) map[string]any {
	m := map[string]any{"key": key}
	if len(path) > 0 {
		m["path"] = path[0]
	}
	return m
}

func list(entries ...map[string]any) []any {
	out := make([]any, len(entries))
	for i, e := range entries {
		out[i] = e
	}
	return out
}

// No spec.items: every key, as with OpenShift's shares.
func TestShareWithoutItemsExposesEveryKey(t *testing.T) {
	e, err := ParseExposure(nil, false)
	if err != nil || !e.All() || e.Names() != nil || e.Fingerprint() != "" {
		t.Fatalf("absent list: %v, %v; want every key", e, err)
	}
	files := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	got, missing := e.Filter(files)
	if !maps.EqualFunc(got, files, bytes.Equal) || missing != nil {
		t.Errorf("filter of every key: %v, missing %v", got, missing)
	}
}

// Entries name a key and, optionally, the file name it is exposed as (default: the key).
func TestShareItemsAccepted(t *testing.T) {
	e, err := ParseExposure(list(entry("ca.crt", "ca.pem"), entry("tls.crt"), entry(".hidden", "x_Y-1")), true)
	if err != nil {
		t.Fatal(err)
	}
	want := Exposure{{"ca.crt", "ca.pem"}, {"tls.crt", "tls.crt"}, {".hidden", "x_Y-1"}}
	if !slices.Equal(e, want) {
		t.Fatalf("got %v, want %v", e, want)
	}
	if n := e.Names(); !slices.Equal(n, []string{"ca.pem", "tls.crt", "x_Y-1"}) {
		t.Errorf("names %v", n)
	}
	// The fingerprint ignores order: the same list, reordered, is the same cache entry.
	re, _ := ParseExposure(list(entry("tls.crt"), entry(".hidden", "x_Y-1"), entry("ca.crt", "ca.pem")), true)
	if re.Fingerprint() != e.Fingerprint() || e.Fingerprint() != ".hidden=x_Y-1,ca.crt=ca.pem,tls.crt=tls.crt" {
		t.Errorf("fingerprints %q and %q", e.Fingerprint(), re.Fingerprint())
	}
}

// Every list the CRD schema refuses, the driver refuses too (a share stored past the schema must
// not expose every key), with a message naming the entry.
func TestShareItemsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  any
		msg  string
	}{
		{"empty", []any{}, "spec.items is empty"},
		{"not a list", "ca.crt", "not a list"},
		{"entry not an object", []any{"ca.crt"}, "spec.items[0] is not an object"},
		{"no key", list(map[string]any{"path": "x"}), "spec.items[0].key is required"},
		{"key not a string", list(map[string]any{"key": 3}), "spec.items[0].key is required"},
		{"path not a string", list(map[string]any{"key": "a", "path": true}), "spec.items[0].path must be a string"},
		{"unknown field", list(map[string]any{"key": "a", "mode": int64(0o400)}), `unknown field "mode"`},
		{"empty key", list(entry("")), "spec.items[0]: key: invalid key"},
		{"key escapes", list(entry("../x")), "spec.items[0]: key: invalid key"},
		{"reserved key", list(entry("..data")), "reserved"},
		{"dot key", list(entry(".")), `must not be "."`},
		{"path with a directory", list(entry("a", "certs/a")), "a path here is one file name"},
		{"absolute path", list(entry("a", "/etc/a")), "spec.items[0]: path"},
		{"long key", list(entry(strings.Repeat("k", 254))), "at most 253"},
		{"key twice", list(entry("a", "x"), entry("a", "y")), `spec.items[1]: key "a" is listed twice`},
		{"path twice", list(entry("a", "x"), entry("b", "x")), `spec.items[1]: path "x" is used twice`},
		{"path is another's default", list(entry("a"), entry("b", "a")), `path "a" is used twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := ParseExposure(tc.raw, true)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, %v; want an error containing %q", e, err, tc.msg)
			}
		})
	}
	many := make([]any, MaxItems+1)
	for i := range many {
		many[i] = entry(fmt.Sprint("k", i))
	}
	if _, err := ParseExposure(many, true); err == nil || !strings.Contains(err.Error(), "at most 256") {
		t.Errorf("%d entries: %v", len(many), err)
	}
	if _, err := ParseExposure(many[:MaxItems], true); err != nil {
		t.Errorf("%d entries: %v", MaxItems, err)
	}
}

// A share object with a bad list is a bad share (InvalidShare, FailedPrecondition at mount),
// never one that exposes every key.
func TestShareObjectWithBadItemsIsInvalid(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "corp-ca"},
		"spec": map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "tls"},
			"items": list(entry("ca.crt"), entry("ca.crt"))},
	}}
	_, err := FromObject(KindSecret, u)
	var bad *BadError
	if err == nil || !errors.As(err, &bad) || !strings.Contains(err.Error(), `SharedSecret "corp-ca": spec.items[1]`) {
		t.Fatalf("got %v", err)
	}
	if err := unstructured.SetNestedSlice(u.Object, list(entry("ca.crt", "ca.pem")), "spec", "items"); err != nil {
		t.Fatal(err)
	}
	sh, err := FromObject(KindSecret, u)
	if err != nil || !slices.Equal(sh.Exposed, Exposure{{"ca.crt", "ca.pem"}}) {
		t.Fatalf("got %+v, %v", sh, err)
	}
}

// The filter keeps the listed keys under their paths and says which listed keys are missing;
// nothing of another key survives it, not even its name.
func TestExposureFilterKeepsOnlyListedKeys(t *testing.T) {
	e := Exposure{{"ca.crt", "ca.pem"}, {"absent", "absent"}}
	src := map[string][]byte{"ca.crt": []byte("CERT"), "tls.crt": []byte("LEAF"), "tls.key": []byte("PRIVATE")}
	got, missing := e.Filter(src)
	if !maps.EqualFunc(got, map[string][]byte{"ca.pem": []byte("CERT")}, bytes.Equal) {
		t.Errorf("filtered: %v", got)
	}
	if !slices.Equal(missing, []string{"absent"}) {
		t.Errorf("missing: %v", missing)
	}
	if len(src) != 3 {
		t.Errorf("the decoded source was changed: %v", src)
	}
}

// Fuzzed: ParseExposure accepts a one-entry list exactly when the API server's key rule accepts
// both the key and the path, and the filter's output, for any source, holds exactly the listed
// keys present (under their paths) and no byte of any other key.
func FuzzExposureFilter(f *testing.F) {
	f.Add("ca.crt", "ca.pem", "tls.key", "a\nb")
	f.Add("..data", "x", "y", "")
	f.Add("a/b", "a", "c", "z")
	f.Add(".", ".x", "..", "")
	f.Add("k", "", "k2", "v")
	f.Fuzz(func(t *testing.T, key, path, other, value string) {
		raw := list(entry(key, path))
		e, err := ParseExposure(raw, true)
		apiOK := len(validation.IsConfigMapKey(key)) == 0 && len(validation.IsConfigMapKey(path)) == 0
		if (err == nil) != apiOK {
			t.Fatalf("key %q path %q: driver says %v, the API server's rule says valid=%v", key, path, err, apiOK)
		}
		if err != nil {
			return
		}
		marker := "\x00unshared:" + value
		src := map[string][]byte{key: []byte("shared")}
		if other != key {
			src[other] = []byte(marker)
		}
		got, missing := e.Filter(src)
		if len(missing) != 0 || len(got) != 1 || string(got[path]) != "shared" {
			t.Fatalf("filter of %v through %v: %v, missing %v", src, e, got, missing)
		}
		for name, v := range got {
			if name == other && other != path || bytes.Contains(v, []byte(marker)) {
				t.Fatalf("the unshared key %q survived the filter: %v", other, got)
			}
		}
		delete(src, key)
		if got, missing := e.Filter(src); len(got) != 0 || !slices.Equal(missing, []string{key}) {
			t.Fatalf("without the listed key: %v, missing %v", got, missing)
		}
	})
}
