package volume

// What a volume's files cost the kernel, in the budget's units: an entry (a file, a directory, a
// link), a name, a link's target, a file's pages; and what one share's files cost in the volume's
// layout (a copy, and the view's links to it). The node's budget charges volumes these figures,
// and Dir.Measure counts a tmpfs in them.

import (
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// PageSize is the budget's page: a file's bytes are charged in whole pages of it.
const PageSize = 4096

// EntryBytes is what the kernel keeps for one entry of a tmpfs (a file, a directory, a symbolic
// link, or a hard link: tmpfs counts each link as an inode, shmem_link, as its dentry cannot be
// reclaimed): an inode (shmem_inode_cache: 744 bytes on Linux 6.18, x86_64) and a dentry (192),
// rounded up to 1 KiB, which is also what tmpfs reserves per inode (BOGO_INODE_SIZE,
// mm/shmem.c). What an entry's name and a link's target cost besides is EntryNameBytes and
// LinkTargetBytes: a pod chooses the names (its items), so they are charged by their length.
const EntryBytes = 1024

// What the kernel allocates for a name or a link's target Beyond the entry (Linux, 64-bit).
const (
	// dnameInlineLen: a name shorter than this lives inside its dentry (DNAME_INLINE_LEN, 32
	// bytes, or 40 on newer kernels: 32 is the bound that charges more); a longer one takes an
	// allocation of its own (struct external_name: a 16-byte header, the name, its NUL).
	dnameInlineLen     = 32
	externalNameHeader = 16
	// shortSymlinkLen: a symbolic link whose target is shorter than this keeps a kmalloc'd copy
	// of it; a longer target takes a page of the tmpfs of its own (SHORT_SYMLINK_LEN,
	// mm/shmem.c). A top-level link points at "..data/<first segment>", so a segment of 121
	// bytes or more costs a page in the copy and another in the view.
	shortSymlinkLen = 128
)

// kmallocBytes is what an allocation of n bytes takes from the kernel's kmalloc caches, at most:
// n rounded up to a power of two, 8 at least.
func kmallocBytes(n int) int64 {
	s := int64(8)
	for s < int64(n) {
		s *= 2
	}
	return s
}

// EntryNameBytes is what an entry's name costs beside its dentry: nothing when it fits inside,
// else its own allocation.
func EntryNameBytes(name string) int64 {
	if len(name) < dnameInlineLen {
		return 0
	}
	return kmallocBytes(externalNameHeader + len(name) + 1)
}

// MaxEntryNameBytes is what the longest name a tmpfs takes (255 bytes) costs (EntryNameBytes:
// kmalloc-512): the charge of a removed file's name, which can no longer be measured.
const MaxEntryNameBytes = 512

// LinkTargetBytes is what a symbolic link's target costs: a page when long, else its copy.
func LinkTargetBytes(target string) int64 {
	if len(target) >= shortSymlinkLen {
		return PageSize
	}
	return kmallocBytes(len(target) + 1)
}

// Pages is n bytes rounded up to whole pages.
func Pages(n int64) int64 { return (n + PageSize - 1) / PageSize * PageSize }

// treeBytes is what the entries cost that files make in a directory the atomic writer fills
// (internal/atomicwriter's layout), their data aside: each file and each directory of their paths
// (by its name), a link per first segment (by its name and target), and the directory itself,
// its payload dir and its ..data link (at the longest payload dir name).
func treeBytes(files map[string]atomicwriter.File) int64 {
	payload := strings.Repeat("x", atomicwriter.MaxPayloadDirName)
	n := 3*EntryBytes + EntryNameBytes(payload) + EntryNameBytes("..data") + LinkTargetBytes(payload)
	tops, dirs := map[string]bool{}, map[string]bool{}
	for p := range files {
		top, _, _ := strings.Cut(p, "/")
		tops[top] = true
		for d := range atomicwriter.ParentDirs(p) {
			dirs[d] = true
		}
		n += EntryBytes + EntryNameBytes(path.Base(p))
	}
	for d := range dirs {
		n += EntryBytes + EntryNameBytes(path.Base(d))
	}
	for top := range tops {
		n += EntryBytes + EntryNameBytes(top) + LinkTargetBytes(atomicwriter.TopLinkTarget(top))
	}
	return n
}

// PathEntries is how many files and directories paths make: each path a file, and each distinct
// directory they need. What the driver's bound on a volume's entries caps.
func PathEntries(paths []string) int {
	dirs := map[string]bool{}
	for _, p := range paths {
		for d := range atomicwriter.ParentDirs(p) {
			dirs[d] = true
		}
	}
	return len(paths) + len(dirs)
}

// ChargedBytes is what one share's files cost: their bytes in whole pages, and the entries of
// the share's copy and of the view's hard links to it (which share the copy's pages, but not
// their names, links and dentries), names and link targets by their length.
func ChargedBytes(files map[string]atomicwriter.File) int64 {
	var n int64
	for _, f := range files {
		n += Pages(int64(len(f.Data)))
	}
	return n + 2*treeBytes(files)
}

// FilesEntries is how many files and directories files make (PathEntries).
func FilesEntries(files map[string]atomicwriter.File) int {
	return PathEntries(slices.Collect(maps.Keys(files)))
}
