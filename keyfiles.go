package main

// Keys to files: how each share's source keys become files (the volume's items and modes), and
// how the shares' files are composed into the one directory the pod sees. The same code runs at
// publish, at every refresh and on restore, from what the record remembers.

import (
	"fmt"
	"iter"
	"os"
	"sort"
	"strings"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// missingKeysError says which selected keys a source lacks.
type missingKeysError struct{ keys []string }

func (e *missingKeysError) Error() string {
	return fmt.Sprintf("the source has no key %s selected by the volume's items", strings.Join(e.keys, ", "))
}

// projectFiles selects and names the files share number `share` contributes. Items that name
// the share select its keys; a share no item names contributes every key under its own name.
// Keys are validated either way before anything is written.
func projectFiles(src map[string][]byte, items []item, share int, defaultMode os.FileMode) (map[string]atomicwriter.File, error) {
	out := map[string]atomicwriter.File{}
	var mine []item
	for _, it := range items {
		if it.Share == share {
			mine = append(mine, it)
		}
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

// pathConflict is one path that two shares both produce.
type pathConflict struct {
	Path          string
	Kept, Dropped shareRef
}

// composeFiles merges the shares' files in the volume's order. A path produced by two shares (or
// a file of one that is a directory of another) goes to the earlier share, as in a projected
// volume the first source listed wins; the conflicts are returned so they can be reported.
func composeFiles(specs []shareRef, perShare []map[string]atomicwriter.File) (map[string]atomicwriter.File, []pathConflict) {
	out := map[string]atomicwriter.File{}
	owner := map[string]int{} // path -> share index, including the directories of each file
	var conflicts []pathConflict
	for i, files := range perShare {
		if files == nil {
			continue // revoked: contributes nothing
		}
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
	next:
		for _, p := range paths {
			// Taken: the path itself (a file or a directory of the earlier share), or any of
			// its parent directories that is a file of an earlier share.
			for q := range pathAndParents(p) {
				if j, taken := owner[q]; taken && j != i && (q == p || isFile(out, q)) {
					conflicts = append(conflicts, pathConflict{Path: p, Kept: specs[j], Dropped: specs[i]})
					continue next
				}
			}
			out[p] = files[p]
			for q := range pathAndParents(p) {
				owner[q] = i
			}
		}
	}
	return out, conflicts
}

func isFile(files map[string]atomicwriter.File, p string) bool {
	_, ok := files[p]
	return ok
}

// pathAndParents yields p, then its parent directories, nearest first.
func pathAndParents(p string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if yield(p) {
			atomicwriter.ParentDirs(p)(yield)
		}
	}
}
