package main

// Specification of the record's format on disk: a record holding every field, and every state a
// share may be in, is written byte for byte as testdata/record-format.json says, and that file
// reads back as the same record. A driver before a change and one after resume each other's
// volumes only while both hold: a field renamed, reordered, or newly written when empty fails
// here.

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

func everyFieldRecord() volume.Record {
	rec := volume.Record{
		VolumeID: "csi-0123456789abcdef", Refresh: true,
		PodNamespace: "app", PodName: "web-0", PodUID: "uid-pod", ServiceAccount: "web",
		TargetPath:    "/var/lib/kubelet/pods/uid-pod/volumes/kubernetes.io~csi/shared/mount",
		CreatedTarget: true, DefaultMode: 0o440, GID: 2000, MountContext: `system_u:object_r:container_file_t:s0:c1,c2`,
		Items:     []volume.Item{{Key: "tls.crt", Path: "certs/tls.crt"}, {Share: 1, Key: "config", Path: "app.conf", Mode: 0o400}},
		KeptBytes: 6144,
	}
	for i, t := range allTold {
		rec.Shares = append(rec.Shares, volume.ShareState{
			Ref:             share.Ref{Kind: []share.Kind{share.KindSecret, share.KindConfigMap}[i%2], Name: "share-" + string(rune('a'+i))},
			SourceNamespace: "src", SourceName: "source", ResourceVersion: "42",
			Told: t, ShareUID: "uid-share", SourceUID: "uid-source", Bytes: 12288, Entries: 3,
		})
	}
	rec.Shares[0].Exposed = share.Exposure{{Key: "tls.crt", Path: "tls.crt"}, {Key: "ca", Path: "ca.crt"}}
	return rec
}

func TestARecordIsWrittenAndReadInItsFormat(t *testing.T) {
	want, err := os.ReadFile("testdata/record-format.json")
	if err != nil {
		t.Fatal(err)
	}
	rec := everyFieldRecord()
	got, err := volume.EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.TrimSpace(want)) {
		t.Errorf("the record is written as\n%s\nwant\n%s", got, want)
	}
	var read volume.Record
	if err := json.Unmarshal(want, &read); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(read, rec) {
		t.Errorf("testdata/record-format.json reads as\n%+v\nwant\n%+v", read, rec)
	}
}
