package atomicwriter

// Hard links instead of second copies (Writer.Origins). The driver keeps each share's files in
// a dir of their own beside the pod's view, both on the volume's one tmpfs, so the view's files
// can be hard links to the share's: the bytes are in memory once.
//
// Linking is safe because the writer never changes a file it has written: every update fills a
// new payload dir and swaps ..data. Updating the origin therefore gives it new inodes, and the
// view keeps showing the old ones until the view itself is swapped.

import (
	"os"
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// linker opens each origin dir of one write once.
type linker struct {
	origins map[string]string   // file path -> origin volume dir
	roots   map[string]*os.Root // origin volume dir -> a root on it (nil: could not be opened)
}

func newLinker(origins map[string]string) *linker {
	return &linker{origins: origins, roots: map[string]*os.Root{}}
}

func (l *linker) close() {
	for _, r := range l.roots {
		if r != nil {
			r.Close()
		}
	}
}

// link hard-links name (a path in the new payload dir sub, whose parent dir exists) to the
// origin's file at the same path, and reports whether it did. It does only when the origin's
// file is a regular file with exactly the size, mode and owner file would be written with.
// Both sides are resolved through an os.Root, so neither can lead outside its volume dir.
func (l *linker) link(sub *os.Root, name string, file File, gid int) bool {
	dir, ok := l.origins[name]
	if !ok {
		return false
	}
	root, opened := l.roots[dir]
	if !opened {
		root, _ = os.OpenRoot(dir)
		l.roots[dir] = root
	}
	if root == nil {
		return false
	}
	src, err := root.OpenFile(dataLink+"/"+name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return false
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	uid, g := payloadOwner(gid)
	if !ok || !fi.Mode().IsRegular() || fi.Mode().Perm() != file.Mode || fi.Size() != int64(len(file.Data)) ||
		st.Uid != uid || st.Gid != g {
		return false
	}
	parent, err := sub.OpenFile(path.Dir(name), os.O_RDONLY|syscall.O_DIRECTORY|openNonblock, 0)
	if err != nil {
		return false
	}
	defer parent.Close()
	// AT_EMPTY_PATH links the very inode src was opened on: no path is resolved again on the
	// origin's side between the checks above and the link.
	return unix.Linkat(int(src.Fd()), "", int(parent.Fd()), path.Base(name), unix.AT_EMPTY_PATH) == nil
}
