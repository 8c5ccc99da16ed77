package main

// What a share exposes of its source: spec.items, the share owner's list of keys. It has the
// shape of a ConfigMap or Secret volume's items ([{key, path}]): each entry shares one key of
// the source, under its own name or under path. Without the list a share exposes every key, as
// OpenShift's shares do. With it, the keys outside the list are dropped right after the source
// is decoded (sourceCache.fetch), so they reach no cache, no tmpfs, no file name, no event and
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
)

// sharedItemsField is the spec field holding the list (spec.items).
const sharedItemsField = "items"

// maxSharedItems bounds the list, as the CRD schema does (the CEL rule for unique paths is
// quadratic in it).
const maxSharedItems = 256

// exposedKey is one entry of spec.items: the source's Key, shared as the file name Path.
type exposedKey struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

// exposure is what a share exposes: nil is every key of the source (no spec.items); otherwise
// exactly the listed keys, under their paths, in the list's order.
type exposure []exposedKey

// alsoIn is the entries of e that o shares, in e's order: never nil (a list, possibly empty).
func (e exposure) alsoIn(o exposure) exposure {
	out := exposure{}
	for _, k := range e {
		if o.shares(k.Key, k.Path) {
			out = append(out, k)
		}
	}
	return out
}

// all says whether the share exposes every key (it has no list).
func (e exposure) all() bool { return e == nil }

// names are the file names the share exposes, sorted; nil when it exposes every key.
func (e exposure) names() []string {
	if e.all() {
		return nil
	}
	out := make([]string, len(e))
	for i, k := range e {
		out[i] = k.Path
	}
	sort.Strings(out)
	return out
}

// fingerprint identifies the exposure: "" for every key, else the sorted "key=path" entries.
// Two shares of one source with the same list share a cache entry (fetch.go); keys and paths
// cannot contain "=" or ",", so it is unambiguous.
func (e exposure) fingerprint() string {
	if e.all() {
		return ""
	}
	parts := make([]string, len(e))
	for i, k := range e {
		parts[i] = k.Key + "=" + k.Path
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// same says whether e and o expose the same keys under the same names, in any order.
func (e exposure) same(o exposure) bool {
	return e.all() == o.all() && e.fingerprint() == o.fingerprint()
}

// within says whether e exposes nothing o does not, and each file under the name o gives it: o
// exposes every key and e lists keys under their own names, or each entry e lists (key and name)
// is one o lists. A key renamed is not within: the file a pod reads as "ca.crt" would hold
// another key's bytes (a private key, say, where the application publishes its CA).
func (e exposure) within(o exposure) bool {
	if e.all() {
		return o.all()
	}
	for _, k := range e {
		if !o.shares(k.Key, k.Path) {
			return false
		}
	}
	return true
}

// shares says whether the exposure shares the source's key under name.
func (e exposure) shares(key, name string) bool {
	if e.all() {
		return key == name
	}
	for _, k := range e {
		if k.Key == key && k.Path == name {
			return true
		}
	}
	return false
}

// sourceKeyOf is the source key the exposed file name comes from.
func (e exposure) sourceKeyOf(name string) (string, bool) {
	if e.all() {
		return name, true
	}
	for _, k := range e {
		if k.Path == name {
			return k.Key, true
		}
	}
	return "", false
}

// filter is what the share exposes of files (a decoded source): the listed keys under their
// paths; missing are the listed keys files lacks, sorted. Every other key is dropped here: the
// result holds no byte, and no name, of a key the share does not expose. The map returned is new
// (a share's view never aliases another's), but the values are the decoded ones, not copies.
func (e exposure) filter(files map[string][]byte) (out map[string][]byte, missing []string) {
	if e.all() {
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

// parseExposure reads spec.items as the informer decoded it (JSON: a list of objects). present is
// false when the field is absent (every key). Any deviation from the CRD schema's rules is an
// error, never "every key": a share whose list cannot be read exposes nothing.
func parseExposure(raw any, present bool) (exposure, error) {
	if !present {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("spec.%s is not a list", sharedItemsField)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("spec.%s is empty: list at least one key, or remove the field to share every key", sharedItemsField)
	}
	if len(list) > maxSharedItems {
		return nil, fmt.Errorf("spec.%s has %d entries, at most %d allowed", sharedItemsField, len(list), maxSharedItems)
	}
	out := make(exposure, 0, len(list))
	keys, paths := map[string]bool{}, map[string]bool{}
	for i, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("spec.%s[%d] is not an object with key and path", sharedItemsField, i)
		}
		for f := range m {
			if f != "key" && f != "path" {
				return nil, fmt.Errorf("spec.%s[%d] has the unknown field %q (only key and path)", sharedItemsField, i, f)
			}
		}
		key, ok := m["key"].(string)
		if !ok {
			return nil, fmt.Errorf("spec.%s[%d].key is required and must be a string", sharedItemsField, i)
		}
		path := key
		if p, present := m["path"]; present {
			if path, ok = p.(string); !ok {
				return nil, fmt.Errorf("spec.%s[%d].path must be a string", sharedItemsField, i)
			}
		}
		if err := validateExposedKey(key, path); err != nil {
			return nil, fmt.Errorf("spec.%s[%d]: %w", sharedItemsField, i, err)
		}
		if keys[key] {
			return nil, fmt.Errorf("spec.%s[%d]: key %q is listed twice", sharedItemsField, i, key)
		}
		if paths[path] {
			return nil, fmt.Errorf("spec.%s[%d]: path %q is used twice", sharedItemsField, i, path)
		}
		keys[key], paths[path] = true, true
		out = append(out, exposedKey{Key: key, Path: path})
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

// listGrowth is what a share's list of keys, changed from old to now (an edit of its spec.items),
// adds to its volume's record, in the heap and on disk (exposureBytes); 0 when it does not grow.
func listGrowth(old, now exposure) int64 {
	if old.same(now) {
		return 0
	}
	return max(0, exposureBytes(now)-exposureBytes(old))
}
