package main

// Keys to files: how each share's source keys become files (the volume's items and modes), which
// internal/volume composes into the one directory the pod sees. The same code runs at publish, at
// every refresh and on restore, from what the record remembers. A share with a list of keys
// (internal/share/exposure.go) hands projection only the names it exposes: the pod's items pick among those.

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// sharedFiles is the files share i of rec gets from src, the source as sh exposes it: an error
// when the source lacks a listed key, or the pod's items select a key the share does not expose.
func sharedFiles(rec volume.Record, i int, sh share.Spec, src *share.SourceData) (map[string]atomicwriter.File, error) {
	if len(src.Missing) > 0 {
		return nil, &share.MissingSharedKeysError{Share: sh, Keys: src.Missing}
	}
	return projectFiles(src.Files, rec.Items, i, rec.DefaultMode, sh.Exposed)
}

// missingKeysError says which selected keys a source lacks.
type missingKeysError struct{ keys []string }

func (e *missingKeysError) Error() string {
	return fmt.Sprintf("the source has no key %s selected by the volume's items", strings.Join(e.keys, ", "))
}

// notSharedError says that the volume's items select keys the share does not expose. It names
// the entries by position and the keys the share does expose, never a key it does not.
type notSharedError struct {
	entries []int    // 1-based positions in the volume's items
	shared  []string // what the share exposes, sorted
}

func (e *notSharedError) Error() string {
	pos := make([]string, len(e.entries))
	for i, n := range e.entries {
		pos[i] = fmt.Sprint(n)
	}
	return fmt.Sprintf("entry %s of the volume's items selects a key the share does not expose; it exposes only %s (select among those, or ask the share's owner to add the key to its spec.%s)",
		strings.Join(pos, ", "), share.QuoteAll(e.shared), share.ItemsField)
}

// projectFiles selects and names the files share number `share` contributes, from src, the
// source as the share exposes it (shared). Items that name the share select among the exposed
// keys; a share no item names contributes every exposed key under its own name. Keys are
// validated either way before anything is written.
func projectFiles(src map[string][]byte, items []volume.Item, share int, defaultMode os.FileMode, shared share.Exposure) (map[string]atomicwriter.File, error) {
	out := map[string]atomicwriter.File{}
	var mine []volume.Item
	var notShared []int
	for n, it := range items {
		if it.Share == share {
			mine = append(mine, it)
			if _, ok := shared.SourceKeyOf(it.Key); !ok {
				notShared = append(notShared, n+1)
			}
		}
	}
	if len(notShared) > 0 {
		return nil, &notSharedError{entries: notShared, shared: shared.Names()}
	}
	if len(mine) == 0 {
		for k, v := range src {
			if err := atomicwriter.ValidateKey(k); err != nil {
				return nil, err
			}
			out[k] = atomicwriter.File{Data: v, Mode: defaultMode}
		}
		return out, nil
	}
	var missing []string
	for _, it := range mine {
		v, ok := src[it.Key]
		if !ok {
			missing = append(missing, fmt.Sprintf("%q", it.Key))
			continue
		}
		mode := it.Mode
		if mode == 0 {
			mode = defaultMode
		}
		out[it.Path] = atomicwriter.File{Data: v, Mode: mode}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, &missingKeysError{keys: missing}
	}
	return out, nil
}

// keepShared is the files of a share's copy (held, made through the list was) that the list
// now still shares: a file stays when the key it was made from is exposed by now under the same
// name. A file's name is what the volume's items select (KEY of KEY=PATH), or its path.
func keepShared(held map[string]atomicwriter.File, items []volume.Item, share int, was, now share.Exposure) map[string]atomicwriter.File {
	nameOf := map[string]string{} // path -> exposed name, for the share's items
	for _, it := range items {
		if it.Share == share {
			nameOf[it.Path] = it.Key
		}
	}
	kept := make(map[string]atomicwriter.File, len(held))
	for path, f := range held {
		name := path
		if n, ok := nameOf[path]; ok {
			name = n
		} else if len(nameOf) > 0 {
			continue // the items select the share's files: one they do not name is none of its
		}
		if key, ok := was.SourceKeyOf(name); ok && now.Shares(key, name) {
			kept[path] = f
		}
	}
	return kept
}
