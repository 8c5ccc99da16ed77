package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"
)

// atomicTestTsDirs lists the timestamped payload dirs in dir.
func atomicTestTsDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if atomicIsTsDirName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// atomicTestSnapshot describes everything in dir (recursively, without
// following symlinks) so "unchanged" can be asserted exactly.
func atomicTestSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(data)
		}
		snap[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// atomicTestCheckLayout asserts dir is exactly the writer's layout for files:
// one timestamped dir holding the files with mode, ..data pointing at it, one
// key symlink per key, and nothing else.
func atomicTestCheckLayout(t *testing.T, dir string, files map[string][]byte, mode os.FileMode) {
	t.Helper()
	ts := atomicTestTsDirs(t, dir)
	if len(ts) != 1 {
		t.Fatalf("want exactly one timestamped dir, got %q", ts)
	}
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	if target != ts[0] {
		t.Fatalf("..data -> %q, want the only timestamped dir %q", target, ts[0])
	}
	if fi, err := os.Stat(filepath.Join(dir, ts[0])); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("timestamped dir: %v, err %v; want mode 0755", fi, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	for _, e := range entries {
		top = append(top, e.Name())
	}
	want := []string{"..data", ts[0]}
	for k := range files {
		want = append(want, k)
	}
	slices.Sort(want)
	slices.Sort(top)
	if !slices.Equal(top, want) {
		t.Fatalf("top level of dir = %q, want %q", top, want)
	}
	inner, err := os.ReadDir(filepath.Join(dir, ts[0]))
	if err != nil {
		t.Fatal(err)
	}
	if len(inner) != len(files) {
		t.Fatalf("timestamped dir has %d entries, want %d", len(inner), len(files))
	}
	for k, v := range files {
		link, err := os.Readlink(filepath.Join(dir, k))
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if link != "..data/"+k {
			t.Fatalf("key %q -> %q, want ..data/%s", k, link, k)
		}
		got, err := os.ReadFile(filepath.Join(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, v) {
			t.Fatalf("key %q = %s, want %s", k, atomicTestAbbrev(got), atomicTestAbbrev(v))
		}
		fi, err := os.Stat(filepath.Join(dir, k))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
			t.Fatalf("key %q resolves to mode %v, want regular %v", k, fi.Mode(), mode)
		}
	}
}

// atomicTestAbbrev keeps failure messages readable when contents are large.
func atomicTestAbbrev(b []byte) string {
	if len(b) <= 64 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q...(%d bytes)", b[:64], len(b))
}

func TestValidateKey(t *testing.T) {
	good := []string{
		"ca.crt", "tls.key", "tls.crt", "a-b_c.d", ".dockerconfigjson", "a",
		"A.B-C_D.0123456789", ".hidden", "a..b", "x.", strings.Repeat("k", 253),
	}
	for _, k := range good {
		if err := validateKey(k); err != nil {
			t.Errorf("validateKey(%q) = %v, want nil", k, err)
		}
	}
	bad := []string{
		"", ".", "..", "..data", "..2026_11_21_10_20_30.1", "...", "..x",
		"a/b", "/abs", "../etc", "a\x00b", " ", "a b", "tab\t", "nl\n", `back\slash`,
		"ümlaut", "a:b", "a*", strings.Repeat("k", 254),
	}
	for _, k := range bad {
		err := validateKey(k)
		if err == nil {
			t.Errorf("validateKey(%q) = nil, want an error", k)
			continue
		}
		// The message must name the key, quoted, so an operator can find it.
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", k)) {
			t.Errorf("validateKey(%q) error %q does not quote the key", k, err)
		}
	}
}

func TestAtomicWriteLayoutAndUpdate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol") // also checks dir creation
	v1 := map[string][]byte{
		"ca.crt":  []byte("CA-1"),
		"tls.crt": []byte("CERT-1"),
		"tls.key": []byte("KEY-1"),
	}
	if err := writeAtomic(dir, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("created dir: %v, err %v; want mode 0755", fi, err)
	}
	atomicTestCheckLayout(t, dir, v1, 0o644)
	first := atomicTestTsDirs(t, dir)[0]

	// Changed (tls.crt), added (extra.pem), removed (tls.key), unchanged (ca.crt).
	v2 := map[string][]byte{
		"ca.crt":    []byte("CA-1"),
		"tls.crt":   []byte("CERT-2"),
		"extra.pem": []byte("EXTRA-2"),
	}
	if err := writeAtomic(dir, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	atomicTestCheckLayout(t, dir, v2, 0o644)
	if _, err := os.Lstat(filepath.Join(dir, "tls.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("symlink of removed key still there (err %v)", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, first)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old timestamped dir %s still there (err %v)", first, err)
	}

	got, err := readCurrent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, v2, bytes.Equal) {
		t.Fatalf("readCurrent = %q, want %q", got, v2)
	}
}

func TestAtomicReadCurrentRoundTrip(t *testing.T) {
	src := t.TempDir()
	want := map[string][]byte{
		".dockerconfigjson": []byte(`{"auths":{}}`),
		"empty":             {},
		"binary":            {0, 1, 2, 255, '\n'},
	}
	if err := writeAtomic(src, want, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readCurrent(src)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("readCurrent = %q, want %q", got, want)
	}
	// Move aside and back, the way the driver uses it.
	dst := filepath.Join(t.TempDir(), "moved")
	if err := writeAtomic(dst, got, 0o600); err != nil {
		t.Fatal(err)
	}
	atomicTestCheckLayout(t, dst, want, 0o600)
}

func TestAtomicReadCurrentWithoutData(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		got, err := readCurrent(dir)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("readCurrent(%s) = %v, %v; want an empty non-nil map", dir, got, err)
		}
	}
}

func TestAtomicReadCurrentRefusesForeignDataLink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := readCurrent(dir); err == nil {
		t.Fatal("readCurrent followed a ..data pointing outside dir")
	}
	if err := writeAtomic(dir, map[string][]byte{"a": []byte("x")}, 0o644); err == nil {
		t.Fatal("writeAtomic accepted a ..data pointing outside dir")
	}
}

func TestAtomicWriteEmptyMeansRevoked(t *testing.T) {
	dir := t.TempDir()
	if err := writeAtomic(dir, map[string][]byte{"a": []byte("1"), "b": []byte("2")}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, files := range []map[string][]byte{{}, nil} {
		if err := writeAtomic(dir, files, 0o644); err != nil {
			t.Fatal(err)
		}
		atomicTestCheckLayout(t, dir, nil, 0o644)
		inner, err := os.ReadDir(filepath.Join(dir, "..data"))
		if err != nil || len(inner) != 0 {
			t.Fatalf("..data resolves to %v (err %v), want an empty dir", inner, err)
		}
		got, err := readCurrent(dir)
		if err != nil || len(got) != 0 {
			t.Fatalf("readCurrent after revoke = %q, %v", got, err)
		}
	}
}

func TestAtomicWriteInvalidKeyLeavesDirUnchanged(t *testing.T) {
	dir := t.TempDir()
	old := map[string][]byte{"ca.crt": []byte("CA")}
	if err := writeAtomic(dir, old, 0o644); err != nil {
		t.Fatal(err)
	}
	before := atomicTestSnapshot(t, dir)
	for _, bad := range []string{"../escape", "..data", "a/../b", "a//b", "/abs", ""} {
		files := map[string][]byte{"ok.crt": []byte("new"), bad: []byte("SECRET-BYTES")}
		err := writeAtomic(dir, files, 0o644)
		if err == nil {
			t.Fatalf("writeAtomic with key %q succeeded", bad)
		}
		if strings.Contains(err.Error(), "SECRET-BYTES") {
			t.Fatalf("error leaks file data: %v", err)
		}
		if after := atomicTestSnapshot(t, dir); !maps.Equal(before, after) {
			t.Fatalf("key %q: dir changed:\nbefore %q\nafter  %q", bad, before, after)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "escape")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a file was written outside dir")
	}
}

func TestAtomicWriteFileMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o600, 0o440, 0o400, 0o666, 0o777} {
		dir := t.TempDir()
		files := map[string][]byte{"k": []byte("v")}
		if err := writeAtomic(dir, files, mode); err != nil {
			t.Fatal(err)
		}
		atomicTestCheckLayout(t, dir, files, mode)
	}
	// A mode change alone is a change and must be published.
	dir := t.TempDir()
	files := map[string][]byte{"k": []byte("v")}
	if err := writeAtomic(dir, files, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(dir, files, 0o400); err != nil {
		t.Fatal(err)
	}
	atomicTestCheckLayout(t, dir, files, 0o400)

	if err := writeAtomic(t.TempDir(), files, os.ModeSetuid|0o755); err == nil {
		t.Fatal("writeAtomic accepted a setuid mode")
	}
}

func TestAtomicWriteSkipsIdenticalPayload(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	if err := writeAtomic(dir, files, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := atomicTestTsDirs(t, dir)
	if err := writeAtomic(dir, maps.Clone(files), 0o644); err != nil {
		t.Fatal(err)
	}
	if again := atomicTestTsDirs(t, dir); !slices.Equal(ts, again) {
		t.Fatalf("identical payload was republished: %q -> %q", ts, again)
	}
	// Even when skipping, a missing key symlink is repaired.
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(dir, files, 0o644); err != nil {
		t.Fatal(err)
	}
	atomicTestCheckLayout(t, dir, files, 0o644)
}

func TestAtomicWriteCollectsLeftoversAndSparesForeignEntries(t *testing.T) {
	dir := t.TempDir()
	if err := writeAtomic(dir, map[string][]byte{"a": []byte("1")}, 0o644); err != nil {
		t.Fatal(err)
	}
	// Leftovers of an interrupted write: a timestamped dir and ..data_tmp.
	stale := "..2001_02_03_04_05_06.42"
	if err := os.Mkdir(filepath.Join(dir, stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stale, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	// Things the writer did not make: it must leave them alone.
	outside := t.TempDir()
	foreign := map[string]string{
		"notes.txt": "", // regular file
		"link":      outside,
		"rel":       "..data/elsewhere-but-not-my-name",
		"..other":   "",
	}
	for name, target := range foreign {
		p := filepath.Join(dir, name)
		var err error
		if target == "" {
			err = os.WriteFile(p, []byte("foreign"), 0o644)
		} else {
			err = os.Symlink(target, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := writeAtomic(dir, map[string][]byte{"b": []byte("2")}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{stale, "..data_tmp", "a"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s should have been removed (err %v)", gone, err)
		}
	}
	for name := range foreign {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("foreign entry %s was touched: %v", name, err)
		}
	}
	if len(atomicTestTsDirs(t, dir)) != 1 {
		t.Errorf("timestamped dirs: %q, want one", atomicTestTsDirs(t, dir))
	}

	// A key whose name is taken by a foreign entry is refused up front.
	before := atomicTestSnapshot(t, dir)
	if err := writeAtomic(dir, map[string][]byte{"notes.txt": []byte("x")}, 0o644); err == nil {
		t.Fatal("writeAtomic overwrote a foreign regular file")
	}
	if after := atomicTestSnapshot(t, dir); !maps.Equal(before, after) {
		t.Fatalf("refused write changed dir:\nbefore %q\nafter  %q", before, after)
	}
}

// atomicTestPayload is the content of key in iteration i of set ("A" or "B").
// The header lets a reader tell which write a file came from; the padding and
// trailer make a truncated or partially written file detectable.
func atomicTestPayload(set string, i int, key string) []byte {
	head := fmt.Sprintf("%s-%d-%s|", set, i, key)
	return []byte(head + strings.Repeat(set, 16<<10) + "|END")
}

// atomicTestParsePayload checks that data is a complete payload for key and
// returns its "set-i" generation.
func atomicTestParsePayload(key string, data []byte) (string, error) {
	head, _, ok := strings.Cut(string(data), "|")
	if !ok {
		return "", fmt.Errorf("key %s: no header in %d bytes", key, len(data))
	}
	parts := strings.SplitN(head, "-", 3)
	if len(parts) != 3 || parts[2] != key {
		return "", fmt.Errorf("key %s: bad header %q", key, head)
	}
	var i int
	if _, err := fmt.Sscanf(parts[1], "%d", &i); err != nil {
		return "", fmt.Errorf("key %s: bad header %q", key, head)
	}
	if !bytes.Equal(data, atomicTestPayload(parts[0], i, key)) {
		return "", fmt.Errorf("key %s: incomplete or corrupt content (%d bytes, header %q)", key, len(data), head)
	}
	return parts[0] + "-" + parts[1], nil
}

func TestAtomicWriteReadersNeverSeeMix(t *testing.T) {
	dir := t.TempDir()
	keys := []string{"ca.crt", "tls.crt", "tls.key", "token"}
	payload := func(i int) map[string][]byte {
		set := "A"
		if i%2 == 1 {
			set = "B"
		}
		m := map[string][]byte{}
		for _, k := range keys {
			m[k] = atomicTestPayload(set, i, k)
		}
		return m
	}
	if err := writeAtomic(dir, payload(0), 0o644); err != nil {
		t.Fatal(err)
	}

	var (
		done                    = make(chan struct{})
		wg                      sync.WaitGroup
		failed                  atomic.Bool
		passes, torn, linkReads atomic.Int64
		linkVanished            atomic.Int64
		seenMu                  sync.Mutex
		seen                    = map[string]bool{}
	)
	fail := func(format string, args ...any) {
		t.Helper()
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}

	// Reader 1: resolve ..data once per pass and read every key relative to
	// that directory. This is the kubelet's guarantee: one resolution of ..data
	// sees one complete set. ..data itself must never be missing (the swap is
	// a rename). ENOENT inside the resolved dir is legitimate only once the
	// writer has moved ..data away from it and deleted it; then the pass is
	// discarded, which is what a careful reader does.
	wg.Go(func() {
		// goneOrFail decides whether ENOENT in payload dir ts is the
		// legitimate "old dir was removed" case.
		goneOrFail := func(ts string, err error) bool {
			now, lerr := os.Readlink(filepath.Join(dir, "..data"))
			if lerr != nil || now == ts {
				fail("ENOENT in the live payload dir %s (..data -> %q, %v): %v", ts, now, lerr, err)
				return false
			}
			torn.Add(1)
			return true
		}
		for {
			select {
			case <-done:
				return
			default:
			}
			ts, err := os.Readlink(filepath.Join(dir, "..data"))
			if err != nil {
				fail("..data unreadable during swaps: %v", err)
				return
			}
			r, err := os.OpenRoot(filepath.Join(dir, ts))
			if errors.Is(err, fs.ErrNotExist) {
				if goneOrFail(ts, err) {
					continue
				}
				return
			}
			if err != nil {
				fail("open %s: %v", ts, err)
				return
			}
			gens := map[string]bool{}
			ok := true
			for _, k := range keys {
				data, err := r.ReadFile(k)
				if errors.Is(err, fs.ErrNotExist) {
					ok = false
					if !goneOrFail(ts, err) {
						r.Close()
						return
					}
					break
				}
				if err != nil {
					fail("read %s/%s: %v", ts, k, err)
					r.Close()
					return
				}
				gen, err := atomicTestParsePayload(k, data)
				if err != nil {
					fail("via ..data: %v", err)
					r.Close()
					return
				}
				gens[gen] = true
			}
			r.Close()
			if !ok {
				continue
			}
			if len(gens) > 1 {
				fail("one resolution of ..data saw a mix of sets: %v", slices.Sorted(maps.Keys(gens)))
				return
			}
			passes.Add(1)
			seenMu.Lock()
			for g := range gens {
				seen[g[:1]] = true
			}
			seenMu.Unlock()
		}
	})
	// Reader 2: open every key through its top-level symlink, as a pod does.
	// Consecutive keys may legitimately come from different sets, but each
	// file read must be complete. ENOENT can happen only in the instant after
	// the symlink walk entered an old dir that is then deleted; it is counted,
	// never a partial read.
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, k := range keys {
				data, err := os.ReadFile(filepath.Join(dir, k))
				if errors.Is(err, fs.ErrNotExist) {
					// Legitimate only if the key's own symlink is still
					// there: every key is in both sets, so it never goes.
					if _, lerr := os.Lstat(filepath.Join(dir, k)); lerr != nil {
						fail("key symlink %s vanished during swaps: %v", k, lerr)
						return
					}
					linkVanished.Add(1)
					continue
				}
				if err != nil {
					fail("read %s: %v", k, err)
					return
				}
				if _, err := atomicTestParsePayload(k, data); err != nil {
					fail("via symlink: %v", err)
					return
				}
				linkReads.Add(1)
			}
		}
	})

	const swaps = 300
	for i := 1; i <= swaps && !failed.Load(); i++ {
		if err := writeAtomic(dir, payload(i), 0o644); err != nil {
			fail("write %d: %v", i, err)
		}
	}
	close(done)
	wg.Wait()

	t.Logf("%d swaps; ..data passes: %d complete, %d discarded; symlink reads: %d ok, %d ENOENT",
		swaps, passes.Load(), torn.Load(), linkReads.Load(), linkVanished.Load())
	if failed.Load() {
		return
	}
	if passes.Load() == 0 || linkReads.Load() == 0 {
		t.Fatal("readers made no progress; the test proved nothing")
	}
	atomicTestCheckLayout(t, dir, payload(swaps), 0o644)
	seenMu.Lock()
	defer seenMu.Unlock()
	if !seen["A"] || !seen["B"] {
		t.Logf("note: reader 1 only saw sets %v", slices.Sorted(maps.Keys(seen)))
	}
}

// volumeTestFile is a volumeFile literal shortcut for tables.
func volumeTestFile(data string, mode os.FileMode) volumeFile {
	return volumeFile{Data: []byte(data), Mode: mode}
}

// volumeTestEqual reports whether two volumes hold the same paths, bytes and modes.
func volumeTestEqual(a, b map[string]volumeFile) bool {
	return maps.EqualFunc(a, b, func(x, y volumeFile) bool {
		return x.Mode == y.Mode && bytes.Equal(x.Data, y.Data)
	})
}

// volumeTestDescribe lists a volume's paths and modes (never its bytes) for failure messages.
func volumeTestDescribe(files map[string]volumeFile) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(files)) {
		parts = append(parts, fmt.Sprintf("%s(%v,%d bytes)", p, files[p].Mode, len(files[p].Data)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// volumeTestOwner returns the owner of path (not following a final symlink).
func volumeTestOwner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// volumeTestCheckLayout asserts, without using the code under test to look, that dir is
// exactly the writer's nested layout for files written with gid: one timestamped dir that
// ..data points at, holding exactly the files (with their modes) and the dirs between them
// (mode 0755), all owned by 0:gid (gid >= 0) or by the test's euid:egid (gid < 0); one
// top-level link per first segment, "<seg> -> ..data/<seg>", and nothing else at the top; every
// file readable through the top-level link with its mode; and readVolumeFiles agreeing.
func volumeTestCheckLayout(t *testing.T, dir string, files map[string]volumeFile, gid int) {
	t.Helper()
	ts := atomicTestTsDirs(t, dir)
	if len(ts) != 1 {
		t.Fatalf("want exactly one timestamped dir, got %q", ts)
	}
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err != nil || target != ts[0] {
		t.Fatalf("..data -> %q (%v), want the only timestamped dir %q", target, err, ts[0])
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

	tsDir := filepath.Join(dir, ts[0])
	gotFiles, gotDirs := map[string]bool{}, map[string]bool{}
	err = filepath.WalkDir(tsDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tsDir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if uid, g := volumeTestOwner(t, p); uid != wantUID || g != wantGID {
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
			t.Errorf("%s = %s, want %s", p, atomicTestAbbrev(got), atomicTestAbbrev(f.Data))
		}
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != f.Mode {
			t.Errorf("%s resolves to mode %v, want regular %v", p, fi.Mode(), f.Mode)
		}
	}
	got, err := readVolumeFiles(dir)
	if err != nil {
		t.Fatalf("readVolumeFiles: %v", err)
	}
	if !volumeTestEqual(got, files) {
		t.Fatalf("readVolumeFiles = %s, want %s", volumeTestDescribe(got), volumeTestDescribe(files))
	}
	if t.Failed() {
		t.FailNow()
	}
}

func TestValidateFilePath(t *testing.T) {
	seg := strings.Repeat("s", 253)
	deepest := strings.TrimSuffix(strings.Repeat(seg+"/", 16), "/") // 16 segments, 4063 bytes
	good := []string{
		"a", "ca.crt", "certs/ca.pem", "a/b/c", ".dockerconfigjson", "conf/.hidden", "a..b/c..d",
		"x./y.", strings.Repeat("d/", 15) + "f", deepest,
	}
	for _, p := range good {
		if err := validateFilePath(p); err != nil {
			t.Errorf("validateFilePath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                                    "empty",
		"/abs":                                "absolute",
		"/":                                   "absolute",
		"../x":                                "escapes upwards",
		"a/../b":                              "dot-dot segment",
		"a/..":                                "trailing dot-dot",
		"..":                                  "dot-dot",
		".":                                   "dot",
		"a/./b":                               "dot segment",
		"./a":                                 "leading dot segment",
		"a//b":                                "empty segment",
		"a/":                                  "trailing slash",
		"a/..b":                               `segment starting with ".." (reserved)`,
		"..data/x":                            "reaches ..data",
		"..2026_11_21_10_20_30.1/x":           "reaches a payload dir",
		`a\b`:                                 "backslash",
		`..\x`:                                "backslash dot-dot",
		"a b/c":                               "space",
		"a/b\x00":                             "NUL",
		"ü/x":                                 "non-ASCII",
		strings.Repeat("d/", 16) + "f":        "17 segments",
		"a/" + strings.Repeat("k", 254):       "segment longer than a key",
		strings.Repeat("a", 5000):             "longer than 4096 bytes",
		strings.Repeat("a/", 2048) + "bcdefg": "longer than 4096 bytes, many segments",
	}
	for p, why := range bad {
		err := validateFilePath(p)
		if err == nil {
			t.Errorf("validateFilePath(%q) = nil, want an error (%s)", p, why)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", p)) {
			t.Errorf("validateFilePath(%q) error %q does not quote the path", p, err)
		}
	}
}

func TestWriteVolumeNestedLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	files := map[string]volumeFile{
		"ca.crt":             volumeTestFile("CA", 0o644),
		"certs/tls.crt":      volumeTestFile("CERT", 0o644),
		"certs/tls.key":      volumeTestFile("KEY", 0o600),
		"certs/deep/x/y.pem": volumeTestFile("Y", 0o400),
		"conf/.hidden":       volumeTestFile("", 0o644),
	}
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	volumeTestCheckLayout(t, dir, files, -1)
	// The flat view of the same volume has the nested paths too.
	flat, err := readCurrent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(flat) != len(files) || string(flat["certs/deep/x/y.pem"]) != "Y" {
		t.Fatalf("readCurrent = keys %q", slices.Sorted(maps.Keys(flat)))
	}
}

func TestWriteVolumeNestedUpdate(t *testing.T) {
	dir := t.TempDir()
	steps := []struct {
		name  string
		files map[string]volumeFile
		gone  []string // top-level names that must have disappeared
	}{
		{"initial", map[string]volumeFile{
			"ca.crt":        volumeTestFile("CA", 0o644),
			"certs/a":       volumeTestFile("A", 0o644),
			"keys/k1":       volumeTestFile("K1", 0o600),
			"old/x/y":       volumeTestFile("Y", 0o644),
			"old/x/z":       volumeTestFile("Z", 0o644),
			"flat-then-dir": volumeTestFile("F", 0o644),
		}, nil},
		{"rename certs/a to certs/b, move keys/k1 to moved/k1, remove old/, file becomes dir", map[string]volumeFile{
			"ca.crt":          volumeTestFile("CA", 0o644),
			"certs/b":         volumeTestFile("A", 0o644),
			"moved/k1":        volumeTestFile("K1", 0o600),
			"flat-then-dir/f": volumeTestFile("F", 0o644),
		}, []string{"keys", "old"}},
		{"move up to the top and back into a new subdir, dir becomes file", map[string]volumeFile{
			"b":             volumeTestFile("A", 0o644),
			"certs/sub/k1":  volumeTestFile("K1", 0o600),
			"flat-then-dir": volumeTestFile("F2", 0o644),
		}, []string{"ca.crt", "moved"}},
		{"remove everything", map[string]volumeFile{}, []string{"b", "certs", "flat-then-dir"}},
	}
	for _, s := range steps {
		before := atomicTestTsDirs(t, dir)
		if err := writeVolume(dir, s.files, -1); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		volumeTestCheckLayout(t, dir, s.files, -1)
		if after := atomicTestTsDirs(t, dir); slices.Equal(before, after) {
			t.Fatalf("%s: payload changed but ..data was not swapped (%q)", s.name, after)
		}
		for _, g := range s.gone {
			if _, err := os.Lstat(filepath.Join(dir, g)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s: top-level %q still there (err %v)", s.name, g, err)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "certs", "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("renamed-away certs/a still reachable (err %v)", err)
	}
}

func TestWriteVolumePerFileModes(t *testing.T) {
	dir := t.TempDir()
	files := map[string]volumeFile{}
	for _, m := range []os.FileMode{0o000, 0o400, 0o440, 0o444, 0o600, 0o640, 0o644, 0o660, 0o666, 0o700, 0o755, 0o777} {
		files[fmt.Sprintf("modes/%04o", uint32(m))] = volumeTestFile("v", m)
	}
	files["top.key"] = volumeTestFile("k", 0o400)
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	volumeTestCheckLayout(t, dir, files, -1) // stats every file through its top-level link

	// A mode change of one file alone is a change and is published.
	ts := atomicTestTsDirs(t, dir)
	files["modes/0644"] = volumeTestFile("v", 0o604)
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(ts, atomicTestTsDirs(t, dir)) {
		t.Fatal("a mode change was not published")
	}
	volumeTestCheckLayout(t, dir, files, -1)
}

// volumeTestReadAs runs cat on path as uid 1000 with the given groups and returns its output
// and error, so file modes and group ownership are checked by the kernel, as for a pod.
func volumeTestReadAs(t *testing.T, path string, groups ...uint32) ([]byte, error) {
	t.Helper()
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cat, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: groups}}
	return cmd.CombinedOutput()
}

func TestWriteVolumeGroupOwnership(t *testing.T) {
	tmpfsTestNeedRoot(t)
	const gid = 2345
	// t.TempDir's parents are 0700, which no non-root reader could traverse.
	base, err := os.MkdirTemp("", "writevolume-fsgroup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "vol")
	files := map[string]volumeFile{
		"ca.crt":             volumeTestFile("CA", 0o644),
		"certs/tls.key":      volumeTestFile("GROUP-READABLE", 0o440),
		"certs/owner.key":    volumeTestFile("OWNER-ONLY", 0o400),
		"certs/deep/x/y.pem": volumeTestFile("Y", 0o440),
	}
	if err := writeVolume(dir, files, gid); err != nil {
		t.Fatal(err)
	}
	// Every file, every dir below the timestamped dir, and the timestamped dir itself.
	volumeTestCheckLayout(t, dir, files, gid)
	// The links and the volume dir are not the writer's to re-own: they stay as created.
	for _, p := range []string{dir, filepath.Join(dir, "..data"), filepath.Join(dir, "certs")} {
		if uid, g := volumeTestOwner(t, p); uid != uint32(os.Geteuid()) || g != uint32(os.Getegid()) {
			t.Errorf("%s owned by %d:%d, want the writer's %d:%d", p, uid, g, os.Geteuid(), os.Getegid())
		}
	}

	// What fsGroup is for: a non-root reader in the group reads the 0440 file through the
	// top-level link, and still cannot read the 0400 one; outside the group it reads neither.
	if out, err := volumeTestReadAs(t, filepath.Join(dir, "certs/tls.key"), gid); err != nil || string(out) != "GROUP-READABLE" {
		t.Errorf("uid 1000 in group %d reading a 0440 file: %q, %v; want its content", gid, out, err)
	}
	if out, err := volumeTestReadAs(t, filepath.Join(dir, "certs/deep/x/y.pem"), gid); err != nil || string(out) != "Y" {
		t.Errorf("uid 1000 in group %d reading a nested 0440 file: %q, %v; want its content", gid, out, err)
	}
	if out, err := volumeTestReadAs(t, filepath.Join(dir, "certs/owner.key"), gid); err == nil {
		t.Errorf("uid 1000 in group %d read a 0400 file owned by root: %q", gid, out)
	}
	if out, err := volumeTestReadAs(t, filepath.Join(dir, "certs/tls.key"), 3000); err == nil {
		t.Errorf("uid 1000 outside group %d read a 0440 file: %q", gid, out)
	}
	if out, err := volumeTestReadAs(t, filepath.Join(dir, "ca.crt"), 3000); err != nil || string(out) != "CA" {
		t.Errorf("uid 1000 reading a 0644 file: %q, %v; want its content", out, err)
	}

	// gid -1: ownership is left as created, and the change of ownership alone is published.
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	volumeTestCheckLayout(t, dir, files, -1)
	if out, err := volumeTestReadAs(t, filepath.Join(dir, "certs/tls.key"), gid); err == nil {
		t.Errorf("after gid -1, uid 1000 in group %d still reads the 0440 file: %q", gid, out)
	}
}

func TestWriteVolumeIdenticalPayloadSkipsSwapUnlessGidChanges(t *testing.T) {
	tmpfsTestNeedRoot(t)
	dir := t.TempDir()
	files := map[string]volumeFile{
		"ca.crt":        volumeTestFile("CA", 0o644),
		"certs/tls.key": volumeTestFile("KEY", 0o440),
	}
	steps := []struct {
		gid     int
		swapped bool
	}{
		{-1, true}, // first write
		{-1, false},
		{2345, true}, // same bytes and modes, new group: must be published
		{2345, false},
		{2346, true},
		{-1, true}, // back to "as created"
		{-1, false},
	}
	var ts []string
	for i, s := range steps {
		if err := writeVolume(dir, maps.Clone(files), s.gid); err != nil {
			t.Fatalf("step %d (gid %d): %v", i, s.gid, err)
		}
		now := atomicTestTsDirs(t, dir)
		if swapped := !slices.Equal(ts, now); swapped != s.swapped {
			t.Fatalf("step %d (gid %d): swapped = %v (%q -> %q), want %v", i, s.gid, swapped, ts, now, s.swapped)
		}
		volumeTestCheckLayout(t, dir, files, s.gid)
		ts = now
	}

	// Even when skipping, a missing top-level link of a nested path is repaired.
	if err := os.Remove(filepath.Join(dir, "certs")); err != nil {
		t.Fatal(err)
	}
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	if now := atomicTestTsDirs(t, dir); !slices.Equal(ts, now) {
		t.Fatalf("repairing a link republished the payload: %q -> %q", ts, now)
	}
	volumeTestCheckLayout(t, dir, files, -1)
}

func TestWriteVolumeRejectsBadPayloadsLeavingDirUnchanged(t *testing.T) {
	ok := volumeTestFile("SECRET-BYTES", 0o644)
	cases := map[string]struct {
		files map[string]volumeFile
		gid   int
		names string // what the error must quote
	}{
		"file and dir a":         {map[string]volumeFile{"a": ok, "a/b": ok}, -1, `"a"`},
		"file and dir deep":      {map[string]volumeFile{"certs/a": ok, "certs/a/b/c": ok, "z": ok}, -1, `"certs/a"`},
		"dot-dot escape":         {map[string]volumeFile{"ok/x": ok, "../x": ok}, -1, `"../x"`},
		"empty segment":          {map[string]volumeFile{"ok/x": ok, "a//b": ok}, -1, `"a//b"`},
		"absolute":               {map[string]volumeFile{"ok/x": ok, "/abs": ok}, -1, `"/abs"`},
		"dot segment":            {map[string]volumeFile{"ok/x": ok, "a/./b": ok}, -1, `"a/./b"`},
		"reserved segment":       {map[string]volumeFile{"ok/x": ok, "a/..b": ok}, -1, `"a/..b"`},
		"into ..data":            {map[string]volumeFile{"ok/x": ok, "..data/x": ok}, -1, `"..data/x"`},
		"trailing slash":         {map[string]volumeFile{"ok/x": ok, "a/": ok}, -1, `"a/"`},
		"backslash":              {map[string]volumeFile{"ok/x": ok, `a\..\b`: ok}, -1, `"a\\..\\b"`},
		"empty path":             {map[string]volumeFile{"ok/x": ok, "": ok}, -1, `""`},
		"setuid mode":            {map[string]volumeFile{"ok/x": ok, "s": {Mode: os.ModeSetuid | 0o755}}, -1, `"s"`},
		"dir mode":               {map[string]volumeFile{"ok/x": ok, "d": {Mode: fs.ModeDir | 0o755}}, -1, `"d"`},
		"gid that means no gid":  {map[string]volumeFile{"ok/x": ok}, 1<<32 - 1, "4294967295"},
		"gid beyond 32 bits":     {map[string]volumeFile{"ok/x": ok}, 1 << 40, "1099511627776"},
		"top name of a file":     {map[string]volumeFile{"notes.txt/x": ok}, -1, `"notes.txt"`},
		"top name foreign link":  {map[string]volumeFile{"foreign/x": ok}, -1, `"foreign"`},
		"top name foreign dir":   {map[string]volumeFile{"foreigndir/x": ok}, -1, `"foreigndir"`},
		"sticky bit":             {map[string]volumeFile{"ok/x": {Mode: os.ModeSticky | 0o644}}, -1, `"ok/x"`},
		"setgid bit on a nested": {map[string]volumeFile{"ok/x/y": {Mode: os.ModeSetgid | 0o644}}, -1, `"ok/x/y"`},
	}

	dir := t.TempDir()
	valid := map[string]volumeFile{"certs/a": volumeTestFile("A", 0o644), "top": volumeTestFile("T", 0o600)}
	if err := writeVolume(dir, valid, -1); err != nil {
		t.Fatal(err)
	}
	// Entries the writer did not make, whose names a payload asks for.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("foreign"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/something-else", filepath.Join(dir, "foreign")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "foreigndir"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := atomicTestSnapshot(t, dir)
	for name, c := range cases {
		err := writeVolume(dir, c.files, c.gid)
		if err == nil {
			t.Errorf("%s: writeVolume succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), "SECRET-BYTES") {
			t.Errorf("%s: error leaks file data: %v", name, err)
		}
		if !strings.Contains(err.Error(), c.names) {
			t.Errorf("%s: error %q does not name %s", name, err, c.names)
		}
		if after := atomicTestSnapshot(t, dir); !maps.Equal(before, after) {
			t.Fatalf("%s: dir changed:\nbefore %q\nafter  %q", name, before, after)
		}
		// A payload that is bad in itself does not even create a missing dir.
		if strings.HasPrefix(name, "top name") {
			continue
		}
		fresh := filepath.Join(t.TempDir(), "never")
		if err := writeVolume(fresh, c.files, c.gid); err == nil {
			t.Errorf("%s: writeVolume into a fresh dir succeeded", name)
		}
		if _, err := os.Lstat(fresh); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: rejected payload created %s (err %v)", name, fresh, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a file was written outside dir")
	}
}

func TestWriteVolumeSparesForeignTopLevelEntries(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	foreign := map[string]string{
		"keys":    "..data/keys-but-not-my-name", // points into ..data, but not at its own name
		"abs":     outside,
		"dangles": "..data/gone/x",
	}
	for name, target := range foreign {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("foreign"), 0o644); err != nil {
		t.Fatal(err)
	}
	v1 := map[string]volumeFile{"certs/a": volumeTestFile("A", 0o644), "gone/x": volumeTestFile("X", 0o644)}
	v2 := map[string]volumeFile{"certs/b": volumeTestFile("B", 0o644)}
	for _, files := range []map[string]volumeFile{v1, v2, {}} {
		if err := writeVolume(dir, files, -1); err != nil {
			t.Fatal(err)
		}
		for name, target := range foreign {
			if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != target {
				t.Fatalf("foreign link %s -> %q (%v), want untouched -> %q", name, got, err, target)
			}
		}
		if got, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(got) != "foreign" {
			t.Fatalf("foreign file touched: %q, %v", got, err)
		}
	}
	// The writer's own link for "gone" went with v2; the foreign "dangles" stayed.
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the writer's link for a dropped first segment is still there (err %v)", err)
	}
}

func TestWriteVolumeDeepestLongestPath(t *testing.T) {
	dir := t.TempDir()
	var segs []string
	for i := range 16 {
		segs = append(segs, fmt.Sprintf("%02d", i)+strings.Repeat("s", 251))
	}
	deepest := strings.Join(segs, "/") // 4063 bytes: with dir in front, longer than PATH_MAX
	files := map[string]volumeFile{
		deepest:                        volumeTestFile("DEEP", 0o640),
		segs[0] + "/shallow":           volumeTestFile("SHALLOW", 0o644),
		strings.Repeat("d/", 15) + "f": volumeTestFile("MANY", 0o644),
	}
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	got, err := readVolumeFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !volumeTestEqual(got, files) {
		t.Fatalf("readVolumeFiles = %s, want %s", volumeTestDescribe(got), volumeTestDescribe(files))
	}
	ts := atomicTestTsDirs(t, dir)
	if err := writeVolume(dir, files, -1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ts, atomicTestTsDirs(t, dir)) {
		t.Fatal("identical deep payload was republished")
	}
	// Replacing and removing the deep tree works too (old payload dir removed).
	if err := writeVolume(dir, map[string]volumeFile{"f": volumeTestFile("F", 0o644)}, -1); err != nil {
		t.Fatal(err)
	}
	volumeTestCheckLayout(t, dir, map[string]volumeFile{"f": volumeTestFile("F", 0o644)}, -1)
}

func TestAtomicReadVolumeFilesRefusesForeignEntries(t *testing.T) {
	files := map[string]volumeFile{"ca.crt": volumeTestFile("CA", 0o644), "certs/tls.crt": volumeTestFile("CERT", 0o644)}
	tamper := map[string]func(ts string) error{
		"symlink to a sibling": func(ts string) error { return os.Symlink("../ca.crt", filepath.Join(ts, "certs", "evil")) },
		"symlink out":          func(ts string) error { return os.Symlink("/etc/passwd", filepath.Join(ts, "evil")) },
		"fifo":                 func(ts string) error { return unix.Mkfifo(filepath.Join(ts, "certs", "fifo"), 0o644) },
		"reserved name":        func(ts string) error { return os.WriteFile(filepath.Join(ts, "certs", "..x"), nil, 0o644) },
		"invalid name":         func(ts string) error { return os.WriteFile(filepath.Join(ts, "a b"), nil, 0o644) },
		"too deep": func(ts string) error {
			return os.MkdirAll(filepath.Join(ts, strings.Repeat("d/", 17)), 0o755)
		},
	}
	for name, f := range tamper {
		dir := t.TempDir()
		if err := writeVolume(dir, files, -1); err != nil {
			t.Fatal(err)
		}
		ts := filepath.Join(dir, atomicTestTsDirs(t, dir)[0])
		if err := f(ts); err != nil {
			t.Fatal(err)
		}
		if got, err := readVolumeFiles(dir); err == nil {
			t.Errorf("%s: readVolumeFiles = %s, want an error", name, volumeTestDescribe(got))
		}
		if _, err := readCurrent(dir); err == nil {
			t.Errorf("%s: readCurrent succeeded, want an error", name)
		}
		// The writer does not take a damaged payload dir for the current payload: it
		// publishes a clean one.
		if err := writeVolume(dir, files, -1); err != nil {
			t.Fatalf("%s: rewrite: %v", name, err)
		}
		volumeTestCheckLayout(t, dir, files, -1)
	}
}

// volumeTestLayouts are the two path sets the nested atomicity test alternates between: a file
// renamed (certs/tls.crt -> certs/renamed.crt), one moved between dirs (certs/tls.key ->
// moved/tls.key), a subdir removed (deep/a/b), and one file in both.
var volumeTestLayouts = map[string][]string{
	"A": {"ca.crt", "certs/tls.crt", "certs/tls.key", "deep/a/b/token"},
	"B": {"ca.crt", "certs/renamed.crt", "moved/tls.key", "deep/a/token"},
}

// volumeTestGeneration is payload i of the nested atomicity test: set A (mode 0644) for even i,
// set B (mode 0440) for odd i.
func volumeTestGeneration(i int) (string, map[string]volumeFile) {
	set, mode := "A", os.FileMode(0o644)
	if i%2 == 1 {
		set, mode = "B", 0o440
	}
	m := map[string]volumeFile{}
	for _, p := range volumeTestLayouts[set] {
		m[p] = volumeFile{Data: atomicTestPayload(set, i, p), Mode: mode}
	}
	return set, m
}

// volumeTestCheckOneGeneration checks that got (path -> bytes) is complete and exactly one
// generation: one "set-i" header across all files, and precisely that set's paths.
func volumeTestCheckOneGeneration(got map[string][]byte) error {
	gens := map[string]bool{}
	for p, data := range got {
		gen, err := atomicTestParsePayload(p, data)
		if err != nil {
			return err
		}
		gens[gen] = true
	}
	if len(gens) != 1 {
		return fmt.Errorf("a mix of generations %v", slices.Sorted(maps.Keys(gens)))
	}
	for gen := range gens {
		set := gen[:1]
		if want := slices.Sorted(slices.Values(volumeTestLayouts[set])); !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
			return fmt.Errorf("generation %s has paths %q, want exactly %q", gen, slices.Sorted(maps.Keys(got)), want)
		}
	}
	return nil
}

func TestWriteVolumeReadersNeverSeeMixNested(t *testing.T) {
	dir := t.TempDir()
	_, first := volumeTestGeneration(0)
	if err := writeVolume(dir, first, -1); err != nil {
		t.Fatal(err)
	}
	var (
		done                  = make(chan struct{})
		wg                    sync.WaitGroup
		failed                atomic.Bool
		walks, walksTorn      atomic.Int64
		libReads, libTorn     atomic.Int64
		linkReads, linkMisses atomic.Int64
		seenMu                sync.Mutex
		seen                  = map[string]bool{}
	)
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	// Reader 1, independent of the code under test: resolve ..data once, then walk the whole
	// tree below that dir. If ..data still points at that dir after the walk, the dir was live
	// all along and the walk must have seen exactly one generation with exactly its paths.
	// Otherwise the writer may have been removing the dir under the walk (an error, or a
	// subdir found already empty): that pass is discarded, as a careful reader does.
	wg.Go(func() {
		for !stopped() {
			ts, err := os.Readlink(filepath.Join(dir, "..data"))
			if err != nil {
				fail("..data unreadable during swaps: %v", err)
				return
			}
			got, err := func() (map[string][]byte, error) {
				r, err := os.OpenRoot(filepath.Join(dir, ts))
				if err != nil {
					return nil, err
				}
				defer r.Close()
				got := map[string][]byte{}
				err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
					if err != nil || !d.Type().IsRegular() {
						return err
					}
					got[p], err = r.ReadFile(p)
					return err
				})
				return got, err
			}()
			now, lerr := os.Readlink(filepath.Join(dir, "..data"))
			if lerr != nil {
				fail("..data unreadable during swaps: %v", lerr)
				return
			}
			if now != ts {
				walksTorn.Add(1)
				continue
			}
			if err != nil {
				fail("walk of the live payload dir %s: %v", ts, err)
				return
			}
			if err := volumeTestCheckOneGeneration(got); err != nil {
				fail("one resolution of ..data: %v", err)
				return
			}
			walks.Add(1)
			for p := range got {
				seenMu.Lock()
				seen[string(got[p][:1])] = true
				seenMu.Unlock()
			}
		}
	})
	// Reader 2: readVolumeFiles makes the same promise by itself; its only allowed failure
	// is giving up after ..data changed during each of its attempts.
	wg.Go(func() {
		for !stopped() {
			vf, err := readVolumeFiles(dir)
			if errors.Is(err, errVolumeChanging) {
				libTorn.Add(1)
				continue
			}
			if err != nil {
				fail("readVolumeFiles during swaps: %v", err)
				return
			}
			got := map[string][]byte{}
			for p, f := range vf {
				got[p] = f.Data
				if want := map[byte]os.FileMode{'A': 0o644, 'B': 0o440}[f.Data[0]]; f.Mode != want {
					fail("readVolumeFiles: %s has mode %v, want %v", p, f.Mode, want)
					return
				}
			}
			if err := volumeTestCheckOneGeneration(got); err != nil {
				fail("readVolumeFiles: %v", err)
				return
			}
			libReads.Add(1)
		}
	})
	// Reader 3: every path of both layouts through the top-level links, as a pod reads them.
	// A path may be absent (it is not in the current layout), but a file read is always
	// complete and is the file of that path; the links of first segments that every layout
	// has never disappear.
	wg.Go(func() {
		all := slices.Compact(slices.Sorted(slices.Values(slices.Concat(volumeTestLayouts["A"], volumeTestLayouts["B"]))))
		for !stopped() {
			for _, p := range all {
				data, err := os.ReadFile(filepath.Join(dir, p))
				if errors.Is(err, fs.ErrNotExist) {
					linkMisses.Add(1)
					continue
				}
				if err != nil {
					fail("read %s: %v", p, err)
					return
				}
				if _, err := atomicTestParsePayload(p, data); err != nil {
					fail("via top-level link: %v", err)
					return
				}
				linkReads.Add(1)
			}
			for _, top := range []string{"ca.crt", "certs", "deep"} {
				if _, err := os.Lstat(filepath.Join(dir, top)); err != nil {
					fail("top-level link %s, in every layout, vanished during swaps: %v", top, err)
					return
				}
			}
		}
	})

	const swaps = 100
	var last map[string]volumeFile
	for i := 1; i <= swaps && !failed.Load(); i++ {
		_, last = volumeTestGeneration(i)
		if err := writeVolume(dir, last, -1); err != nil {
			fail("write %d: %v", i, err)
		}
	}
	close(done)
	wg.Wait()

	t.Logf("%d swaps; ..data walks: %d complete, %d discarded; readVolumeFiles: %d ok, %d gave up; link reads: %d ok, %d absent",
		swaps, walks.Load(), walksTorn.Load(), libReads.Load(), libTorn.Load(), linkReads.Load(), linkMisses.Load())
	if failed.Load() {
		return
	}
	if walks.Load() == 0 || libReads.Load() == 0 || linkReads.Load() == 0 {
		t.Fatal("a reader made no progress; the test proved nothing")
	}
	volumeTestCheckLayout(t, dir, last, -1)
	seenMu.Lock()
	defer seenMu.Unlock()
	if !seen["A"] || !seen["B"] {
		t.Logf("note: the ..data walker only saw sets %v", slices.Sorted(maps.Keys(seen)))
	}
}

// volumeFuzzOracle says whether writeVolume must accept files, by rules written down
// independently of the writer: every path has 1..16 "/"-separated segments, each a key the API
// server accepts (validation.IsConfigMapKey, which also rejects "", ".", ".." and "..x"); every
// mode is permission bits only; and no path is a directory of another path.
func volumeFuzzOracle(files map[string]volumeFile) bool {
	for p, f := range files {
		segs := strings.Split(p, "/")
		if len(segs) > 16 || f.Mode&^0o777 != 0 {
			return false
		}
		for _, s := range segs {
			if len(validation.IsConfigMapKey(s)) > 0 {
				return false
			}
		}
		for q := range files {
			if strings.HasPrefix(q, p+"/") {
				return false
			}
		}
	}
	return true
}

// The single-segment writer the tests use: flat keys, one mode, no group (what the driver
// wrote before items and fsGroup existed), and its reader.

// writeAtomic is writeVolume for a flat payload whose files all have permission
// bits mode, ownership as created. It only converts: every check is
// writeVolume's own, so the tests that expect an error test the writer.
func writeAtomic(dir string, files map[string][]byte, mode os.FileMode) error {
	vf := make(map[string]volumeFile, len(files))
	for k, v := range files {
		vf[k] = volumeFile{Data: v, Mode: mode}
	}
	return writeVolume(dir, vf, -1)
}

// readCurrent is readVolumeFiles without the modes: path -> bytes. For a
// volume written by writeAtomic the paths are exactly the keys.
func readCurrent(dir string) (map[string][]byte, error) {
	vf, err := readVolumeFiles(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(vf))
	for p, f := range vf {
		out[p] = f.Data
	}
	return out, nil
}
