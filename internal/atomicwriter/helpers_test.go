package atomicwriter

// Helpers of the writer's tests. They look at the disk with plain os calls, never through the
// code under test (except that payloadDirs knows a payload dir by isPayloadDirName, and that
// checkLayout's last check is that ReadFiles agrees).

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/shared-resource/csi-driver/internal/treesnap"
)

// fileOf is a File literal shortcut for tables.
func fileOf(data string, mode os.FileMode) File {
	return File{Data: []byte(data), Mode: mode}
}

// sameFiles reports whether two sets hold the same paths, bytes and modes.
func sameFiles(a, b map[string]File) bool {
	return maps.EqualFunc(a, b, func(x, y File) bool {
		return x.Mode == y.Mode && bytes.Equal(x.Data, y.Data)
	})
}

// describe lists a set's paths, modes and sizes (never its bytes) for failure messages.
func describe(files map[string]File) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(files)) {
		parts = append(parts, fmt.Sprintf("%s(%v,%d bytes)", p, files[p].Mode, len(files[p].Data)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// abbrev keeps failure messages readable when contents are large.
func abbrev(b []byte) string {
	if len(b) <= 64 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q...(%d bytes)", b[:64], len(b))
}

// payloadDirs lists the payload dirs in dir.
func payloadDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if isPayloadDirName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// snapshot describes every entry under dir, with modification times (treesnap.Take).
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap, err := treesnap.Take(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// ownerOf returns the owner of path (not following a final symlink).
func ownerOf(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// checkLayout asserts that dir is exactly the writer's layout for files written with gid (nil
// files: the empty set, a revoked volume), the one check of a written dir that every test and
// fuzz target of the writer makes:
//   - one payload dir, and ..data pointing at it;
//   - at the top, ..data, the payload dir and one link "<seg> -> ..data/<seg>" per first path
//     segment, and nothing else;
//   - in the payload dir, exactly the files (with their modes) and the dirs between them (mode
//     0755), all owned by 0:gid (gid >= 0) or by the test's euid:egid (gid < 0);
//   - every file read through its top-level link, as a pod reads it, with its bytes and mode;
//   - no link anywhere under dir absolute, dangling or leading out of dir;
//   - and ReadFiles agreeing.
func checkLayout(t *testing.T, dir string, files map[string]File, gid int) {
	t.Helper()
	ts := payloadDirs(t, dir)
	if len(ts) != 1 {
		t.Fatalf("want exactly one payload dir, got %q", ts)
	}
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err != nil || target != ts[0] {
		t.Fatalf("..data -> %q (%v), want the only payload dir %q", target, err, ts[0])
	}
	wantUID, wantGID := uint32(os.Geteuid()), uint32(os.Getegid())
	if gid >= 0 {
		wantUID, wantGID = 0, uint32(gid)
	}

	tops := map[string]bool{}
	wantDirs := map[string]bool{".": true}
	for p := range files {
		segs := strings.Split(p, "/")
		tops[segs[0]] = true
		for i := 1; i < len(segs); i++ {
			wantDirs[strings.Join(segs[:i], "/")] = true
		}
	}
	want := []string{"..data", ts[0]}
	for top := range tops {
		want = append(want, top)
	}
	slices.Sort(want)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, e := range entries {
		top = append(top, e.Name())
	}
	if !slices.Equal(top, want) {
		t.Fatalf("top level of dir = %q, want %q", top, want)
	}
	for name := range tops {
		if link, err := os.Readlink(filepath.Join(dir, name)); err != nil || link != "..data/"+name {
			t.Fatalf("top-level %q -> %q (%v), want ..data/%s", name, link, err, name)
		}
	}

	payload := filepath.Join(dir, ts[0])
	gotFiles, gotDirs := map[string]bool{}, map[string]bool{}
	err = filepath.WalkDir(payload, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(payload, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if uid, g := ownerOf(t, p); uid != wantUID || g != wantGID {
			t.Errorf("%s in the payload dir is owned by %d:%d, want %d:%d", rel, uid, g, wantUID, wantGID)
		}
		switch {
		case d.IsDir():
			gotDirs[rel] = true
			if info.Mode() != fs.ModeDir|0o755 {
				t.Errorf("payload dir %s has mode %v, want drwxr-xr-x", rel, info.Mode())
			}
		case d.Type().IsRegular():
			gotFiles[rel] = true
			f, ok := files[rel]
			if !ok {
				t.Errorf("payload dir holds %s, which is not in the payload", rel)
			} else if info.Mode() != f.Mode {
				t.Errorf("file %s has mode %v, want %v", rel, info.Mode(), f.Mode)
			}
		default:
			t.Errorf("payload dir holds %s of type %v", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(gotDirs, wantDirs) {
		t.Errorf("payload dirs %q, want %q", slices.Sorted(maps.Keys(gotDirs)), slices.Sorted(maps.Keys(wantDirs)))
	}
	if len(gotFiles) != len(files) {
		t.Errorf("payload dir holds %d files, want %d", len(gotFiles), len(files))
	}
	for p, f := range files {
		// Through the top-level link, as a pod reads it.
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("read %s through its top-level link: %v", p, err)
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("%s = %s, want %s", p, abbrev(got), abbrev(f.Data))
		}
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != f.Mode {
			t.Errorf("%s resolves to mode %v, want regular %v", p, fi.Mode(), f.Mode)
		}
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		link, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if filepath.IsAbs(link) {
			t.Errorf("%s is an absolute link to %q: it would resolve differently in the pod", p, link)
		} else if to, err := filepath.EvalSymlinks(p); err != nil {
			t.Errorf("%s -> %q dangles: %v", p, link, err)
		} else if !strings.HasPrefix(to, resolved+"/") {
			t.Errorf("%s -> %q resolves to %s, outside %s", p, link, to, resolved)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFiles(dir)
	if err != nil {
		t.Fatalf("ReadFiles: %v", err)
	}
	if !sameFiles(got, files) {
		t.Fatalf("ReadFiles = %s, want %s", describe(got), describe(files))
	}
	if t.Failed() {
		t.FailNow()
	}
}
