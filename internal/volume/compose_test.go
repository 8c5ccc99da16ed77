package volume

// Specification of the view's composition (compose.go): the first share listed wins a path, and a
// file of one share never shadows a directory of another; each path lost is reported.

import (
	"testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

func TestComposeFilesFirstShareWinsAndReportsConflicts(t *testing.T) {
	f := func(s string) atomicwriter.File { return atomicwriter.File{Data: []byte(s), Mode: 0o644} }
	files, conflicts := composeFiles([]map[string]atomicwriter.File{
		{"ca.crt": f("a"), "dir/x": f("a")},
		{"ca.crt": f("b"), "dir/y": f("b"), "dir": f("b-file")},
		nil, // revoked
	})
	if string(files["ca.crt"].Data) != "a" || string(files["dir/x"].Data) != "a" || string(files["dir/y"].Data) != "b" {
		t.Errorf("files %v", files)
	}
	if _, ok := files["dir"]; ok {
		t.Error("a file of the second share shadows a directory of the first")
	}
	if len(conflicts) != 2 {
		t.Fatalf("conflicts %+v, want ca.crt and dir", conflicts)
	}
	for _, c := range conflicts {
		if c.Kept != 0 || c.Dropped != 1 {
			t.Errorf("conflict %+v", c)
		}
	}
}
