package atomicwriter

// Specifies ReadFiles: it returns exactly the current set, an empty one where nothing was
// written yet, and refuses what Write never makes. (Reads racing with writes: race_test.go.)

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// What ReadFiles returns, written into another dir, gives the same set: odd names, empty and
// binary files, modes.
func TestReadFilesRoundTrip(t *testing.T) {
	src := t.TempDir()
	want := map[string]File{
		".dockerconfigjson": fileOf(`{"auths":{}}`, 0o600),
		"empty":             fileOf("", 0o600),
		"binary":            {Data: []byte{0, 1, 2, 255, '\n'}, Mode: 0o400},
		"certs/deep/ca.pem": fileOf("CA", 0o644),
	}
	mustWrite(t, src, -1, want)
	got, err := ReadFiles(src)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFiles(got, want) {
		t.Fatalf("ReadFiles = %s, want %s", describe(got), describe(want))
	}
	// Moved aside and back, the way the driver uses it.
	dst := filepath.Join(t.TempDir(), "moved")
	mustWrite(t, dst, -1, got)
	checkLayout(t, dst, want, -1)
}

// A dir without ..data, or no dir at all, holds the empty set (a non-nil map).
func TestReadFilesWithoutData(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		got, err := ReadFiles(dir)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("ReadFiles(%s) = %v, %v; want an empty non-nil map", dir, got, err)
		}
	}
}

// A ..data that does not point at a payload dir is not followed.
func TestReadFilesRefusesForeignDataLink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFiles(dir); err == nil {
		t.Fatalf("ReadFiles followed a ..data pointing outside dir: %s", describe(got))
	}
}

// Anything in the payload dir that Write never makes is an error for ReadFiles; Write does not
// take such a damaged payload dir for the current payload, and publishes a clean one.
func TestReadFilesRefusesForeignEntries(t *testing.T) {
	files := map[string]File{"ca.crt": fileOf("CA", 0o644), "certs/tls.crt": fileOf("CERT", 0o644)}
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
		mustWrite(t, dir, -1, files)
		if err := f(filepath.Join(dir, payloadDirs(t, dir)[0])); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadFiles(dir); err == nil {
			t.Errorf("%s: ReadFiles = %s, want an error", name, describe(got))
		}
		if err := (Writer{Dir: dir, GID: -1}).Write(files); err != nil {
			t.Fatalf("%s: rewrite: %v", name, err)
		}
		checkLayout(t, dir, files, -1)
	}
}
