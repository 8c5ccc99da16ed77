package main

// Specification of the volume store (records.go): a record changes only by save, and a record
// found at start is charged at least what its file holds.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/volume"
)

// A record's shares change in the store only by save: what get and list hand out, and what
// save was given, are copies. A reconcile judges shares on its copy; when it fails before
// saving, the next cycle must find the shares as they were and try again.
func TestVolumeStoreChangesOnlyBySave(t *testing.T) {
	s := newVolumeStore(t.TempDir(), &volumeBudget{})
	rec := volumeRecord{VolumeID: "vol-1", PodUID: "uid", TargetPath: "/target", Shares: []shareState{{shareRef: shareRef{Kind: kindSecret, Name: "ca"}, ResourceVersion: "1"}}}
	if err := os.MkdirAll(s.mountPoint(rec.VolumeID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.save(rec); err != nil {
		t.Fatal(err)
	}
	rec.Shares[0].ResourceVersion = "changed after save"

	got, _ := s.get("vol-1")
	got.Shares[0].Told = toldRevoked
	listed := s.list()
	listed[0].Shares[0].ResourceVersion = "changed in a listed copy"

	now, ok := s.get("vol-1")
	if !ok {
		t.Fatal("the record is gone")
	}
	if st := now.Shares[0]; st.Told.hidden() || st.ResourceVersion != "1" {
		t.Fatalf("the stored share changed without a save: %+v", st)
	}

	got.Shares[0].ResourceVersion = "2"
	if err := s.save(got); err != nil {
		t.Fatal(err)
	}
	if now, _ := s.get("vol-1"); !now.Shares[0].Told.hidden() || now.Shares[0].ResourceVersion != "2" {
		t.Fatalf("after save: %+v, want revoked at resourceVersion 2", now.Shares[0])
	}
	onDisk, err := s.readRecord("vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if st := onDisk.Shares[0]; !st.Told.hidden() || st.ResourceVersion != "2" {
		t.Fatalf("on disk after save: %+v", st)
	}
}

// A record written by an earlier version (indented JSON, larger than this version writes it) is
// charged as its file is on disk when it is resumed, and as this version writes it once saved.
func TestARecordFoundAtStartIsChargedWhatItsFileHolds(t *testing.T) {
	budget := &volumeBudget{}
	s := newVolumeStore(t.TempDir(), budget)
	rec := volumeRecord{VolumeID: "vol-1", PodUID: "uid", TargetPath: "/target", Shares: []shareState{{shareRef: shareRef{Kind: kindSecret, Name: "ca"}, ResourceVersion: "1"}}}
	for i := range 300 {
		rec.Items = append(rec.Items, item{Key: fmt.Sprintf("key-%d", i), Path: fmt.Sprintf("dir/file-%d", i)})
	}
	indented, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if volume.Pages(int64(len(indented))) <= recordPages(rec) {
		t.Fatalf("the indented record (%d bytes) takes no more pages than the compact one: the test shows nothing", len(indented))
	}
	if err := os.MkdirAll(s.mountPoint(rec.VolumeID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.recordPath(rec.VolumeID), indented, 0o600); err != nil {
		t.Fatal(err)
	}
	s.remember(rec)
	if got, want := budget.inUse(), volumeBytes(rec)-recordPages(rec)+volume.Pages(int64(len(indented))); got != want {
		t.Fatalf("resumed: charged %d bytes, want %d (the record's file as it is on disk)", got, want)
	}
	if err := s.save(rec); err != nil {
		t.Fatal(err)
	}
	if got, want := budget.inUse(), volumeBytes(rec); got != want {
		t.Fatalf("saved again: charged %d bytes, want %d (the record as this version writes it)", got, want)
	}
}

// A record is replaced whole, through a temporary file beside it. One an interrupted save left
// is replaced and leaves nothing behind. A symlink, a hard link or a directory under its name is
// neither written through nor removed: the save fails saying so, and the record, the link and
// the file it leads to are as they were. A rename that fails says so and leaves no temporary
// file.
func TestARecordIsSavedThroughItsTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, volume.RecordFile)
	tmp := filepath.Join(dir, "."+volume.RecordFile+".tmp")
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
