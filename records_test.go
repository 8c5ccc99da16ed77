package main

// Specification of the volume store (internal/volume's Store): a record changes only by save, and a record
// found at start is charged at least what its file holds.

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// A record's shares change in the store only by save: what get and list hand out, and what
// save was given, are copies. A reconcile judges shares on its copy; when it fails before
// saving, the next cycle must find the shares as they were and try again.
func TestVolumeStoreChangesOnlyBySave(t *testing.T) {
	s := volume.NewStore(t.TempDir(), &volume.Budget{})
	rec := volume.Record{VolumeID: "vol-1", PodUID: "uid", TargetPath: "/target", Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "ca"}, ResourceVersion: "1"}}}
	if err := os.MkdirAll(s.MountPoint(rec.VolumeID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	rec.Shares[0].ResourceVersion = "changed after save"

	got, _ := s.Get("vol-1")
	got.Shares[0].Told = volume.ToldRevoked
	listed := s.List()
	listed[0].Shares[0].ResourceVersion = "changed in a listed copy"

	now, ok := s.Get("vol-1")
	if !ok {
		t.Fatal("the record is gone")
	}
	if st := now.Shares[0]; st.Told.Hidden() || st.ResourceVersion != "1" {
		t.Fatalf("the stored share changed without a save: %+v", st)
	}

	got.Shares[0].ResourceVersion = "2"
	if err := s.Save(got); err != nil {
		t.Fatal(err)
	}
	if now, _ := s.Get("vol-1"); !now.Shares[0].Told.Hidden() || now.Shares[0].ResourceVersion != "2" {
		t.Fatalf("after save: %+v, want revoked at resourceVersion 2", now.Shares[0])
	}
	onDisk, err := s.ReadRecord("vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if st := onDisk.Shares[0]; !st.Told.Hidden() || st.ResourceVersion != "2" {
		t.Fatalf("on disk after save: %+v", st)
	}
}

// A record written by an earlier version (indented JSON, larger than this version writes it) is
// charged as its file is on disk when it is resumed, and as this version writes it once saved.
func TestARecordFoundAtStartIsChargedWhatItsFileHolds(t *testing.T) {
	budget := &volume.Budget{}
	s := volume.NewStore(t.TempDir(), budget)
	rec := volume.Record{VolumeID: "vol-1", PodUID: "uid", TargetPath: "/target", Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "ca"}, ResourceVersion: "1"}}}
	for i := range 300 {
		rec.Items = append(rec.Items, volume.Item{Key: fmt.Sprintf("key-%d", i), Path: fmt.Sprintf("dir/file-%d", i)})
	}
	indented, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if volume.Pages(int64(len(indented))) <= volume.RecordPages(rec) {
		t.Fatalf("the indented record (%d bytes) takes no more pages than the compact one: the test shows nothing", len(indented))
	}
	if err := os.MkdirAll(s.MountPoint(rec.VolumeID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.RecordPath(rec.VolumeID), indented, 0o600); err != nil {
		t.Fatal(err)
	}
	s.Remember(rec)
	if got, want := budget.InUse(), volume.RecordedBytes(rec)-volume.RecordPages(rec)+volume.Pages(int64(len(indented))); got != want {
		t.Fatalf("resumed: charged %d bytes, want %d (the record's file as it is on disk)", got, want)
	}
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	if got, want := budget.InUse(), volume.RecordedBytes(rec); got != want {
		t.Fatalf("saved again: charged %d bytes, want %d (the record as this version writes it)", got, want)
	}
}
