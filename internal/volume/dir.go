package volume

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// The entries of a volume's directory.
const (
	RecordFile = "record.json" // the volume's record: the Store writes it here, and nothing else does
	ViewDir    = "data"        // the pod's view
	CopiesDir  = "shares"      // shares/<i>: share i's copy
)

// Dir is one volume's directory: the tmpfs's mount point, Path, and the group owning the files
// written, GID (the pod's fsGroup), or -1 (atomicwriter.Writer.GID).
type Dir struct {
	Path string
	GID  int
}

// ViewPath is the pod's view, the directory bound onto the pod's target.
func (vd Dir) ViewPath() string { return filepath.Join(vd.Path, ViewDir) }

// CopyPath is share i's copy.
func (vd Dir) CopyPath(i int) string {
	return filepath.Join(vd.Path, CopiesDir, strconv.Itoa(i))
}

// View is a pod's view composed from the shares' files, not yet written.
type View struct {
	files map[string]atomicwriter.File // path -> file: what data/ will hold
	// Conflicts are the paths two shares both provide; the earlier share has each of them.
	Conflicts []Conflict
	// perShare is each share's files (nil for a share not shown): the copies the view's files
	// are linked from.
	perShare []map[string]atomicwriter.File
}

// FileCount is how many files the view holds.
func (v View) FileCount() int { return len(v.files) }

// ComposeView composes the view of the volume's shares, in its order, from each one's files;
// perShare[i] is nil for a share that contributes nothing (revoked).
func ComposeView(perShare []map[string]atomicwriter.File) View {
	files, conflicts := composeFiles(perShare)
	return View{files: files, Conflicts: conflicts, perShare: perShare}
}

// Populate fills a new volume: every share's copy, then the view linked from them.
func (vd Dir) Populate(v View) error {
	// (1) shares/ is made here, in the new tmpfs, where the writer would first look for it and
	// its parent, and then make it.
	if err := os.Mkdir(filepath.Join(vd.Path, CopiesDir), 0o755); err != nil {
		return err
	}
	for i, files := range v.perShare { // (2)
		if err := vd.WriteCopy(i, files); err != nil {
			return err
		}
	}
	return vd.writeView(v, false) // (3)
}

// WriteCopy replaces share i's copy with files; nil empties it.
func (vd Dir) WriteCopy(i int, files map[string]atomicwriter.File) error {
	return atomicwriter.Writer{Dir: vd.CopyPath(i), GID: vd.GID}.Write(files)
}

// writeView makes data/ hold exactly v's files, in one atomic swap. Each file is a hard link to
// the same file in a share's copy (atomicwriter.Writer.Origins): the first share whose copy has
// it with the same mode and bytes (a share that lost the path to an earlier one in composeFiles
// holds other bytes there, or the same ones). The writer writes a file it cannot link. keep keeps
// the view replaced, for readers still on it, until the next write (atomicwriter.KeepPrevious).
func (vd Dir) writeView(v View, keep bool) error {
	origins := make(map[string]string, len(v.files))
	for p, f := range v.files {
		for i, copied := range v.perShare {
			if c, ok := copied[p]; ok && c.Mode == f.Mode && bytes.Equal(c.Data, f.Data) {
				origins[p] = vd.CopyPath(i)
				break
			}
		}
	}
	return atomicwriter.Writer{Dir: vd.ViewPath(), GID: vd.GID, Origins: origins, KeepPrevious: keep}.Write(v.files)
}

// DropPreviousView removes the view a refresh kept (writeView), before a change writes anything.
func (vd Dir) DropPreviousView() error {
	return atomicwriter.DropPrevious(vd.ViewPath())
}

// RebuildView composes the view again from the copies on disk of the shares shown (shown[i] for
// the volume's share i), and writes it, keeping the view it replaces when keep says so (a change
// by refreshes alone; writeView). It returns the paths two shares both provide, for the caller to
// report, and whether a view was kept: none when the view was the same (a source's new version
// with the same bytes swaps nothing), unless its files were not linked from the copies (the
// writer's step 5: it swaps in the same bytes, linked).
func (vd Dir) RebuildView(shown []bool, keep bool) (conflicts []Conflict, kept bool, err error) {
	// (1) The copies of the shares shown.
	perShare := make([]map[string]atomicwriter.File, len(shown))
	for i, isShown := range shown {
		if !isShown {
			continue
		}
		files, err := atomicwriter.ReadFiles(vd.CopyPath(i))
		if err != nil {
			return nil, false, err
		}
		perShare[i] = files
	}
	v := ComposeView(perShare) // (2)
	// (3) Only a view whose every file the new one still has is kept: a kept view shows its files
	// under a hidden name, and a key the source or the share no longer has must go at once.
	if keep {
		old, err := atomicwriter.ReadFiles(vd.ViewPath())
		keep = err == nil
		for p := range old {
			if _, ok := v.files[p]; !ok {
				keep = false
			}
		}
	}
	link := filepath.Join(vd.ViewPath(), "..data")
	before, _ := os.Readlink(link)
	if err := vd.writeView(v, keep); err != nil { // (4)
		return nil, false, err
	}
	// (5)
	after, _ := os.Readlink(link)
	return v.Conflicts, keep && before != "" && after != before, nil
}

// DropsFile says whether now lacks a file old has.
func DropsFile(old, now map[string]atomicwriter.File) bool {
	for p := range old {
		if _, ok := now[p]; !ok {
			return true
		}
	}
	return false
}
