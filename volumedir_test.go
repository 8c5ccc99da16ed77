package main

// Specification of what a volume's directory is measured to hold (volumeDir.heldBytes), which the
// budget charges a volume whose record no longer describes its disk: each entry, each long name
// and link target, and each file's pages once, however many links it has.

import (
	"os"
	"path/filepath"
	"strings"
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
