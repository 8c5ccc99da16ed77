package atomicwriter

// The names of the on-disk layout, and how the writer recognises its own entries: ..data and
// ..data_tmp, the payload dirs, and the top-level links.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

const (
	// dataLink is the link readers go through. Replacing it with one rename is what makes a
	// whole set of files change at once.
	dataLink = "..data"
	// dataTmpLink is where the next ..data is made before it is renamed over ..data; symlink(2)
	// cannot replace an existing name.
	dataTmpLink = "..data_tmp"
	// payloadDirLayout is the time part of a payload dir's name, the format the kubelet uses, so
	// the layout looks familiar to anyone who has looked into a secret volume. The leading ".."
	// keeps it out of the names a payload may use.
	payloadDirLayout = "..2006_01_02_15_04_05."
	// dirPerm lets a pod running as any uid traverse the payload dirs; access control is on the
	// files themselves (mode, group) and on the bind mount.
	dirPerm os.FileMode = 0o755
)

// isPayloadDirName reports whether name looks like a payload dir: "..YYYY_MM_DD_HH_MM_SS."
// followed by at least one digit. It also matches the kubelet's names, which is fine: the format
// is the writer's private namespace.
func isPayloadDirName(name string) bool {
	n := len(payloadDirLayout)
	if len(name) <= n || !strings.HasPrefix(name, "..") || name[n-1] != '.' {
		return false
	}
	if _, err := time.Parse(payloadDirLayout, name[:n]); err != nil {
		return false
	}
	for _, c := range []byte(name[n:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// currentPayloadDir returns the payload dir ..data points at, or "" if there is no ..data yet.
// A ..data that is not a link to a payload dir name is an error: following it could lead
// anywhere.
func currentPayloadDir(root *os.Root) (string, error) {
	target, err := root.Readlink(dataLink)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", dataLink, err)
	}
	if !isPayloadDirName(target) {
		return "", fmt.Errorf("%s points at %q, which is not a timestamped payload dir", dataLink, target)
	}
	return target, nil
}

// topNames returns the sorted distinct first segments of paths: the names that get a top-level
// link.
func topNames(paths []string) []string {
	var tops []string
	for _, p := range paths {
		top, _, _ := strings.Cut(p, "/")
		tops = append(tops, top)
	}
	slices.Sort(tops)
	return slices.Compact(tops)
}

// topLinkTarget is what the top-level link dir/<name> points at. It is also how the writer
// recognises its own links: a link is the writer's iff its target is exactly this for its own
// name.
func topLinkTarget(name string) string {
	return dataLink + "/" + name
}

// TopLinkTarget is what the top-level link for a first path segment name points at, so a caller
// can count what the links it asks for cost.
func TopLinkTarget(name string) string { return topLinkTarget(name) }

// MaxPayloadDirName is the longest name a payload dir gets (and so the longest target of
// ..data): the time part and a random uint32 in decimal.
const MaxPayloadDirName = len(payloadDirLayout) + 10

// checkTopName fails if dir/<name> exists and is anything but the writer's own link:
// overwriting or shadowing it is not the writer's call, and finding out after the swap would
// leave dir half updated.
func checkTopName(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := root.Readlink(name)
		if err != nil {
			return err
		}
		if target == topLinkTarget(name) {
			return nil
		}
	}
	return fmt.Errorf("%q already exists in the volume dir and is not a symlink to %s; not touching it",
		name, topLinkTarget(name))
}
