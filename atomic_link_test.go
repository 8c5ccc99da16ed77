package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func linkTestFiles() map[string]volumeFile {
	return map[string]volumeFile{
		"ca.crt":       {Data: bytes.Repeat([]byte("C"), 3000), Mode: 0o644},
		"keys/tls.key": {Data: []byte("KEY"), Mode: 0o440},
	}
}

// linkTestSame says whether dir1/p and dir2/p (each through its ..data) are the same inode.
func linkTestSame(t *testing.T, dir1, dir2, p string) bool {
	t.Helper()
	a, err := os.Stat(filepath.Join(dir1, atomicDataDirName, p))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(filepath.Join(dir2, atomicDataDirName, p))
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(a, b)
}

func linkTestCheck(t *testing.T, dir string, want map[string]volumeFile, gid int) {
	t.Helper()
	got, err := readVolumeFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, func(a, b volumeFile) bool { return a.Mode == b.Mode && bytes.Equal(a.Data, b.Data) }) {
		t.Fatalf("%s holds %v, want %v", dir, got, want)
	}
	for p := range want {
		fi, err := os.Stat(filepath.Join(dir, atomicDataDirName, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); gid >= 0 && (st.Uid != 0 || st.Gid != uint32(gid)) {
			t.Fatalf("%s is owned by %d:%d, want 0:%d", p, st.Uid, st.Gid, gid)
		}
	}
}

// The pod's view links the files of a share's copy: same inodes, one copy of the bytes in the
// tmpfs, and exactly the files, modes and owners a plain write would give.
func TestWriteVolumeFromLinksIdenticalFiles(t *testing.T) {
	dir := tmpfsTestMount(t, 1<<20)
	origin, view := filepath.Join(dir, "shares", "0"), filepath.Join(dir, "data")
	files := linkTestFiles()
	const gid = 4321
	if err := writeVolume(origin, files, gid); err != nil {
		t.Fatal(err)
	}
	if err := writeVolumeFrom(view, files, gid, map[string]string{"ca.crt": origin, "keys/tls.key": origin}); err != nil {
		t.Fatal(err)
	}
	linkTestCheck(t, view, files, gid)
	for p := range files {
		if !linkTestSame(t, origin, view, p) {
			t.Errorf("%s was written, not linked from the share's copy", p)
		}
	}
}

// Updating the copy never changes what the view shows: the writer makes new inodes for an
// update, so the view keeps the old bytes until it is itself swapped.
func TestWriteVolumeFromViewUnchangedByCopyUpdate(t *testing.T) {
	dir := tmpfsTestMount(t, 1<<20)
	origin, view := filepath.Join(dir, "shares", "0"), filepath.Join(dir, "data")
	files := linkTestFiles()
	if err := writeVolume(origin, files, -1); err != nil {
		t.Fatal(err)
	}
	if err := writeVolumeFrom(view, files, -1, map[string]string{"ca.crt": origin, "keys/tls.key": origin}); err != nil {
		t.Fatal(err)
	}
	updated := linkTestFiles()
	updated["ca.crt"] = volumeFile{Data: []byte("NEW CA"), Mode: 0o644}
	if err := writeVolume(origin, updated, -1); err != nil {
		t.Fatal(err)
	}
	linkTestCheck(t, view, files, -1)
	if err := writeVolume(origin, nil, -1); err != nil { // a revoked share's copy is emptied
		t.Fatal(err)
	}
	linkTestCheck(t, view, files, -1)
}

// Whatever the origin holds, the view gets exactly the files asked for: an origin file that
// differs in mode, size or owner, one that is missing, or a missing origin dir make the writer
// write the file instead.
func TestWriteVolumeFromWritesWhenOriginDiffers(t *testing.T) {
	files := linkTestFiles()
	for name, tc := range map[string]struct {
		origin map[string]volumeFile
		gid    int
	}{
		"other mode":   {map[string]volumeFile{"ca.crt": {Data: files["ca.crt"].Data, Mode: 0o600}}, -1},
		"other size":   {map[string]volumeFile{"ca.crt": {Data: []byte("short"), Mode: 0o644}}, -1},
		"other owner":  {map[string]volumeFile{"ca.crt": files["ca.crt"]}, 1000},
		"missing file": {map[string]volumeFile{"other": files["ca.crt"]}, -1},
		"missing dir":  {nil, -1},
	} {
		t.Run(name, func(t *testing.T) {
			dir := tmpfsTestMount(t, 1<<20)
			origin, view := filepath.Join(dir, "shares", "0"), filepath.Join(dir, "data")
			if tc.origin != nil {
				if err := writeVolume(origin, tc.origin, tc.gid); err != nil {
					t.Fatal(err)
				}
			}
			if err := writeVolumeFrom(view, files, -1, map[string]string{"ca.crt": origin}); err != nil {
				t.Fatal(err)
			}
			linkTestCheck(t, view, files, -1)
			if tc.origin != nil && tc.origin["ca.crt"].Data != nil && linkTestSame(t, origin, view, "ca.crt") {
				t.Fatal("linked an origin file that differs from the file asked for")
			}
		})
	}
}
