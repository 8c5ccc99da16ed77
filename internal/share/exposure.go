package share

// What a share exposes of its source: spec.items, the share owner's list of keys. It has the
// shape of a ConfigMap or Secret volume's items ([{key, path}]): each entry shares one key of
// the source, under its own name or under path. Without the list a share exposes every key, as
// OpenShift's shares do. With it, the keys outside the list are dropped right after the source
// is decoded (the root's sourceCache.fetch), so they reach no cache, no tmpfs, no file name, no event and
// no log; a pod's own items then pick among the names the share exposes.
//
// path is a file name, not a path with directories: the names a share exposes are the keys a
// pod's items select (KEY[=PATH], where KEY has no "/"), so they follow the key rules; where
// the files go in the volume stays the pod's choice.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ItemsField is the spec field holding the list (spec.items).
const ItemsField = "items"

// MaxItems bounds the list, as the CRD schema does (the CEL rule for unique paths is
// quadratic in it).
const MaxItems = 256

// ExposedKey is one entry of spec.items: the source's Key, shared as the file name Path.
type ExposedKey struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

// Exposure is what a share exposes: nil is every key of the source (no spec.items); otherwise
// exactly the listed keys, under their paths, in the list's order.
type Exposure []ExposedKey

// AlsoIn is the entries of e that o shares, in e's order: never nil (a list, possibly empty).
func (e Exposure) AlsoIn(o Exposure) Exposure {
	out := Exposure{}
	for _, k := range e {
		if o.Shares(k.Key, k.Path) {
			out = append(out, k)
		}
	}
	return out
}

// All says whether the share exposes every key (it has no list).
func (e Exposure) All() bool { return e == nil }

// Names are the file names the share exposes, sorted; nil when it exposes every key.
func (e Exposure) Names() []string {
	if e.All() {
		return nil
	}
	out := make([]string, len(e))
	for i, k := range e {
		out[i] = k.Path
	}
	sort.Strings(out)
	return out
}

// Fingerprint identifies the exposure: "" for every key, else the sorted "key=path" entries.
// Two shares of one source with the same list share a cache entry (the root's fetch.go); keys and paths
// cannot contain "=" or ",", so it is unambiguous.
func (e Exposure) Fingerprint() string {
	if e.All() {
		return ""
	}
	parts := make([]string, len(e))
	for i, k := range e {
		parts[i] = k.Key + "=" + k.Path
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Same says whether e and o expose the same keys under the same names, in any order.
func (e Exposure) Same(o Exposure) bool {
	return e.All() == o.All() && e.Fingerprint() == o.Fingerprint()
}

// Within says whether e exposes nothing o does not, and each file under the name o gives it: o
// exposes every key and e lists keys under their own names, or each entry e lists (key and name)
// is one o lists. A key renamed is not within: the file a pod reads as "ca.crt" would hold
// another key's bytes (a private key, say, where the application publishes its CA).
func (e Exposure) Within(o Exposure) bool {
	if e.All() {
		return o.All()
	}
	for _, k := range e {
		if !o.Shares(k.Key, k.Path) {
			return false
		}
	}
	return true
}

// Shares says whether the exposure shares the source's key under name.
func (e Exposure) Shares(key, name string) bool {
	if e.All() {
		return key == name
	}
	for _, k := range e {
		if k.Key == key && k.Path == name {
			return true
		}
	}
	return false
}

// SourceKeyOf is the source key the exposed file name comes from.
func (e Exposure) SourceKeyOf(name string) (string, bool) {
	if e.All() {
		return name, true
	}
	for _, k := range e {
		if k.Path == name {
			return k.Key, true
		}
	}
	return "", false
}

// Filter is what the share exposes of files (a decoded source): the listed keys under their
// paths; missing are the listed keys files lacks, sorted. Every other key is dropped here: the
// result holds no byte, and no name, of a key the share does not expose. The map returned is new
// (a share's view never aliases another's), but the values are the decoded ones, not copies.
func (e Exposure) Filter(files map[string][]byte) (out map[string][]byte, missing []string) {
	if e.All() {
		return files, nil
	}
	out = make(map[string][]byte, len(e))
	for _, k := range e {
		v, ok := files[k.Key]
		if !ok {
			missing = append(missing, k.Key)
			continue
		}
		out[k.Path] = v
	}
	sort.Strings(missing)
	return out, missing
}

// ParseExposure reads spec.items as the informer decoded it (JSON: a list of objects). present is
// false when the field is absent (every key). Any deviation from the CRD schema's rules is an
// error, never "every key": a share whose list cannot be read exposes nothing.
func ParseExposure(raw any, present bool) (Exposure, error) {
	if !present {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("spec.%s is not a list", ItemsField)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("spec.%s is empty: list at least one key, or remove the field to share every key", ItemsField)
	}
	if len(list) > MaxItems {
		return nil, fmt.Errorf("spec.%s has %d entries, at most %d allowed", ItemsField, len(list), MaxItems)
	}
	out := make(Exposure, 0, len(list))
	keys, paths := map[string]bool{}, map[string]bool{}
	for i, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("spec.%s[%d] is not an object with key and path", ItemsField, i)
		}
		for f := range m {
			if f != "key" && f != "path" {
				return nil, fmt.Errorf("spec.%s[%d] has the unknown field %q (only key and path)", ItemsField, i, f)
			}
		}
		key, ok := m["key"].(string)
		if !ok {
			return nil, fmt.Errorf("spec.%s[%d].key is required and must be a string", ItemsField, i)
		}
		path := key
		if p, present := m["path"]; present {
			if path, ok = p.(string); !ok {
				return nil, fmt.Errorf("spec.%s[%d].path must be a string", ItemsField, i)
			}
		}
		if err := validateExposedKey(key, path); err != nil {
			return nil, fmt.Errorf("spec.%s[%d]: %w", ItemsField, i, err)
		}
		if keys[key] {
			return nil, fmt.Errorf("spec.%s[%d]: key %q is listed twice", ItemsField, i, key)
		}
		if paths[path] {
			return nil, fmt.Errorf("spec.%s[%d]: path %q is used twice", ItemsField, i, path)
		}
		keys[key], paths[path] = true, true
		out = append(out, ExposedKey{Key: key, Path: path})
	}
	return out, nil
}

// validateExposedKey applies the writer's key rule to both: the key must be one the API server
// accepts in a Secret or ConfigMap, and the path one file name (see the top of this file).
func validateExposedKey(key, path string) error {
	if err := atomicwriter.ValidateKey(key); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if err := atomicwriter.ValidateKey(path); err != nil {
		return fmt.Errorf("path: %w (a path here is one file name: the pod's items place it in directories)", err)
	}
	return nil
}

// ExposedNames is status.exposedKeys for the share u: the names its list exposes, or nil (the
// field absent) for a share without a list, or one that cannot be read.
func ExposedNames(k Kind, u *unstructured.Unstructured) []string {
	sh, err := FromObject(k, u)
	if err != nil {
		return nil
	}
	return sh.Exposed.Names()
}

// MissingSharedKeysError says which keys a share lists that its source lacks.
type MissingSharedKeysError struct {
	Share Spec
	Keys  []string
}

func (e *MissingSharedKeysError) Error() string {
	return fmt.Sprintf("%s %s/%s has no key %s, which %s %q lists in spec.%s: add it to the %s, or remove it from the share's list",
		e.Share.Kind, e.Share.SourceNamespace, e.Share.SourceName, QuoteAll(e.Keys), e.Share.Kind.TypeName(), e.Share.Name, ItemsField, e.Share.Kind)
}

// QuoteAll is names quoted and comma-separated, for messages.
func QuoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
