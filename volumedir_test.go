package main

// Specification of what a volume's directory is measured to hold (volumeDir.heldBytes), which the
// budget charges a volume whose record no longer describes its disk: each entry, each long name
// and link target, and each file's pages once, however many links it has.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestHeldBytesCountEachFilesPagesOnce(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("n", 40)
	for _, step := range []error{
		os.WriteFile(filepath.Join(dir, "a"), make([]byte, 5000), 0o600), // two pages
		os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b")),        // the same pages again
		os.Symlink("a", filepath.Join(dir, "c")),
		os.WriteFile(filepath.Join(dir, long), []byte("x"), 0o600),
		os.Mkdir(filepath.Join(dir, "d"), 0o700),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	got, err := volumeDir{dir: dir, gid: -1}.heldBytes()
	if err != nil {
		t.Fatal(err)
	}
	// The root, a, b, c, the long name and d: six entries; a's two pages once and the long
	// name's file's one; the long name beyond its dentry; c's target.
	want := 6*entryBytes + 3*pageSize + entryNameBytes(long) + linkTargetBytes("a")
	if got != want {
		t.Fatalf("heldBytes = %d, want %d", got, want)
	}
}

// A pod's path may have 4096 bytes (validate.go), more than a system call takes once the volume's
// own directory is in front of it: the measure never joins paths, so it still counts all of it.
func TestHeldBytesMeasurePathsLongerThanTheKernelTakes(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// As long as a pod's path may be: 16 segments of 255 bytes (maxPathDepth, NAME_MAX), 4095
	// bytes, the last one a file.
	segment := strings.Repeat("s", 255)
	const depth = 15
	p := segment
	for i := range depth {
		if i > 0 {
			p += "/" + segment
		}
		if err := root.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f := p + "/" + segment
	if err := root.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("lstat of the file's absolute path (%d bytes): %v; want ENAMETOOLONG, which the measure must not meet", len(filepath.Join(dir, f)), err)
	}
	got, err := volumeDir{dir: dir, gid: -1}.heldBytes()
	if err != nil {
		t.Fatal(err)
	}
	want := (depth+2)*entryBytes + (depth+1)*entryNameBytes(segment) + pageSize // the root, the dirs, the file and its page
	if got != want {
		t.Fatalf("heldBytes = %d, want %d", got, want)
	}
}
