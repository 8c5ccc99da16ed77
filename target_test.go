package main

// Specification of checkTarget's fast path (target.go): for every shape a target path can have
// under the kubelet's root, checkTargetFast either answers exactly as the segment walk does or
// leaves the answer to the walk (walkTarget); it never vouches for a path with a symlink, a FIFO or a file.

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCheckTargetFastAgreesWithTheWalkOrDefers(t *testing.T) {
	root := t.TempDir()
	d := &driver{kubeletRoot: root}
	vol := filepath.Join(root, "pods", "uid", "volumes", "kubernetes.io~csi")
	mkdir := func(p string) {
		if err := os.MkdirAll(filepath.Join(vol, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("exists/mount")
	mkdir("absent")
	mkdir("real/mount")
	mkdir("linktarget")
	mkdir("fifo")
	mkdir("file")
	mkdir("dangling")
	for _, err := range []error{
		os.Symlink(filepath.Join(vol, "real"), filepath.Join(vol, "linkparent")),
		os.Symlink("/tmp", filepath.Join(vol, "linktarget", "mount")),
		syscall.Mkfifo(filepath.Join(vol, "fifo", "mount"), 0o644),
		os.WriteFile(filepath.Join(vol, "file", "mount"), nil, 0o644),
		os.Symlink("/nonexistent", filepath.Join(vol, "dangling", "mount")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name       string
		wantFast   bool // the fast path decides
		wantExists bool
	}{
		{"exists", true, true},
		{"absent", true, false},
		{"linkparent", false, false},    // a symlink among the parents
		{"linktarget", false, false},    // the target itself a symlink
		{"fifo", false, false},          // not a directory
		{"file", false, false},          // not a directory
		{"dangling", false, false},      // a dangling symlink
		{"missingparent", false, false}, // the kubelet creates the parent
	} {
		target := filepath.Join(vol, c.name, "mount")
		exists, ok := checkTargetFast(d.kubeletRoot, target)
		walkExists, walkErr := walkTarget(d.kubeletRoot, target)
		if ok != c.wantFast {
			t.Errorf("%s: fast path decided=%v, want %v", c.name, ok, c.wantFast)
		}
		if ok && (walkErr != nil || exists != walkExists || exists != c.wantExists) {
			t.Errorf("%s: fast path says exists=%v, the walk (%v, %v), want %v", c.name, exists, walkExists, walkErr, c.wantExists)
		}
		if !ok && c.name != "missingparent" && walkErr == nil {
			t.Errorf("%s: the walk accepted a target the fast path refused to vouch for", c.name)
		}
	}
}
