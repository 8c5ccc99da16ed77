package atomicwriter

// Specifies Writer.KeepPrevious: a reader that opens one file after another (k1, k2, k1) while
// a write swaps sets under it never finds a file of the set it resolved missing, and at most two payload dirs
// exist between writes; DropPrevious leaves only the current one.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// readAcrossSwaps does what a reader racing with n writes does at its worst, one step at a
// time: it resolves ..data (as the lookup of dir/k1 or dir/..data/k1 does), the writer swaps in
// the next set, and the reader goes on to open k1, k2, k1 in the set it resolved. It returns how
// many of those opens found no file. (Run concurrently, the same interleaving happens when a
// reader's lookup is preempted between resolving ..data and reaching the file.)
func readAcrossSwaps(t *testing.T, keep bool, n int) (missing int) {
	dir := t.TempDir()
	w := Writer{Dir: dir, GID: -1, KeepPrevious: keep}
	set := func(i int) map[string]File {
		v := []byte(strconv.Itoa(i))
		return map[string]File{"k1": {Data: v, Mode: 0o644}, "k2": {Data: v, Mode: 0o644}}
	}
	if err := w.Write(set(0)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		resolved, err := os.Readlink(filepath.Join(dir, dataLink))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(set(i)); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"k1", "k2", "k1"} {
			b, err := os.ReadFile(filepath.Join(dir, resolved, k))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing++
			case err != nil:
				t.Fatal(err)
			case string(b) != strconv.Itoa(i-1):
				t.Fatalf("swap %d: %s of the resolved set holds %q, want %d", i, k, b, i-1)
			}
		}
	}
	return missing
}

func TestKeepPreviousNoFileOfASetGoesMissingUnderAReader(t *testing.T) {
	const swaps = 100
	if missing := readAcrossSwaps(t, true, swaps); missing > 0 {
		t.Errorf("with KeepPrevious, %d of %d reads across %d swaps found no file", missing, 3*swaps, swaps)
	}
	// The kubelet's behaviour (the previous set removed at once), for the record: every read.
	if missing := readAcrossSwaps(t, false, swaps); missing != 3*swaps {
		t.Errorf("without KeepPrevious, %d of %d reads across %d swaps found no file, want all", missing, 3*swaps, swaps)
	}
}

func TestKeepPreviousKeepsOneSetAndDropPreviousRemovesIt(t *testing.T) {
	dir := t.TempDir()
	w := Writer{Dir: dir, GID: -1, KeepPrevious: true}
	for i := range 5 {
		if err := w.Write(map[string]File{"k": {Data: []byte(strconv.Itoa(i)), Mode: 0o644}}); err != nil {
			t.Fatal(err)
		}
		if n, want := len(payloadDirs(t, dir)), min(i+1, 2); n != want {
			t.Fatalf("after write %d: %d payload dirs, want %d", i, n, want)
		}
	}
	// An identical payload swaps nothing: the set a reader could be on is the current one, and
	// the kept one goes.
	if err := w.Write(map[string]File{"k": {Data: []byte("4"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if n := len(payloadDirs(t, dir)); n != 1 {
		t.Errorf("after an identical write: %d payload dirs, want 1", n)
	}
	if err := w.Write(map[string]File{"k": {Data: []byte("5"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if err := DropPrevious(dir); err != nil {
		t.Fatal(err)
	}
	if n := len(payloadDirs(t, dir)); n != 1 {
		t.Errorf("after DropPrevious: %d payload dirs, want 1", n)
	}
	got, err := ReadFiles(dir)
	if err != nil || string(got["k"].Data) != "5" {
		t.Errorf("after DropPrevious: %v, %v; want k=5", got, err)
	}
	// A write without KeepPrevious removes a kept set too.
	w.KeepPrevious = true
	if err := w.Write(map[string]File{"k": {Data: []byte("6"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	w.KeepPrevious = false
	if err := w.Write(map[string]File{"k": {Data: []byte("7"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	if n := len(payloadDirs(t, dir)); n != 1 {
		t.Errorf("after a write without KeepPrevious: %d payload dirs, want 1", n)
	}
	if err := DropPrevious(filepath.Join(dir, "none")); err != nil {
		t.Errorf("DropPrevious of a missing dir: %v", err)
	}
}
