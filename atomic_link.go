package main

// Hard links instead of second copies. A volume keeps each share's files in a copy beside the
// pod's view (shares/<i>, what comes back after a revocation) and the view itself (data). Both
// live on the volume's one tmpfs, so the view's files can be hard links to the copies' files:
// the bytes are in memory once, and publishing a 1 MiB Secret writes 1 MiB, not 2.
//
// Linking is safe because the writer never changes a file it has written: every update writes
// a new timestamped dir and swaps ..data. Updating a copy therefore gives it new inodes, and the
// view keeps showing the old ones until the view itself is swapped.

import (
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// writeVolumeFrom is writeVolume, except that each file whose path is a key of origins is
// hard-linked from the volume dir named there instead of being written. That dir must be a
// volume dir written by writeVolume on the same file system, whose current set holds the same
// bytes at the same path (the caller knows: it wrote them from the same volumeFile, or read
// them from there). The link is only made when the origin's file also has exactly the size,
// mode and owner the file would be written with; otherwise, and whenever linking fails, the
// file is written as usual. Linking is an optimisation and never changes what a reader sees.
func writeVolumeFrom(dir string, files map[string]volumeFile, gid int, origins map[string]string) error {
	return atomicWriteVolume(dir, files, gid, origins)
}

// atomicOrigins opens each origin volume dir of one write once.
type atomicOrigins struct {
	dirs  map[string]string   // file path -> origin volume dir
	roots map[string]*os.Root // origin volume dir -> its root (nil: could not be opened)
}

func newAtomicOrigins(dirs map[string]string) *atomicOrigins {
	return &atomicOrigins{dirs: dirs, roots: map[string]*os.Root{}}
}

func (o *atomicOrigins) close() {
	for _, r := range o.roots {
		if r != nil {
			r.Close()
		}
	}
}

// link hard-links name (a path inside the fresh timestamped dir sub, whose parent dir exists)
// to the origin's file at the same path, and reports whether it did. Everything is resolved
// through os.Root, so neither side can lead outside its volume dir.
func (o *atomicOrigins) link(sub *os.Root, name string, file volumeFile, gid int) bool {
	dir, ok := o.dirs[name]
	if !ok {
		return false
	}
	root, opened := o.roots[dir]
	if !opened {
		root, _ = os.OpenRoot(dir)
		o.roots[dir] = root
	}
	if root == nil {
		return false
	}
	src, err := root.Open(atomicDataDirName + "/" + name)
	if err != nil {
		return false
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	uid, g := atomicOwner(gid)
	if !ok || !fi.Mode().IsRegular() || fi.Mode().Perm() != file.Mode || fi.Size() != int64(len(file.Data)) ||
		st.Uid != uid || st.Gid != g {
		return false
	}
	parent, err := sub.Open(path.Dir(name))
	if err != nil {
		return false
	}
	defer parent.Close()
	// AT_EMPTY_PATH links the very inode src was opened on: no path is resolved again on the
	// origin's side between the checks above and the link.
	return unix.Linkat(int(src.Fd()), "", int(parent.Fd()), path.Base(name), unix.AT_EMPTY_PATH) == nil
}
