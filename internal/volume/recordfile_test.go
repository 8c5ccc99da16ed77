package volume

// Specification of the record's file (recordfile.go): written whole, through a temporary file
// beside it, never through or over what is not the driver's.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A record is replaced whole, through a temporary file beside it. One an interrupted save left
// is replaced and leaves nothing behind. A symlink, a hard link or a directory under its name is
// neither written through nor removed: the save fails saying so, and the record, the link and
// the file it leads to are as they were. A rename that fails says so and leaves no temporary
// file.
func TestARecordIsSavedThroughItsTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, RecordFile)
	tmp := filepath.Join(dir, "."+RecordFile+".tmp")
	const saved = `{"volumeID":"vol-1"}`
	unchanged := func(what, p, want string) {
		t.Helper()
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Fatalf("%s: %q, %v; want %q", what, b, err, want)
		}
	}

	must(t, os.WriteFile(tmp, []byte(`{"volumeID":"left by a crash"}`), 0o644))
	must(t, writeRecordFile(path, []byte(saved)))
	unchanged("the record after a save", path, saved)
	fi, err := os.Stat(path)
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the record's mode is %v, want 0600", fi.Mode())
	}
	if _, err := os.Lstat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is still there: %v", err)
	}

	other := filepath.Join(dir, "other")
	must(t, os.WriteFile(other, []byte("not the driver's"), 0o644))
	for _, in := range []struct {
		name  string
		plant func() error
	}{
		{"a symlink", func() error { return os.Symlink(other, tmp) }},
		{"a file with 2 hard links", func() error { return os.Link(other, tmp) }},
		{"a directory", func() error { return os.Mkdir(tmp, 0o700) }},
	} {
		must(t, in.plant())
		err := writeRecordFile(path, []byte(`{"volumeID":"vol-2"}`))
		if !errors.Is(err, errRecordTempInTheWay) || !strings.Contains(err.Error(), tmp+" is "+in.name) {
			t.Fatalf("a save with %s in the temporary file's place: %v, want it refused naming the file and what it is", in.name, err)
		}
		unchanged("the file the link leads to", other, "not the driver's")
		unchanged("the record after a save refused for "+in.name, path, saved)
		if _, err := os.Lstat(tmp); err != nil {
			t.Fatalf("%s in the temporary file's place was removed: %v", in.name, err)
		}
		must(t, os.Remove(tmp))
	}

	notAFile := filepath.Join(dir, "dir")
	must(t, os.MkdirAll(filepath.Join(notAFile, "in"), 0o700))
	err = writeRecordFile(notAFile, []byte(saved))
	if le := new(os.LinkError); !errors.As(err, &le) {
		t.Fatalf("a rename over a directory: %v, want an *os.LinkError", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".dir.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed rename left its temporary file: %v", err)
	}
}
