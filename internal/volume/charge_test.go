package volume

// Specification of what a volume's files are charged (charge.go): their bytes in whole pages, and
// every entry of a share's copy and of the view's links to it, names and link targets by their
// length, as the kernel holds them.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// A share's files cost their bytes in whole pages, and every entry of its copy and of the view's
// links to it: each file, each directory of their paths, a link per first segment and the
// copy's three (EntryBytes each, twice), with what short names and link targets take besides:
// ..data's target and the payload dir's name (up to 32 bytes: 64 each), each top-level link's
// target ("..data/a": 16).
func TestChargedBytesArePagesAndEntries(t *testing.T) {
	files := map[string]atomicwriter.File{"a": {Data: []byte("x")}, "b": {Data: make([]byte, 4096)}, "c": {Data: make([]byte, 4097)}, "d": {}}
	if got, want := ChargedBytes(files), int64(4096+4096+8192)+2*((4+4+3)*EntryBytes+2*64+4*16); got != want {
		t.Errorf("ChargedBytes = %d, want %d", got, want)
	}
	// An empty file is not free, nor is a directory.
	if got, want := ChargedBytes(map[string]atomicwriter.File{"x/y/z": {}}), int64(2*((1+2+1+3)*EntryBytes+2*64+16)); got != want {
		t.Errorf("ChargedBytes of one empty file two directories deep = %d, want %d", got, want)
	}
}

// Volumes charged what they hold, as measured on a node: a thousand files sixteen segments deep, of 4 KiB
// each, used some 40 MiB of kernel memory and were charged 4 MiB; a Secret of empty values was
// charged nothing however many keys it had.
func TestManyEntriesAreChargedWhatTheKernelHolds(t *testing.T) {
	deep := map[string]atomicwriter.File{}
	for i := range 1000 {
		p := fmt.Sprintf("d%d", i)
		for s := range 15 {
			p += fmt.Sprintf("/s%d", s)
		}
		deep[p] = atomicwriter.File{Data: make([]byte, 4096)}
	}
	if got := ChargedBytes(deep); got < 36<<20 {
		t.Errorf("1000 files 16 segments deep charged %d bytes (%.1f MiB), want at least 36 MiB (4 MiB of pages and 32000 entries)", got, float64(got)/(1<<20))
	}
	empty := map[string]atomicwriter.File{}
	for i := range 4000 {
		empty[fmt.Sprintf("k%d", i)] = atomicwriter.File{}
	}
	if got := ChargedBytes(empty); got < 4000*4*EntryBytes {
		t.Errorf("4000 empty files charged %d bytes, want at least %d (a file and its top link, in the copy and the view)", got, 4000*4*EntryBytes)
	}
}

// A removed file's name is charged as the longest a tmpfs takes.
func TestMaxEntryNameBytesIsTheLongestNamesCost(t *testing.T) {
	if got := EntryNameBytes(strings.Repeat("n", 255)); got != MaxEntryNameBytes {
		t.Errorf("a 255-byte name costs %d, MaxEntryNameBytes is %d", got, MaxEntryNameBytes)
	}
}
