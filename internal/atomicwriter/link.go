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

// originFile opens the origin's file at name when it is exactly what file would be written as
// with gid: a regular file of its size, mode and owner. It returns nil when name has no origin,
// or when its origin's file is anything else; the caller closes what it returns.
func (l *linker) originFile(name string, file File, gid int) (*os.File, *syscall.Stat_t) {
	dir, ok := l.origins[name]
	if !ok {
		return nil, nil
	}
	root, opened := l.roots[dir]
	if !opened {
		root, _ = os.OpenRoot(dir)
		l.roots[dir] = root
	}
	if root == nil {
		return nil, nil
	}
	src, err := root.OpenFile(dataLink+"/"+name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil
	}
	fi, err := src.Stat()
	if err != nil {
		src.Close()
		return nil, nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	uid, g := payloadOwner(gid)
	if !ok || !fi.Mode().IsRegular() || fi.Mode().Perm() != file.Mode || fi.Size() != int64(len(file.Data)) ||
		st.Uid != uid || st.Gid != g {
		src.Close()
		return nil, nil
	}
	return src, st
}

// link hard-links name (a path in the new payload dir sub, whose parent dir exists) to the
// origin's file at the same path (originFile), and reports whether it did. Both sides are
// resolved through an os.Root, so neither can lead outside its volume dir.
func (l *linker) link(sub *os.Root, name string, file File, gid int) bool {
	src, _ := l.originFile(name, file, gid)
	if src == nil {
		return false
	}
	defer src.Close()
	parent, err := sub.OpenFile(path.Dir(name), os.O_RDONLY|syscall.O_DIRECTORY|openNonblock, 0)
	if err != nil {
		return false
	}
	defer parent.Close()
	// AT_EMPTY_PATH links the very inode src was opened on: no path is resolved again on the
	// origin's side between the checks above and the link.
	return unix.Linkat(int(src.Fd()), "", int(parent.Fd()), path.Base(name), unix.AT_EMPTY_PATH) == nil
}

// linksOrigins reports whether each file of the payload dir current that could be linked from
// its origin is the origin's very inode. A payload of the same bytes can hold them separately:
// the origin was rewritten since the payload linked it (to other bytes, and then back to these),
// or it had other bytes when the payload was written. Then the bytes are in memory twice, and
// writing the payload again links them.
func (l *linker) linksOrigins(root *os.Root, current string, files map[string]File, gid int) bool {
	for name := range l.origins {
		file, ok := files[name]
		if !ok {
			continue
		}
		src, want := l.originFile(name, file, gid)
		if src == nil {
			continue // it would be written, not linked
		}
		src.Close()
		fi, err := root.Lstat(current + "/" + name)
		if err != nil {
			return false
		}
		got, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || got.Dev != want.Dev || got.Ino != want.Ino {
			return false
		}
	}
	return true
}
