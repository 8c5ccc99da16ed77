//go:build root

package atomicwriter

// Specifies Writer.Origins: files are hard-linked from an origin dir only when the origin's
// file is exactly what would be written, and linking never changes what a reader sees. The
// tests run on a tmpfs, as the driver's volumes do, and need root to mount it.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func linkFiles() map[string]File {
	return map[string]File{
		"ca.crt":       {Data: bytes.Repeat([]byte("C"), 3000), Mode: 0o644},
		"keys/tls.key": {Data: []byte("KEY"), Mode: 0o440},
	}
}

// sameInode says whether dir1/p and dir2/p (each through its ..data) are the same inode.
func sameInode(t *testing.T, dir1, dir2, p string) bool {
	t.Helper()
	a, err := os.Stat(filepath.Join(dir1, "..data", p))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(filepath.Join(dir2, "..data", p))
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(a, b)
}

// linkedView mounts a tmpfs and writes linkFiles to an origin dir and, linked from it, to a view
// dir (GID -1), with the writer w that wrote the view.
func linkedView(t *testing.T) (origin, view string, w Writer, files map[string]File) {
	t.Helper()
	dir := mountTmpfs(t, 1<<20)
	origin, view = filepath.Join(dir, "shares", "0"), filepath.Join(dir, "data")
	files = linkFiles()
	mustWrite(t, origin, -1, files)
	w = Writer{Dir: view, GID: -1, Origins: map[string]string{"ca.crt": origin, "keys/tls.key": origin}}
	if err := w.Write(files); err != nil {
		t.Fatal(err)
	}
	return origin, view, w, files
}

// updateOrigin gives the origin's ca.crt other bytes.
func updateOrigin(t *testing.T, origin string) {
	t.Helper()
	updated := linkFiles()
	updated["ca.crt"] = File{Data: []byte("NEW CA"), Mode: 0o644}
	mustWrite(t, origin, -1, updated)
}

// requireNotPublishedAgain writes files with w once more and fails if that swapped ..data: the
// dir already holds them as w would write them.
func requireNotPublishedAgain(t *testing.T, w Writer, files map[string]File, what string) {
	t.Helper()
	before, err := os.Readlink(filepath.Join(w.Dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(files); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(w.Dir, "..data")); after != before {
		t.Fatalf("%s was published again (..data %s, then %s)", what, before, after)
	}
}

// The view links the files of the origin: same inodes, one copy of the bytes in the tmpfs, and
// exactly the files, modes and owners a plain write would give.
func TestLinkIdenticalFiles(t *testing.T) {
	dir := mountTmpfs(t, 1<<20)
	origin, view := filepath.Join(dir, "shares", "0"), filepath.Join(dir, "data")
	files := linkFiles()
	const gid = 4321
	mustWrite(t, origin, gid, files)
	w := Writer{Dir: view, GID: gid, Origins: map[string]string{"ca.crt": origin, "keys/tls.key": origin}}
	if err := w.Write(files); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, view, files, gid)
	for p := range files {
		if !sameInode(t, origin, view, p) {
			t.Errorf("%s was written, not linked from the origin", p)
		}
	}
}

// Updating the origin never changes what the view shows: Write makes new inodes for an update,
// so the view keeps the old bytes until it is itself swapped.
func TestLinkViewUnchangedByOriginUpdate(t *testing.T) {
	origin, view, _, files := linkedView(t)
	updateOrigin(t, origin)
	checkLayout(t, view, files, -1)
	mustWrite(t, origin, -1, nil) // a revoked share's origin is emptied
	checkLayout(t, view, files, -1)
}

// A view holds its bytes once even when its origin was rewritten to other bytes and then back to
// the view's (a view that could not be written in between): the same payload is published again,
// linked. A view already linked is not published again.
func TestLinkAgainWhenTheOriginComesBackToTheViewsBytes(t *testing.T) {
	origin, view, w, files := linkedView(t)
	updateOrigin(t, origin)
	mustWrite(t, origin, -1, files) // the same bytes as the view's, in new inodes
	if sameInode(t, origin, view, "ca.crt") {
		t.Fatal("the origin's rewrite kept its inode; the test needs a new one")
	}
	if err := w.Write(files); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, view, files, -1)
	for p := range files {
		if !sameInode(t, origin, view, p) {
			t.Errorf("%s is held twice: the view's copy was kept, not linked from the origin", p)
		}
	}
	requireNotPublishedAgain(t, w, files, "a view already linked from its origin")
}

// Whatever the origin holds, the view gets exactly the files asked for: an origin file that
// differs in mode, size or owner, one that is missing, or a missing origin dir make Write write
// the file instead; and the same payload written again is not published again for it.
func TestLinkWritesWhenOriginDiffers(t *testing.T) {
	files := linkFiles()
	for name, tc := range map[string]struct {
		origin map[string]File
		gid    int
	}{
		"other mode":   {map[string]File{"ca.crt": {Data: files["ca.crt"].Data, Mode: 0o600}}, -1},
		"other size":   {map[string]File{"ca.crt": {Data: []byte("short"), Mode: 0o644}}, -1},
		"other owner":  {map[string]File{"ca.crt": files["ca.crt"]}, 1000},
		"missing file": {map[string]File{"other": files["ca.crt"]}, -1},
		"missing dir":  {nil, -1},
	} {
		t.Run(name, func(t *testing.T) {
			dir := mountTmpfs(t, 1<<20)
			origin, view := filepath.Join(dir, "shares", "0"), filepath.Join(dir, "data")
			if tc.origin != nil {
				mustWrite(t, origin, tc.gid, tc.origin)
			}
			if err := (Writer{Dir: view, GID: -1, Origins: map[string]string{"ca.crt": origin}}).Write(files); err != nil {
				t.Fatal(err)
			}
			checkLayout(t, view, files, -1)
			if tc.origin != nil && tc.origin["ca.crt"].Data != nil && sameInode(t, origin, view, "ca.crt") {
				t.Fatal("linked an origin file that differs from the file asked for")
			}
			requireNotPublishedAgain(t, Writer{Dir: view, GID: -1, Origins: map[string]string{"ca.crt": origin}}, files,
				"a view whose origin cannot be linked")
		})
	}
}
