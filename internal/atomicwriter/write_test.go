package atomicwriter

// Specifies Writer.Write, one behaviour per test: the layout it makes; how it updates and
// revokes; which writes it skips; what it refuses, leaving the dir unchanged; what it removes
// and what it never touches. What needs root to check (exact modes, group ownership, a full file
// system) is in write_root_test.go. Reading back is specified in read_test.go, concurrent
// readers in race_test.go, hard links in link_root_test.go.

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/treesnap"
)

// mustWrite writes files into dir with gid, failing the test on an error.
func mustWrite(t *testing.T, dir string, gid int, files map[string]File) {
	t.Helper()
	if err := (Writer{Dir: dir, GID: gid}).Write(files); err != nil {
		t.Fatal(err)
	}
}

// The layout: a payload dir holding the files with their modes and the dirs between them, ..data
// pointing at it, one top-level link per first segment. A missing volume dir is created, 0755.
func TestWriteLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	files := map[string]File{
		"ca.crt":             fileOf("CA", 0o644),
		"certs/tls.crt":      fileOf("CERT", 0o644),
		"certs/tls.key":      fileOf("KEY", 0o600),
		"certs/deep/x/y.pem": fileOf("Y", 0o400),
		"conf/.hidden":       fileOf("", 0o644),
	}
	mustWrite(t, dir, -1, files)
	if fi, err := os.Stat(dir); err != nil || fi.Mode() != fs.ModeDir|0o755 {
		t.Fatalf("created dir: %v, err %v; want a dir with mode 0755", fi, err)
	}
	checkLayout(t, dir, files, -1)
}

// Every change is published as a new payload dir, and the previous one is removed: files
// changed, added, removed, renamed, moved between dirs, a file that becomes a dir and back.
func TestWriteUpdate(t *testing.T) {
	dir := t.TempDir()
	steps := []struct {
		name  string
		files map[string]File
		gone  []string // top-level names that must have disappeared
	}{
		{"initial", map[string]File{
			"ca.crt":  fileOf("CA-1", 0o644),
			"tls.crt": fileOf("CERT-1", 0o644),
			"tls.key": fileOf("KEY-1", 0o644),
		}, nil},
		{"one file changed, one added, one removed, one unchanged", map[string]File{
			"ca.crt":    fileOf("CA-1", 0o644),
			"tls.crt":   fileOf("CERT-2", 0o644),
			"extra.pem": fileOf("EXTRA-2", 0o644),
		}, []string{"tls.key"}},
		{"nested paths", map[string]File{
			"ca.crt":        fileOf("CA", 0o644),
			"certs/a":       fileOf("A", 0o644),
			"keys/k1":       fileOf("K1", 0o600),
			"old/x/y":       fileOf("Y", 0o644),
			"old/x/z":       fileOf("Z", 0o644),
			"flat-then-dir": fileOf("F", 0o644),
		}, []string{"tls.crt", "extra.pem"}},
		{"rename certs/a to certs/b, move keys/k1 to moved/k1, remove old/, file becomes dir", map[string]File{
			"ca.crt":          fileOf("CA", 0o644),
			"certs/b":         fileOf("A", 0o644),
			"moved/k1":        fileOf("K1", 0o600),
			"flat-then-dir/f": fileOf("F", 0o644),
		}, []string{"keys", "old"}},
		{"move up to the top and back into a new subdir, dir becomes file", map[string]File{
			"b":             fileOf("A", 0o644),
			"certs/sub/k1":  fileOf("K1", 0o600),
			"flat-then-dir": fileOf("F2", 0o644),
		}, []string{"ca.crt", "moved"}},
		{"remove everything", map[string]File{}, []string{"b", "certs", "flat-then-dir"}},
	}
	for _, s := range steps {
		before := payloadDirs(t, dir)
		if err := (Writer{Dir: dir, GID: -1}).Write(s.files); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		checkLayout(t, dir, s.files, -1)
		if after := payloadDirs(t, dir); slices.Equal(before, after) {
			t.Fatalf("%s: payload changed but ..data was not swapped (%q)", s.name, after)
		}
		for _, g := range append(s.gone, before...) {
			if _, err := os.Lstat(filepath.Join(dir, g)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s: top-level %q still there (err %v)", s.name, g, err)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "certs", "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("renamed-away certs/a still reachable (err %v)", err)
	}
}

// An empty or nil set means "revoked": ..data points at an empty payload dir, no top-level
// link remains.
func TestWriteEmptyPayloadRevokes(t *testing.T) {
	dir := t.TempDir()
	for _, files := range []map[string]File{{}, nil} {
		mustWrite(t, dir, -1, map[string]File{"a": fileOf("1", 0o644), "b/c": fileOf("2", 0o644)})
		mustWrite(t, dir, -1, files)
		checkLayout(t, dir, nil, -1)
		inner, err := os.ReadDir(filepath.Join(dir, "..data"))
		if err != nil || len(inner) != 0 {
			t.Fatalf("..data resolves to %v (err %v), want an empty dir", inner, err)
		}
	}
}

// An identical payload is not published again; the top-level links are still repaired.
func TestWriteSkipsIdenticalPayload(t *testing.T) {
	dir := t.TempDir()
	files := map[string]File{
		"a":             fileOf("1", 0o644),
		"b":             fileOf("2", 0o644),
		"certs/tls.key": fileOf("KEY", 0o440),
	}
	mustWrite(t, dir, -1, files)
	ts := payloadDirs(t, dir)
	mustWrite(t, dir, -1, maps.Clone(files))
	if again := payloadDirs(t, dir); !slices.Equal(ts, again) {
		t.Fatalf("identical payload was republished: %q -> %q", ts, again)
	}
	// Missing links, of a top-level file and of a dir, are repaired without republishing.
	for _, link := range []string{"a", "certs"} {
		if err := os.Remove(filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, dir, -1, files)
	if again := payloadDirs(t, dir); !slices.Equal(ts, again) {
		t.Fatalf("repairing links republished the payload: %q -> %q", ts, again)
	}
	checkLayout(t, dir, files, -1)
}

// A bad payload is refused before anything is written: the error names what is wrong (never
// the data), the dir is unchanged, and a missing dir is not even created.
func TestWriteRefusesBadPayloads(t *testing.T) {
	ok := fileOf("SECRET-BYTES", 0o644)
	cases := map[string]struct {
		files map[string]File
		gid   int
		names string // what the error must quote
	}{
		"file and dir a":         {map[string]File{"a": ok, "a/b": ok}, -1, `"a"`},
		"file and dir deep":      {map[string]File{"certs/a": ok, "certs/a/b/c": ok, "z": ok}, -1, `"certs/a"`},
		"dot-dot escape":         {map[string]File{"ok/x": ok, "../x": ok}, -1, `"../x"`},
		"dot-dot inside":         {map[string]File{"ok/x": ok, "a/../b": ok}, -1, `"a/../b"`},
		"empty segment":          {map[string]File{"ok/x": ok, "a//b": ok}, -1, `"a//b"`},
		"absolute":               {map[string]File{"ok/x": ok, "/abs": ok}, -1, `"/abs"`},
		"dot segment":            {map[string]File{"ok/x": ok, "a/./b": ok}, -1, `"a/./b"`},
		"reserved segment":       {map[string]File{"ok/x": ok, "a/..b": ok}, -1, `"a/..b"`},
		"..data itself":          {map[string]File{"ok/x": ok, "..data": ok}, -1, `"..data"`},
		"into ..data":            {map[string]File{"ok/x": ok, "..data/x": ok}, -1, `"..data/x"`},
		"trailing slash":         {map[string]File{"ok/x": ok, "a/": ok}, -1, `"a/"`},
		"backslash":              {map[string]File{"ok/x": ok, `a\..\b`: ok}, -1, `"a\\..\\b"`},
		"empty path":             {map[string]File{"ok/x": ok, "": ok}, -1, `""`},
		"setuid mode":            {map[string]File{"ok/x": ok, "s": {Mode: os.ModeSetuid | 0o755}}, -1, `"s"`},
		"dir mode":               {map[string]File{"ok/x": ok, "d": {Mode: fs.ModeDir | 0o755}}, -1, `"d"`},
		"gid that means no gid":  {map[string]File{"ok/x": ok}, 1<<32 - 1, "4294967295"},
		"gid beyond 32 bits":     {map[string]File{"ok/x": ok}, 1 << 40, "1099511627776"},
		"top name of a file":     {map[string]File{"notes.txt/x": ok}, -1, `"notes.txt"`},
		"top name foreign link":  {map[string]File{"foreign/x": ok}, -1, `"foreign"`},
		"top name foreign dir":   {map[string]File{"foreigndir/x": ok}, -1, `"foreigndir"`},
		"sticky bit":             {map[string]File{"ok/x": {Mode: os.ModeSticky | 0o644}}, -1, `"ok/x"`},
		"setgid bit on a nested": {map[string]File{"ok/x/y": {Mode: os.ModeSetgid | 0o644}}, -1, `"ok/x/y"`},
	}

	dir := t.TempDir()
	mustWrite(t, dir, -1, map[string]File{"certs/a": fileOf("A", 0o644), "top": fileOf("T", 0o600)})
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
	before := snapshot(t, dir)
	for name, c := range cases {
		err := Writer{Dir: dir, GID: c.gid}.Write(c.files)
		if err == nil {
			t.Errorf("%s: Write succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), "SECRET-BYTES") {
			t.Errorf("%s: error leaks file data: %v", name, err)
		}
		if !strings.Contains(err.Error(), c.names) {
			t.Errorf("%s: error %q does not name %s", name, err, c.names)
		}
		if diff := treesnap.Diff(before, snapshot(t, dir)); diff != "" {
			t.Fatalf("%s: dir changed:\n%s", name, diff)
		}
		// A payload that is bad in itself does not even create a missing dir.
		if strings.HasPrefix(name, "top name") {
			continue
		}
		fresh := filepath.Join(t.TempDir(), "never")
		if err := (Writer{Dir: fresh, GID: c.gid}).Write(c.files); err == nil {
			t.Errorf("%s: Write into a fresh dir succeeded", name)
		}
		if _, err := os.Lstat(fresh); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: rejected payload created %s (err %v)", name, fresh, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a file was written outside dir")
	}
}

// A ..data that does not point at a payload dir is not followed.
func TestWriteRefusesForeignDataLink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	if err := (Writer{Dir: dir, GID: -1}).Write(map[string]File{"a": fileOf("x", 0o644)}); err == nil {
		t.Fatal("Write accepted a ..data pointing outside dir")
	}
	if diff := treesnap.Diff(before, snapshot(t, dir)); diff != "" {
		t.Fatalf("refused write changed dir:\n%s", diff)
	}
}

// What an interrupted write leaves behind, a payload dir and ..data_tmp, is removed by the
// next write.
func TestWriteCollectsLeftovers(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, -1, map[string]File{"a": fileOf("1", 0o644)})
	stale := "..2001_02_03_04_05_06.42"
	if err := os.Mkdir(filepath.Join(dir, stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stale, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	files := map[string]File{"b": fileOf("2", 0o644)}
	mustWrite(t, dir, -1, files)
	for _, gone := range []string{stale, "..data_tmp"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s should have been removed (err %v)", gone, err)
		}
	}
	checkLayout(t, dir, files, -1)
}

// Entries the writer did not make are never touched, across updates and a revocation: regular
// files and dirs, links out of dir, links into ..data that are not the writer's (their target is
// not "..data/<own name>", even if it once was the target of a path of the payload), and
// reserved names. The writer's own link of a dropped name does go.
func TestWriteSparesForeignEntries(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	links := map[string]string{
		"abs":     outside,
		"keys":    "..data/keys-but-not-my-name",
		"dangles": "..data/gone/x",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	regular := []string{"notes.txt", "..other"}
	for _, name := range regular {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("foreign"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "foreigndir"), 0o755); err != nil {
		t.Fatal(err)
	}
	v1 := map[string]File{"certs/a": fileOf("A", 0o644), "gone/x": fileOf("X", 0o644)}
	v2 := map[string]File{"certs/b": fileOf("B", 0o644)}
	for _, files := range []map[string]File{v1, v2, {}} {
		mustWrite(t, dir, -1, files)
		for name, target := range links {
			if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != target {
				t.Fatalf("foreign link %s -> %q (%v), want untouched -> %q", name, got, err, target)
			}
		}
		for _, name := range regular {
			if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != "foreign" {
				t.Fatalf("foreign file %s touched: %q, %v", name, got, err)
			}
		}
		if fi, err := os.Lstat(filepath.Join(dir, "foreigndir")); err != nil || !fi.IsDir() {
			t.Fatalf("foreign dir touched: %v, %v", fi, err)
		}
		if n := len(payloadDirs(t, dir)); n != 1 {
			t.Fatalf("%d payload dirs, want one", n)
		}
	}
	// The writer's own link for "gone" went with v2; the foreign "dangles" stayed.
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the writer's link for a dropped first segment is still there (err %v)", err)
	}
}

// The longest and deepest valid paths work, though the dir in front makes them longer than
// PATH_MAX: everything is made relative to the payload dir.
func TestWriteDeepestLongestPath(t *testing.T) {
	dir := t.TempDir()
	var segs []string
	for i := range 16 {
		segs = append(segs, fmt.Sprintf("%02d", i)+strings.Repeat("s", 251))
	}
	deepest := strings.Join(segs, "/") // 4063 bytes
	files := map[string]File{
		deepest:                        fileOf("DEEP", 0o640),
		segs[0] + "/shallow":           fileOf("SHALLOW", 0o644),
		strings.Repeat("d/", 15) + "f": fileOf("MANY", 0o644),
	}
	mustWrite(t, dir, -1, files)
	got, err := ReadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFiles(got, files) {
		t.Fatalf("ReadFiles = %s, want %s", describe(got), describe(files))
	}
	ts := payloadDirs(t, dir)
	mustWrite(t, dir, -1, files)
	if !slices.Equal(ts, payloadDirs(t, dir)) {
		t.Fatal("identical deep payload was republished")
	}
	// Replacing and removing the deep tree works too (old payload dir removed).
	mustWrite(t, dir, -1, map[string]File{"f": fileOf("F", 0o644)})
	checkLayout(t, dir, map[string]File{"f": fileOf("F", 0o644)}, -1)
}
