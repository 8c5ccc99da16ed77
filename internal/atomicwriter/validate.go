package atomicwriter

// What a payload may contain: the rules for keys, paths, modes and the gid, checked before
// anything is written (step 1).

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
)

const (
	// maxKeyLen matches the API server's limit for Secret and ConfigMap keys.
	maxKeyLen = 253
	// maxPathLen and maxPathDepth bound a nested file path. The depth bound also bounds the
	// recursion of the scan of a payload dir that was tampered with. (16 segments of at most 253
	// bytes stay below the length bound, which is checked first only because it is cheaper than
	// splitting a huge string.)
	maxPathLen   = 4096
	maxPathDepth = 16
	// maxGID is the largest gid chown(2) takes as a gid: (gid_t)-1 means "leave unchanged",
	// which would silently not apply the group.
	maxGID = math.MaxUint32 - 1
)

// ValidateKey checks one file name taken from a Secret or ConfigMap key. The character set is
// the API server's own rule for keys, so any key the API accepted passes; the check still runs
// because the writer must not trust that (a key like "../x" would escape the volume). Keys
// starting with ".." are reserved for the writer's ..data link and payload dirs. Errors quote
// the key.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return errors.New("invalid key \"\": must not be empty")
	case len(key) > maxKeyLen:
		return fmt.Errorf("invalid key %q: %d bytes, at most %d allowed", key, len(key), maxKeyLen)
	case key == ".":
		return fmt.Errorf("invalid key %q: must not be \".\"", key)
	case strings.HasPrefix(key, ".."):
		return fmt.Errorf("invalid key %q: must not start with \"..\" (reserved for the writer's own entries)", key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '-' || c == '.' || c == '_' ||
			('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			continue
		}
		return fmt.Errorf("invalid key %q: byte %d (%q) is not one of [-._a-zA-Z0-9]", key, i, c)
	}
	return nil
}

// ValidatePath checks a file path relative to the volume dir: 1 to 4096 bytes, at most 16
// segments separated by single "/", each segment a valid key (ValidateKey). That excludes
// absolute paths, empty, "." and ".." segments, segments starting with ".." (so no path reaches
// ..data or a payload dir), and backslashes. Errors quote the path.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errors.New("invalid path \"\": must not be empty")
	case len(p) > maxPathLen:
		return fmt.Errorf("invalid path %q: %d bytes, at most %d allowed", p, len(p), maxPathLen)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("invalid path %q: must be relative to the volume, not start with \"/\"", p)
	}
	segs := strings.Split(p, "/")
	if len(segs) > maxPathDepth {
		return fmt.Errorf("invalid path %q: %d segments, at most %d allowed", p, len(segs), maxPathDepth)
	}
	for i, s := range segs {
		if s == "" {
			return fmt.Errorf("invalid path %q: segment %d is empty (doubled or trailing \"/\")", p, i+1)
		}
		if err := ValidateKey(s); err != nil {
			return fmt.Errorf("invalid path %q: segment %d: %w", p, i+1, err)
		}
	}
	return nil
}

// ParentDirs yields the directories a payload path implies, nearest first: "a/b/c" yields "a/b",
// then "a"; a path of one segment yields nothing. It is the one walk over a path's parents that
// the payload rules (a file cannot also be the directory of another) and their callers share.
func ParentDirs(p string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
			if !yield(p[:i]) {
				return
			}
		}
	}
}

// validatePayload checks everything about a payload that can be checked without looking at the
// disk, and returns its paths sorted: with several problems the error is the same every time,
// and files are written in a stable order.
func validatePayload(files map[string]File, gid int) ([]string, error) {
	if int64(gid) > maxGID {
		return nil, fmt.Errorf("gid %d out of range (at most %d)", gid, int64(maxGID))
	}
	paths := slices.Sorted(maps.Keys(files))
	for _, p := range paths {
		if err := ValidatePath(p); err != nil {
			return nil, err
		}
		if m := files[p].Mode; m&^os.ModePerm != 0 {
			return nil, fmt.Errorf("path %q: mode %v has bits other than permissions (0777)", p, m)
		}
	}
	// A path cannot be a file and the directory of another file at once. (The first path in
	// sorted order with a file among its parents has exactly one: a second, deeper one would be a
	// path sorted before it with a file parent.)
	for _, p := range paths {
		for dir := range ParentDirs(p) {
			if _, ok := files[dir]; ok {
				return nil, fmt.Errorf("path %q conflicts with path %q: it would have to be both a file and a directory", dir, p)
			}
		}
	}
	return paths, nil
}
