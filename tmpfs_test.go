package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// tmpfsTestNeedRoot fails (not skips) the test when not root: the project's
// rule is that a test that cannot run must be loud about it.
func tmpfsTestNeedRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts filesystems and must run as root")
	}
}

// tmpfsTestMount mounts a tmpfs on a fresh temp dir and unmounts it when the
// test ends (before t.TempDir's own cleanup, as cleanups run last-in first-out).
func tmpfsTestMount(t *testing.T, size int64) string {
	t.Helper()
	tmpfsTestNeedRoot(t)
	dir := tmpfsTestRealDir(t)
	if err := mountTmpfs(dir, size, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmountExact(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

// tmpfsTestRealDir is t.TempDir with symlinks resolved, because mountinfo
// lists resolved paths.
func tmpfsTestRealDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// tmpfsTestTsDirs lists the timestamped payload dirs in dir.
func tmpfsTestTsDirs(t *testing.T, dir string) []string {
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

// tmpfsTestSnapshot describes everything in dir (recursively, without
// following symlinks) so "unchanged" can be asserted exactly.
func tmpfsTestSnapshot(t *testing.T, dir string) map[string]string {
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

// tmpfsTestCheckLayout asserts dir is exactly the writer's layout for files:
// one timestamped dir holding the files with mode, ..data pointing at it, one
// key symlink per key, and nothing else.
func tmpfsTestCheckLayout(t *testing.T, dir string, files map[string][]byte, mode os.FileMode) {
	t.Helper()
	ts := tmpfsTestTsDirs(t, dir)
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
			t.Fatalf("key %q = %s, want %s", k, tmpfsTestAbbrev(got), tmpfsTestAbbrev(v))
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

// tmpfsTestAbbrev keeps failure messages readable when contents are large.
func tmpfsTestAbbrev(b []byte) string {
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

func TestMountInfoParse(t *testing.T) {
	const input = `22 27 0:21 / /proc rw,relatime shared:13 - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
300 27 0:52 /data /var/lib/kubelet/pods/p/volumes/with\040space ro,nosuid,nodev,noexec,relatime shared:1 master:2 - tmpfs tmpfs ro,size=1024k,mode=755
301 27 0:53 / /odd\011tab\012nl\134bs rw - tmpfs my\040src rw
302 27 0:54 / /nooptional rw - fuse.sshfs  rw,user_id=0

`
	got, err := parseMountInfo(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountEntry{
		{22, 27, "0:21", "/", "/proc", "rw,relatime", "proc", "proc", "rw"},
		{27, 1, "254:0", "/", "/", "rw,relatime", "ext4", "/dev/vda", "rw,discard"},
		{36, 35, "98:0", "/mnt1", "/mnt2", "rw,noatime", "ext3", "/dev/root", "rw,errors=continue"},
		{300, 27, "0:52", "/data", "/var/lib/kubelet/pods/p/volumes/with space", "ro,nosuid,nodev,noexec,relatime", "tmpfs", "tmpfs", "ro,size=1024k,mode=755"},
		{301, 27, "0:53", "/", "/odd\ttab\nnl\\bs", "rw", "tmpfs", "my src", "rw"},
		{302, 27, "0:54", "/", "/nooptional", "rw", "fuse.sshfs", "", "rw,user_id=0"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseMountInfo:\n got %+v\nwant %+v", got, want)
	}

	for _, line := range []string{
		"22 27 0:21 / /proc rw,relatime shared:13 proc proc rw", // no separator
		"22 27 0:21 / /proc - proc proc rw",                     // separator too early
		"x 27 0:21 / /proc rw - proc proc rw",                   // bad ID
		"22 y 0:21 / /proc rw - proc proc rw",                   // bad parent
		"22 27 021 / /proc rw - proc proc rw",                   // bad major:minor
		"22 27 0:21 / /proc rw - proc proc",                     // missing super options
	} {
		if _, err := parseMountInfo(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("parseMountInfo(%q) = nil error, want one", line)
		}
	}
}

func TestMountInfoUnescapeKeepsMalformed(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:       "plain",
		`a\040b`:      "a b",
		`trail\04`:    `trail\04`,
		`bad\089`:     `bad\089`,
		`big\777`:     `big\777`,
		`\134\134`:    `\\`,
		`end\`:        `end\`,
		`x\0400\0401`: "x 0 1",
	} {
		if got := mountInfoUnescape(in); got != want {
			t.Errorf("mountInfoUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountAtTopmost(t *testing.T) {
	entries := []mountEntry{
		{ID: 1, MountPoint: "/"},
		{ID: 2, MountPoint: "/a/b", Options: "rw"},
		{ID: 3, MountPoint: "/a/b/c"},
		{ID: 4, MountPoint: "/a/b", Options: "ro"},
	}
	e, ok := mountAt(entries, "/a//b/")
	if !ok || e.ID != 4 {
		t.Fatalf("mountAt(/a//b/) = %+v, %v; want the topmost entry, ID 4", e, ok)
	}
	if _, ok := mountAt(entries, "/a"); ok {
		t.Fatal("mountAt(/a) found an entry; /a is not a mount point")
	}
}

func TestMountReadMountInfoSelf(t *testing.T) {
	entries, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mountAt(entries, "/"); !ok {
		t.Fatal("readMountInfo has no entry for /")
	}
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n")
	f.Add("1 2 0:1 /\\040 /x\\134 rw shared:1 master:2 - tmpfs  rw\n")
	f.Add("1 2 3 4 5 6 - - - -")
	f.Fuzz(func(t *testing.T, s string) {
		entries, err := parseMountInfo(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, e := range entries {
			if !strings.Contains(e.MajorMinor, ":") {
				t.Fatalf("accepted entry without major:minor: %+v", e)
			}
		}
	})
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
	tmpfsTestCheckLayout(t, dir, v1, 0o644)
	first := tmpfsTestTsDirs(t, dir)[0]

	// Changed (tls.crt), added (extra.pem), removed (tls.key), unchanged (ca.crt).
	v2 := map[string][]byte{
		"ca.crt":    []byte("CA-1"),
		"tls.crt":   []byte("CERT-2"),
		"extra.pem": []byte("EXTRA-2"),
	}
	if err := writeAtomic(dir, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpfsTestCheckLayout(t, dir, v2, 0o644)
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
	tmpfsTestCheckLayout(t, dst, want, 0o600)
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
		tmpfsTestCheckLayout(t, dir, nil, 0o644)
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
	before := tmpfsTestSnapshot(t, dir)
	for _, bad := range []string{"../escape", "..data", "a/b", ""} {
		files := map[string][]byte{"ok.crt": []byte("new"), bad: []byte("SECRET-BYTES")}
		err := writeAtomic(dir, files, 0o644)
		if err == nil {
			t.Fatalf("writeAtomic with key %q succeeded", bad)
		}
		if strings.Contains(err.Error(), "SECRET-BYTES") {
			t.Fatalf("error leaks file data: %v", err)
		}
		if after := tmpfsTestSnapshot(t, dir); !maps.Equal(before, after) {
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
		tmpfsTestCheckLayout(t, dir, files, mode)
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
	tmpfsTestCheckLayout(t, dir, files, 0o400)

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
	ts := tmpfsTestTsDirs(t, dir)
	if err := writeAtomic(dir, maps.Clone(files), 0o644); err != nil {
		t.Fatal(err)
	}
	if again := tmpfsTestTsDirs(t, dir); !slices.Equal(ts, again) {
		t.Fatalf("identical payload was republished: %q -> %q", ts, again)
	}
	// Even when skipping, a missing key symlink is repaired.
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(dir, files, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpfsTestCheckLayout(t, dir, files, 0o644)
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
	if len(tmpfsTestTsDirs(t, dir)) != 1 {
		t.Errorf("timestamped dirs: %q, want one", tmpfsTestTsDirs(t, dir))
	}

	// A key whose name is taken by a foreign entry is refused up front.
	before := tmpfsTestSnapshot(t, dir)
	if err := writeAtomic(dir, map[string][]byte{"notes.txt": []byte("x")}, 0o644); err == nil {
		t.Fatal("writeAtomic overwrote a foreign regular file")
	}
	if after := tmpfsTestSnapshot(t, dir); !maps.Equal(before, after) {
		t.Fatalf("refused write changed dir:\nbefore %q\nafter  %q", before, after)
	}
}

// tmpfsTestPayload is the content of key in iteration i of set ("A" or "B").
// The header lets a reader tell which write a file came from; the padding and
// trailer make a truncated or partially written file detectable.
func tmpfsTestPayload(set string, i int, key string) []byte {
	head := fmt.Sprintf("%s-%d-%s|", set, i, key)
	return []byte(head + strings.Repeat(set, 16<<10) + "|END")
}

// tmpfsTestParsePayload checks that data is a complete payload for key and
// returns its "set-i" generation.
func tmpfsTestParsePayload(key string, data []byte) (string, error) {
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
	if !bytes.Equal(data, tmpfsTestPayload(parts[0], i, key)) {
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
			m[k] = tmpfsTestPayload(set, i, k)
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
				gen, err := tmpfsTestParsePayload(k, data)
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
				if _, err := tmpfsTestParsePayload(k, data); err != nil {
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
	tmpfsTestCheckLayout(t, dir, payload(swaps), 0o644)
	seenMu.Lock()
	defer seenMu.Unlock()
	if !seen["A"] || !seen["B"] {
		t.Logf("note: reader 1 only saw sets %v", slices.Sorted(maps.Keys(seen)))
	}
}

func TestTmpfsWriteENOSPCKeepsOldSet(t *testing.T) {
	dir := tmpfsTestMount(t, 64<<10)
	small := map[string][]byte{"ca.crt": []byte("CA"), "tls.key": []byte("KEY")}
	if err := writeAtomic(dir, small, 0o644); err != nil {
		t.Fatal(err)
	}
	big := map[string][]byte{"ca.crt": []byte("CA"), "huge.bin": bytes.Repeat([]byte{'x'}, 1<<20)}
	err := writeAtomic(dir, big, 0o644)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writeAtomic of 1 MiB into a 64 KiB tmpfs: %v, want ENOSPC", err)
	}
	got, err := readCurrent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, small, bytes.Equal) {
		t.Fatalf("after ENOSPC readCurrent has keys %v, want the old set %q", slices.Sorted(maps.Keys(got)), small)
	}
	// The failed attempt left nothing behind and freed its space.
	tmpfsTestCheckLayout(t, dir, small, 0o644)
	if _, err := os.Lstat(filepath.Join(dir, "..data_tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("..data_tmp left behind (err %v)", err)
	}
	next := map[string][]byte{"ca.crt": []byte("CA2"), "big.bin": bytes.Repeat([]byte{'y'}, 40<<10)}
	if err := writeAtomic(dir, next, 0o644); err != nil {
		t.Fatalf("write after ENOSPC: %v", err)
	}
	tmpfsTestCheckLayout(t, dir, next, 0o644)
}

func TestTmpfsMountRejectsUnlimitedSize(t *testing.T) {
	tmpfsTestNeedRoot(t)
	dir := tmpfsTestRealDir(t)
	for _, size := range []int64{0, -1} {
		if err := mountTmpfs(dir, size, ""); err == nil {
			_ = unmountExact(dir)
			t.Fatalf("mountTmpfs accepted size %d (tmpfs would be unlimited)", size)
		}
	}
	entries, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := mountAt(entries, dir); ok {
		t.Fatalf("something got mounted: %+v", e)
	}
}

func TestTmpfsBindReadOnly(t *testing.T) {
	src := tmpfsTestMount(t, 1<<20)
	if err := writeAtomic(src, map[string][]byte{"ca.crt": []byte("hello")}, 0o644); err != nil {
		t.Fatal(err)
	}
	target := tmpfsTestRealDir(t)
	if err := bindReadOnly(src, target); err != nil {
		t.Fatal(err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			if err := unmountExact(target); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	if got, err := os.ReadFile(filepath.Join(target, "ca.crt")); err != nil || string(got) != "hello" {
		t.Fatalf("read through bind = %q, %v", got, err)
	}
	for what, err := range map[string]error{
		"overwrite": os.WriteFile(filepath.Join(target, "ca.crt"), []byte("evil"), 0o644),
		"create":    os.WriteFile(filepath.Join(target, "new"), []byte("evil"), 0o644),
		"mkdir":     os.Mkdir(filepath.Join(target, "d"), 0o755),
		"remove":    os.Remove(filepath.Join(target, "ca.crt")),
		"rename":    os.Rename(filepath.Join(target, "..data"), filepath.Join(target, "x")),
		"chmod":     os.Chmod(filepath.Join(target, "..data", "ca.crt"), 0o777),
	} {
		if !errors.Is(err, unix.EROFS) {
			t.Errorf("%s through the read-only bind: %v, want EROFS", what, err)
		}
	}

	// The source stays writable, and the bind shows updates immediately.
	if err := writeAtomic(src, map[string][]byte{"ca.crt": []byte("rotated")}, 0o644); err != nil {
		t.Fatalf("source not writable: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "ca.crt")); err != nil || string(got) != "rotated" {
		t.Fatalf("bind after rotation = %q, %v", got, err)
	}

	entries, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := mountAt(entries, target)
	if !ok {
		t.Fatalf("no mountinfo entry for %s", target)
	}
	opts := strings.Split(e.Options, ",")
	for _, want := range []string{"ro", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(opts, want) {
			t.Errorf("bind options %q lack %q", e.Options, want)
		}
	}
	if e.FSType != "tmpfs" {
		t.Errorf("bind fstype %q, want tmpfs", e.FSType)
	}
	s, ok := mountAt(entries, src)
	if !ok {
		t.Fatalf("no mountinfo entry for %s", src)
	}
	sopts := strings.Split(s.Options, ",")
	for _, want := range []string{"rw", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(sopts, want) {
			t.Errorf("tmpfs options %q lack %q", s.Options, want)
		}
	}
	for _, want := range []string{"size=1024k", "mode=755"} {
		if !slices.Contains(strings.Split(s.SuperOptions, ","), want) {
			t.Errorf("tmpfs super options %q lack %q", s.SuperOptions, want)
		}
	}
	if s.MajorMinor != e.MajorMinor {
		t.Errorf("bind is on device %s, tmpfs on %s", e.MajorMinor, s.MajorMinor)
	}

	if err := unmountExact(target); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	if err := unmountExact(src); err != nil {
		t.Fatal(err)
	}
	entries, err = readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, src} {
		if e, ok := mountAt(entries, p); ok {
			t.Errorf("still mounted after unmountExact: %+v", e)
		}
	}
	// The tmpfs cleanup will call unmountExact(src) again: it must be a no-op.
}

func TestMountUnmountExactNotMounted(t *testing.T) {
	tmpfsTestNeedRoot(t)
	dir := t.TempDir()
	if err := unmountExact(dir); err != nil {
		t.Errorf("unmountExact on a plain dir: %v, want nil", err)
	}
	if err := unmountExact(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("unmountExact on a missing path: %v, want nil", err)
	}
}

func TestMountUnmountExactOnlyTopmost(t *testing.T) {
	lower := tmpfsTestMount(t, 1<<20)
	if err := mountTmpfs(lower, 1<<20, ""); err != nil {
		t.Fatal(err)
	}
	if err := unmountExact(lower); err != nil {
		t.Fatal(err)
	}
	entries, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mountAt(entries, lower); !ok {
		t.Fatal("unmountExact removed more than the topmost mount")
	}
}
