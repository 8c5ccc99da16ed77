// Package treesnap describes a directory tree entry by entry, and the difference between two
// descriptions. The tests use it to prove that an operation left a tree exactly as it was: that
// the driver touched nothing it did not create, and that a refused write changed nothing.
// Nothing in the driver's binary imports it.
package treesnap

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Take describes every entry under root by its path relative to root: type and permission
// bits, owner, a symlink's target, a regular file's size and SHA-256. withTimes adds each
// entry's modification time, so that an entry created and removed again inside a directory
// shows as a change of that directory. A missing root is described as "absent"; an entry that
// cannot be read is described by its error (the tree may be changing under the walk).
func Take(root string, withTimes bool) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err != nil {
			if p == root && os.IsNotExist(err) {
				out[rel] = "absent"
				return nil
			}
			out[rel] = "error: " + err.Error()
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			out[rel] = "error: " + err.Error()
			return nil
		}
		desc := fi.Mode().String()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			desc += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			desc += " -> " + link
			if err != nil {
				desc += " error: " + err.Error()
			}
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			desc += fmt.Sprintf(" %d bytes sha256 %x", fi.Size(), sha256.Sum256(b))
			if err != nil {
				desc += " error: " + err.Error()
			}
		}
		if withTimes {
			desc += " mtime " + fi.ModTime().Format(time.RFC3339Nano)
		}
		out[rel] = desc
		return nil
	})
	return out, err
}

// Diff lists the entries that differ, one per line, sorted; "" means the same tree.
func Diff(before, after map[string]string) string {
	var lines []string
	for k, b := range before {
		if a, ok := after[k]; !ok {
			lines = append(lines, fmt.Sprintf("removed %s (%s)", k, b))
		} else if a != b {
			lines = append(lines, fmt.Sprintf("changed %s: %s => %s", k, b, a))
		}
	}
	for k, a := range after {
		if _, ok := before[k]; !ok {
			lines = append(lines, fmt.Sprintf("added %s (%s)", k, a))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
