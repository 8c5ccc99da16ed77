package main

// A volume's directory: the tmpfs mounted at <state dir>/volumes/<volume id>, and what it holds.
//
//	record.json   the volume's record (records.go): names and flags, never data
//	shares/<i>/   share i's copy: its files as last fetched, out of the pod's view
//	data/         the pod's view, bind-mounted read-only onto the target
//
// After a refresh, data/ keeps the view it replaced until the volume's next change: an app that
// resolved data/..data just before the swap and opens the files one after another still finds
// each of them (removed at once, a file could be missing for an instant). A change that takes
// files away from the pod (a revocation, keys no longer shared) keeps nothing, and every change
// drops the kept view before writing anything, so a volume holds at most two sets of files.
//
// A share's copy is what it shows while it is granted, and what comes back after a revocation.
// The view is composed from the copies of the shares the pod may see (composeFiles: the first
// share listed wins a path), and its files are hard links to the copies' files, so a volume's
// bytes are held in memory once. volumeDir is the only code that writes the copies and the
// only code that builds the view: publish builds it from the copies it has just written, a
// reconcile rebuilds it from the copies on disk, through the same writeView.
//
// Every directory is written by internal/atomicwriter, so a reader (or a crash) sees a whole old
// or a whole new set of files. Writes to one volume are serialized by its lock (volumeLocks).

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/volume"
)

const (
	recordFile = "record.json"
	dataDir    = "data"   // the pod's view
	sharesDir  = "shares" // shares/<i>: share i's copy
)

// volumeDir is one volume's directory. Get one from volumeStore.dirOf.
type volumeDir struct {
	dir string // the tmpfs's mount point
	gid int    // the group owning the files written (the pod's fsGroup), or -1 (atomicwriter.Writer.GID)
}

func (vd volumeDir) dataDir() string { return filepath.Join(vd.dir, dataDir) }
func (vd volumeDir) shareDir(i int) string {
	return filepath.Join(vd.dir, sharesDir, strconv.Itoa(i))
}

// volumeView is a pod's view composed from the shares' files, not yet written.
type volumeView struct {
	files map[string]atomicwriter.File // path -> file: what data/ will hold
	// conflicts are the paths two shares both provide; the earlier share has each of them.
	conflicts []pathConflict
	// perShare is each share's files (nil for a share not shown): the copies the view's files
	// are linked from.
	perShare []map[string]atomicwriter.File
}

// composeView composes the view of shares (the volume's, in its order) from each one's files;
// perShare[i] is nil for a share that contributes nothing (revoked).
func composeView(shares []shareRef, perShare []map[string]atomicwriter.File) volumeView {
	files, conflicts := composeFiles(shares, perShare)
	return volumeView{files: files, conflicts: conflicts, perShare: perShare}
}

// populate fills a new volume: every share's copy, then the view linked from them.
func (vd volumeDir) populate(v volumeView) error {
	// shares/ is made here, in the new tmpfs, where the writer would first look for it and its
	// parent, and then make it.
	if err := os.Mkdir(filepath.Join(vd.dir, sharesDir), 0o755); err != nil {
		return err
	}
	for i, files := range v.perShare {
		if err := vd.writeCopy(i, files); err != nil {
			return err
		}
	}
	return vd.writeView(v, false)
}

// writeCopy replaces share i's copy with files; nil empties it.
func (vd volumeDir) writeCopy(i int, files map[string]atomicwriter.File) error {
	return atomicwriter.Writer{Dir: vd.shareDir(i), GID: vd.gid}.Write(files)
}

// writeView makes data/ hold exactly v's files, in one atomic swap. Each file is a hard link to
// the same file in a share's copy (atomicwriter.Writer.Origins): the first share whose copy has
// it with the same mode and bytes (a share that lost the path to an earlier one in composeFiles
// holds other bytes there, or the same ones). The writer writes a file it cannot link. keep keeps
// the view replaced, for readers still on it, until the next write (atomicwriter.KeepPrevious).
func (vd volumeDir) writeView(v volumeView, keep bool) error {
	origins := make(map[string]string, len(v.files))
	for p, f := range v.files {
		for i, copied := range v.perShare {
			if c, ok := copied[p]; ok && c.Mode == f.Mode && bytes.Equal(c.Data, f.Data) {
				origins[p] = vd.shareDir(i)
				break
			}
		}
	}
	return atomicwriter.Writer{Dir: vd.dataDir(), GID: vd.gid, Origins: origins, KeepPrevious: keep}.Write(v.files)
}

// dropPreviousView removes the view a refresh kept (writeView), before a change writes anything.
func (vd volumeDir) dropPreviousView() error {
	return atomicwriter.DropPrevious(vd.dataDir())
}

// rebuildView composes the view again from the copies on disk of the shares not revoked, and
// writes it, keeping the view it replaces when view says so (viewReplacedKept; writeView). It returns the paths two shares
// both provide, for the caller to report, and whether a view was kept: none when the view was
// the same (a source's new version with the same bytes swaps nothing), unless its files were
// not linked from the copies (the writer's step 5: it swaps in the same bytes, linked).
func (vd volumeDir) rebuildView(shares []shareState, view viewChange) (conflicts []pathConflict, kept bool, err error) {
	keep := view == viewReplacedKept
	refs := make([]shareRef, len(shares))
	perShare := make([]map[string]atomicwriter.File, len(shares))
	for i, st := range shares {
		refs[i] = st.shareRef
		if st.Told.hidden() {
			continue
		}
		files, err := atomicwriter.ReadFiles(vd.shareDir(i))
		if err != nil {
			return nil, false, err
		}
		perShare[i] = files
	}
	v := composeView(refs, perShare)
	// Only a view whose every file the new one still has is kept: a kept view shows its files
	// under a hidden name, and a key the source or the share no longer has must go at once.
	if keep {
		old, err := atomicwriter.ReadFiles(vd.dataDir())
		keep = err == nil
		for p := range old {
			if _, ok := v.files[p]; !ok {
				keep = false
			}
		}
	}
	link := filepath.Join(vd.dataDir(), "..data")
	before, _ := os.Readlink(link)
	if err := vd.writeView(v, keep); err != nil {
		return nil, false, err
	}
	after, _ := os.Readlink(link)
	return v.conflicts, keep && before != "" && after != before, nil
}

// dropRevokedCopies empties the copies of the revoked shares of a refreshing volume: a restore
// fetches fresh data anyway, so revoked bytes are not kept. (A refreshResource=false share keeps
// its copy: it is exactly what comes back.) Call it only with a record already saved, so that a
// crash never leaves a granted share with an empty copy.
func (vd volumeDir) dropRevokedCopies(rec volumeRecord) {
	if !rec.Refresh {
		return
	}
	for i, st := range rec.Shares {
		if st.Told.hidden() {
			if err := vd.writeCopy(i, nil); err != nil {
				klog.ErrorS(err, "Emptying a revoked share's copy failed", "volumeID", rec.VolumeID)
			}
		}
	}
}

// volumeMeasure is what a walk of a volume's tmpfs finds: what it holds in the budget's units, and
// what statfs(2) counts of those same entries.
type volumeMeasure struct {
	// held is in the budget's units (budget.go): every entry (file, directory, symbolic or hard
	// link: tmpfs keeps an inode and a dentry for each), each name and link target by its length,
	// and the pages of each file once, however many links it has.
	held int64
	// seen is what the kernel counts of the same entries (tmpfsUsage): the pages of each file
	// once and of each long link target, in the kernel's page size; and the inode space of each
	// entry and of the root, with each inode's extended attributes (an SELinux label: a tmpfs
	// mounted without context= labels every inode), which Linux counts there since 6.6. Where the
	// kernel counts attributes it lists less (an older kernel; a label a context= mount lists but
	// does not store), seen is larger than what it counts of the same entries, by about 100 bytes
	// an inode: up to that much of the inodes of files removed but kept open goes uncharged (never
	// their pages).
	seen tmpfsUsage
}

// measure walks the volume's tmpfs. held is what the budget charges a volume whose record no
// longer describes its disk: the record is a count of what a publish or a reconcile wrote, and
// after a failure the disk holds more (copies a failed cycle wrote, older copies only the view
// still links, a view kept for readers). Neither it nor the record can see a file a reader keeps
// open after it was removed: what the kernel counts beyond seen (kernelUsage). Call it with the
// volume's lock held: nothing else writes there meanwhile.
func (vd volumeDir) measure() (volumeMeasure, error) {
	root, err := os.OpenRoot(vd.dir)
	if err != nil {
		return volumeMeasure{}, err
	}
	defer root.Close()
	// The tmpfs's root, whose name is not on the tmpfs.
	top, err := root.Open(".")
	if err != nil {
		return volumeMeasure{}, err
	}
	fd := int(top.Fd())
	rootXattrs := xattrSpace(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(name string) (int, error) { return unix.Fgetxattr(fd, name, nil) })
	top.Close()
	m := volumeMeasure{held: volume.EntryBytes, seen: tmpfsUsage{inodeSpace: inodeSpaceBytes + rootXattrs}}
	err = m.addUnder(root, map[uint64]bool{}, int64(os.Getpagesize()))
	m.seen.inodeSpace = (m.seen.inodeSpace + inodeSpaceBytes - 1) / inodeSpaceBytes * inodeSpaceBytes
	return m, err
}

// addUnder adds what dir's entries hold, its subdirectories' through a root of their own: no path
// is ever joined, so a pod's path of up to 4096 bytes (validate.go) under the volume's directory
// cannot make a system call fail with ENAMETOOLONG (an entry's extended attributes are read
// through /proc/self/fd/<dir>/<name>). files holds the inodes whose pages are counted;
// kernelPage is the kernel's page size (the budget's pages are 4 KiB: volume.PageSize).
func (m *volumeMeasure) addUnder(dir *os.Root, files map[uint64]bool, kernelPage int64) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	viaFD := "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/"
	for _, e := range entries {
		m.held += volume.EntryBytes + volume.EntryNameBytes(e.Name())
		m.seen.inodeSpace += inodeSpaceBytes // a hard link too (shmem_link)
		var fi fs.FileInfo
		if e.Type().IsRegular() {
			if fi, err = e.Info(); err != nil { // lstat'ed by ReadDir already
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				if files[st.Ino] {
					continue // another link to a file counted: its pages and attributes are
				}
				files[st.Ino] = true
			}
		}
		m.seen.inodeSpace += xattrSpaceAt(viaFD + e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := dir.Readlink(e.Name())
			if err != nil {
				return err
			}
			m.held += volume.LinkTargetBytes(target)
			if len(target) >= volume.ShortSymlinkLen {
				m.seen.pageBytes += kernelPage
			}
		case e.IsDir():
			sub, err := dir.OpenRoot(e.Name())
			if err != nil {
				return err
			}
			err = m.addUnder(sub, files, kernelPage)
			sub.Close()
			if err != nil {
				return err
			}
		case fi != nil:
			m.held += volume.Pages(fi.Size())
			m.seen.pageBytes += (fi.Size() + kernelPage - 1) / kernelPage * kernelPage
		}
	}
	return nil
}

// inodeSpaceBytes is what a tmpfs mounted with nr_inodes takes of its inode space for each inode
// and each hard link (BOGO_INODE_SIZE, mm/shmem.c); statfs(2) reports that space in such units.
const inodeSpaceBytes = 1024

// xattrSpaceAt is xattrSpace of the entry at path, not followed.
func xattrSpaceAt(path string) int64 {
	return xattrSpace(func(b []byte) (int, error) { return unix.Llistxattr(path, b) },
		func(name string) (int, error) { return unix.Lgetxattr(path, name, nil) })
}

// xattrSpace is what the extended attributes an inode has (list lists their names, get sizes one)
// take of its tmpfs's inode space: 40 bytes each, its name and its value (simple_xattr_space,
// fs/xattr.c). One that cannot be read (gone meanwhile, or a file system without them) counts
// nothing: the walk's figure is then lower, and the volume charged more, never less.
func xattrSpace(list func([]byte) (int, error), get func(string) (int, error)) int64 {
	var names []byte
	for range 3 { // the list can grow between the call that sizes it and the one that reads it
		n, err := list(nil)
		if err != nil || n == 0 {
			return 0
		}
		buf := make([]byte, n)
		if n, err = list(buf); err == nil {
			names = buf[:n]
			break
		}
		if !errors.Is(err, unix.ERANGE) {
			return 0
		}
	}
	var space int64
	for name := range strings.SplitSeq(string(names), "\x00") {
		if name == "" {
			continue
		}
		if size, err := get(name); err == nil {
			space += 40 + int64(len(name)) + int64(size)
		}
	}
	return space
}

// tmpfsUsage is what the kernel counts in use in a tmpfs: its pages, and its inode space (an
// inode, or a hard link, takes inodeSpaceBytes, and its extended attributes more), in bytes.
type tmpfsUsage struct {
	pageBytes, inodeSpace int64
}

// beyond is what u holds that seen does not: the pages and inodes of files removed while a reader
// keeps them open (and whatever else the kernel holds there that a walk cannot see: a node that
// forces huge pages on every tmpfs gives each file one), charged in the budget's units, each
// inode's share of the space with its dentry (volume.EntryBytes) and a name of the longest length
// (volume.MaxEntryNameBytes), since the name is no longer there to measure.
func (u tmpfsUsage) beyond(seen tmpfsUsage) int64 {
	return max(0, u.pageBytes-seen.pageBytes) + max(0, u.inodeSpace-seen.inodeSpace)/inodeSpaceBytes*(volume.EntryBytes+volume.MaxEntryNameBytes)
}

// diskState is what two cheap reads tell of a volume's tmpfs: the kernel's count (kernelUsage),
// and the change time and size of the view's dir and of its shares' copies' dirs (layout).
// Whatever the atomic writer does there (a swap, a payload dir dropped or cleaned up) adds,
// replaces or removes an entry in one of those dirs, which sets its change time (and its size,
// which a tmpfs counts by entries, when their number changes). The zero diskState is no
// volume's: a layout is never empty.
type diskState struct {
	usage  tmpfsUsage
	layout string
}

// state reads the volume's diskState (for its first shares copies); ok is false where the
// kernel cannot count it (kernelUsage).
func (vd volumeDir) state(shares int) (diskState, bool) {
	usage, ok := vd.kernelUsage()
	if !ok {
		return diskState{}, false
	}
	return diskState{usage: usage, layout: vd.layout(shares)}, true
}

// countUnlinked counts what the kernel holds in the volume's tmpfs beyond what a walk of it finds
// (tmpfsUsage.beyond): files removed while a reader keeps them open. It walks only when the
// disk's state differs from last, the state of the last count (zero: none); counted is false when
// it did not walk, where the kernel cannot say (not a tmpfs), or when the walk failed (err).
func (vd volumeDir) countUnlinked(shares int, last diskState) (now diskState, unlinked int64, counted bool, err error) {
	now, ok := vd.state(shares)
	if !ok || now == last {
		return now, 0, false, nil
	}
	m, err := vd.measure()
	if err != nil {
		return now, 0, false, err
	}
	return now, now.usage.beyond(m.seen), true, nil
}

// layout is the change time and size of the view's dir and of the copies' dirs of the volume's
// shares (the first shares), which hold their payload dirs, ..data links and top-level links.
// Read by stat(2), not by listing the dirs.
func (vd volumeDir) layout(shares int) string {
	var b strings.Builder
	for i := -1; i < shares; i++ {
		dir := vd.dataDir()
		if i >= 0 {
			dir = vd.shareDir(i)
		}
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil {
			b.WriteString(strconv.FormatInt(st.Ctim.Nano(), 36) + "." + strconv.FormatInt(st.Size, 36))
		}
		b.WriteString("/")
	}
	return b.String()
}

// kernelUsage is what the kernel counts in use in the volume's tmpfs (statfs(2)). Unlike a walk
// and a record, it counts a file removed while a reader still keeps it open: a pod that keeps its
// files open across refreshes keeps every version's pages in the tmpfs, and no name leads to
// them. Not a tmpfs mounted on the volume's dir (a unit test's node: a plain directory, perhaps on
// a tmpfs /tmp, whose count would be everything else's on it): ok is false.
func (vd volumeDir) kernelUsage() (u tmpfsUsage, ok bool) {
	var dir, parent unix.Stat_t
	if unix.Stat(vd.dir, &dir) != nil || unix.Stat(filepath.Dir(vd.dir), &parent) != nil || dir.Dev == parent.Dev {
		return tmpfsUsage{}, false // not a mount point
	}
	var st unix.Statfs_t
	if err := unix.Statfs(vd.dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return tmpfsUsage{}, false
	}
	// The field types differ by architecture (Bsize is a uint32 on s390x).
	return tmpfsUsage{pageBytes: int64(st.Blocks-st.Bfree) * int64(st.Bsize), inodeSpace: int64(st.Files-st.Ffree) * inodeSpaceBytes}, true
}

// dropsFile says whether now lacks a file old has.
func dropsFile(old, now map[string]atomicwriter.File) bool {
	for p := range old {
		if _, ok := now[p]; !ok {
			return true
		}
	}
	return false
}
