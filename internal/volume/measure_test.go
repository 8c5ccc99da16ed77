package volume

// Specification of what a volume's directory is measured to hold (Dir.Measure): in the
// budget's units, which it charges a volume whose record no longer describes its disk, each entry,
// each long name and link target, and each file's pages once, however many links it has; and what
// the kernel counts of the same entries (an inode each, and the root's; each file's pages once,
// and each long link target's page), against which files removed but kept open are charged.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestMeasureCountsEachFilesPagesOnce(t *testing.T) {
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
	if err := os.Symlink(strings.Repeat("t", shortSymlinkLen), filepath.Join(dir, "e")); err != nil {
		t.Fatal(err)
	}
	m, err := Dir{Path: dir, GID: -1}.Measure()
	if err != nil {
		t.Fatal(err)
	}
	// The root, a, b, c, the long name, d and e: seven entries; a's two pages once and the long
	// name's file's one; the long name Beyond its dentry; c's target, and e's page.
	want := 7*EntryBytes + 3*PageSize + EntryNameBytes(long) + LinkTargetBytes("a") + PageSize
	if m.Held != want {
		t.Errorf("Held = %d, want %d", m.Held, want)
	}
	// Seven inodes, with the attributes of the six inodes (b is a's) where the host labels its
	// files; a's pages once, the long name's page and e's.
	space := int64(7 * InodeSpaceBytes)
	for _, p := range []string{dir, "a", "c", long, "d", "e"} {
		space += xattrSpaceAt(filepath.Join(dir, p))
	}
	space = (space + InodeSpaceBytes - 1) / InodeSpaceBytes * InodeSpaceBytes
	if want := (Usage{PageBytes: 4 * PageSize, InodeSpace: space}); m.Seen != want {
		t.Errorf("Seen = %+v, want %+v", m.Seen, want)
	}
}

// A pod's path may have 4096 bytes (the most the driver accepts), more than a system call takes once the volume's
// own directory is in front of it: the measure never joins paths, so it still counts all of it.
func TestMeasureWalksPathsLongerThanTheKernelTakes(t *testing.T) {
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
	m, err := Dir{Path: dir, GID: -1}.Measure()
	if err != nil {
		t.Fatal(err)
	}
	want := (depth+2)*EntryBytes + (depth+1)*EntryNameBytes(segment) + PageSize // the root, the dirs, the file and its page
	if m.Held != want {
		t.Fatalf("Held = %d, want %d", m.Held, want)
	}
}
