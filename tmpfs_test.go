package main

// Specification of a volume's tmpfs mount data (tmpfs.go), without root: its size and its
// number of inodes are always capped, and the inode cap leaves room for a volume at its bound of
// files and directories while it is updated. The mount itself: tmpfs_root_test.go.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestTmpfsMountDataCapsSizeAndInodes(t *testing.T) {
	opts := strings.Split(tmpfsMountData(4<<20, `context="a:b:c:s0"`), ",")
	for _, want := range []string{"size=4194304", fmt.Sprintf("nr_inodes=%d", tmpfsInodes), "mode=0755", `context="a:b:c:s0"`} {
		if !slices.Contains(opts, want) {
			t.Errorf("mount data %q lacks %s", opts, want)
		}
	}
	// A volume at the bound holds its files and directories twice (the copies and the view's
	// links), with a link per file at each top at most: 4N; an update writes a new copy or view
	// beside the old one: 2N more.
	// Much more is memory the budget does not see.
	if lo, hi := 6*maxVolumeEntries, 8*maxVolumeEntries+128; tmpfsInodes < lo || tmpfsInodes > hi {
		t.Errorf("nr_inodes %d, want from %d (what a volume of %d files and directories needs during an update) to %d", tmpfsInodes, lo, maxVolumeEntries, hi)
	}
}
