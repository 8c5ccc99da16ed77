package volume

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Measurement is what a walk of a volume's tmpfs finds: what it holds in the budget's units, and
// what statfs(2) counts of those same entries.
type Measurement struct {
	// Held is in the budget's units (charge.go): every entry (file, directory, symbolic or hard
	// link: tmpfs keeps an inode and a dentry for each), each name and link target by its length,
	// and the pages of each file once, however many links it has.
	Held int64
	// Seen is what the kernel counts of the same entries (Usage): the pages of each file
	// once and of each long link target, in the kernel's page size; and the inode space of each
	// entry and of the root, with each inode's extended attributes (an SELinux label: a tmpfs
	// mounted without context= labels every inode), which Linux counts there since 6.6. Where the
	// kernel counts attributes it lists less (an older kernel; a label a context= mount lists but
	// does not store), Seen is larger than what it counts of the same entries, by about 100 bytes
	// an inode: up to that much of the inodes of files removed but kept open goes uncharged (never
	// their pages).
	Seen Usage
}

// Measure walks the volume's tmpfs. Held is what the budget charges a volume whose record no
// longer describes its disk: the record is a count of what a publish or a reconcile wrote, and
// after a failure the disk holds more (copies a failed cycle wrote, older copies only the view
// still links, a view kept for readers). Neither it nor the record can see a file a reader keeps
// open after it was removed: what the kernel counts beyond Seen (KernelUsage). Call it with the
// volume's lock held: nothing else writes there meanwhile.
func (vd Dir) Measure() (Measurement, error) {
	root, err := os.OpenRoot(vd.Path)
	if err != nil {
		return Measurement{}, err
	}
	defer root.Close()
	// The tmpfs's root, whose name is not on the tmpfs.
	top, err := root.Open(".")
	if err != nil {
		return Measurement{}, err
	}
	fd := int(top.Fd())
	rootXattrs := xattrSpace(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) },
		func(name string) (int, error) { return unix.Fgetxattr(fd, name, nil) })
	top.Close()
	m := Measurement{Held: EntryBytes, Seen: Usage{InodeSpace: InodeSpaceBytes + rootXattrs}}
	err = m.addUnder(root, map[uint64]bool{}, int64(os.Getpagesize()))
	m.Seen.InodeSpace = (m.Seen.InodeSpace + InodeSpaceBytes - 1) / InodeSpaceBytes * InodeSpaceBytes
	return m, err
}

// addUnder adds what dir's entries hold, its subdirectories' through a root of their own: no path
// is ever joined, so a pod's path of up to 4096 bytes (the most the driver accepts) under the volume's directory
// cannot make a system call fail with ENAMETOOLONG (an entry's extended attributes are read
// through /proc/self/fd/<dir>/<name>). files holds the inodes whose pages are counted;
// kernelPage is the kernel's page size (the budget's pages are 4 KiB: PageSize).
func (m *Measurement) addUnder(dir *os.Root, files map[uint64]bool, kernelPage int64) error {
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
		m.Held += EntryBytes + EntryNameBytes(e.Name())
		m.Seen.InodeSpace += InodeSpaceBytes // a hard link too (shmem_link)
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
		m.Seen.InodeSpace += xattrSpaceAt(viaFD + e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			target, err := dir.Readlink(e.Name())
			if err != nil {
				return err
			}
			m.Held += LinkTargetBytes(target)
			if len(target) >= shortSymlinkLen {
				m.Seen.PageBytes += kernelPage
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
			m.Held += Pages(fi.Size())
			m.Seen.PageBytes += (fi.Size() + kernelPage - 1) / kernelPage * kernelPage
		}
	}
	return nil
}

// InodeSpaceBytes is what a tmpfs mounted with nr_inodes takes of its inode space for each inode
// and each hard link (BOGO_INODE_SIZE, mm/shmem.c); statfs(2) reports that space in such units.
const InodeSpaceBytes = 1024

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

// Usage is what the kernel counts in use in a tmpfs: its pages, and its inode space (an
// inode, or a hard link, takes InodeSpaceBytes, and its extended attributes more), in bytes.
type Usage struct {
	PageBytes, InodeSpace int64
}

// Beyond is what u holds that seen does not: the pages and inodes of files removed while a reader
// keeps them open (and whatever else the kernel holds there that a walk cannot see: a node that
// forces huge pages on every tmpfs gives each file one), charged in the budget's units, each
// inode's share of the space with its dentry (EntryBytes) and a name of the longest length
// (MaxEntryNameBytes), since the name is no longer there to measure.
func (u Usage) Beyond(seen Usage) int64 {
	return max(0, u.PageBytes-seen.PageBytes) + max(0, u.InodeSpace-seen.InodeSpace)/InodeSpaceBytes*(EntryBytes+MaxEntryNameBytes)
}

// DiskState is what two cheap reads tell of a volume's tmpfs: the kernel's count (KernelUsage),
// and the change time and size of the view's dir and of its shares' copies' dirs (layout).
// Whatever the atomic writer does there (a swap, a payload dir dropped or cleaned up) adds,
// replaces or removes an entry in one of those dirs, which sets its change time (and its size,
// which a tmpfs counts by entries, when their number changes). The zero DiskState is no
// volume's: a layout is never empty.
type DiskState struct {
	Usage  Usage // the kernel's count
	layout string
}

// State reads the volume's DiskState (for its first shares copies); ok is false where the
// kernel cannot count it (KernelUsage).
func (vd Dir) State(shares int) (DiskState, bool) {
	usage, ok := vd.KernelUsage()
	if !ok {
		return DiskState{}, false
	}
	return DiskState{Usage: usage, layout: vd.layout(shares)}, true
}

// CountUnlinked counts what the kernel holds in the volume's tmpfs beyond what a walk of it finds
// (Usage.Beyond): files removed while a reader keeps them open. It walks only when the
// disk's state differs from last, the state of the last count (zero: none); counted is false when
// it did not walk, where the kernel cannot say (not a tmpfs), or when the walk failed (err).
func (vd Dir) CountUnlinked(shares int, last DiskState) (now DiskState, unlinked int64, counted bool, err error) {
	now, ok := vd.State(shares)
	if !ok || now == last {
		return now, 0, false, nil
	}
	m, err := vd.Measure()
	if err != nil {
		return now, 0, false, err
	}
	return now, now.Usage.Beyond(m.Seen), true, nil
}

// layout is the change time and size of the view's dir and of the copies' dirs of the volume's
// shares (the first shares), which hold their payload dirs, ..data links and top-level links.
// Read by stat(2), not by listing the dirs.
func (vd Dir) layout(shares int) string {
	var b strings.Builder
	for i := -1; i < shares; i++ {
		dir := vd.ViewPath()
		if i >= 0 {
			dir = vd.CopyPath(i)
		}
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil {
			b.WriteString(strconv.FormatInt(st.Ctim.Nano(), 36) + "." + strconv.FormatInt(st.Size, 36))
		}
		b.WriteString("/")
	}
	return b.String()
}

// KernelUsage is what the kernel counts in use in the volume's tmpfs (statfs(2)). Unlike a walk
// and a record, it counts a file removed while a reader still keeps it open: a pod that keeps its
// files open across refreshes keeps every version's pages in the tmpfs, and no name leads to
// them. Not a tmpfs mounted on the volume's dir (a unit test's node: a plain directory, perhaps on
// a tmpfs /tmp, whose count would be everything else's on it): ok is false.
func (vd Dir) KernelUsage() (u Usage, ok bool) {
	var dir, parent unix.Stat_t
	if unix.Stat(vd.Path, &dir) != nil || unix.Stat(filepath.Dir(vd.Path), &parent) != nil || dir.Dev == parent.Dev {
		return Usage{}, false // not a mount point
	}
	var st unix.Statfs_t
	if err := unix.Statfs(vd.Path, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return Usage{}, false
	}
	// The field types differ by architecture (Bsize is a uint32 on s390x).
	return Usage{PageBytes: int64(st.Blocks-st.Bfree) * int64(st.Bsize), InodeSpace: int64(st.Files-st.Ffree) * InodeSpaceBytes}, true
}
