package atomicwriter

// Reading a payload dir back: ReadFiles for callers, and the check of step 5 (does the current
// payload dir already hold exactly the payload?).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"
)

// ErrChanging is returned by ReadFiles when ..data was swapped during every one of its
// attempts; with writes to a dir serialized (as Write requires) it means something else is
// rewriting the dir.
var ErrChanging = errors.New("..data changed during every read attempt")

// ReadFiles returns every file of the set ..data currently points at (relative path -> bytes
// and permission bits), or an empty map if dir or its ..data does not exist yet. It never
// returns a mix of two sets or part of one: ..data is resolved once per attempt, the whole tree
// is read relative to that payload dir, and the attempt only counts if ..data still points there
// afterwards. That matters for nested paths: Write removes the previous payload dir right after
// a swap, and a walk racing with that removal can find a subdir already empty without any error.
// A raced attempt is retried a few times, then ErrChanging is returned. Anything in the payload
// dir that Write never makes (a symlink, a device, an invalid name) is an error.
func ReadFiles(dir string) (map[string]File, error) {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]File{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	defer root.Close()
	const attempts = 5
	for range attempts {
		current, err := currentPayloadDir(root)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		if current == "" {
			return map[string]File{}, nil
		}
		files, _, err := scanPayloadDir(root, current)
		if now, nerr := currentPayloadDir(root); nerr == nil && now != current {
			continue // swapped while reading: whatever was read may be partial
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %s: %w", dir, current, err)
		}
		return files, nil
	}
	return nil, fmt.Errorf("read %s: %w", dir, ErrChanging)
}

// entry is what the writer needs to know about one entry of a payload dir: its mode (type bits
// included) and owner.
type entry struct {
	mode     fs.FileMode
	uid, gid uint32
}

// scanPayloadDir returns the regular files below the payload dir name (path -> bytes and
// permission bits) and every entry's mode and owner ("." is the payload dir itself). Anything
// but regular files and dirs, or a name that is not a valid path, means the dir was not made by
// the writer (or was tampered with) and is an error. Every entry is opened relative to the
// payload dir and inspected through its own descriptor, so the bytes and the mode always belong
// to the same inode.
func scanPayloadDir(root *os.Root, name string) (map[string]File, map[string]entry, error) {
	sub, err := root.OpenRoot(name)
	if err != nil {
		return nil, nil, err
	}
	defer sub.Close()
	files := map[string]File{}
	entries := map[string]entry{}
	var walk func(rel string) error
	walk = func(rel string) error {
		// Lstat first: Root.Open would follow a symlink (within sub), and a symlink inside a
		// payload dir is never the writer's.
		li, err := sub.Lstat(rel)
		if err != nil {
			return err
		}
		if !li.Mode().IsRegular() && !li.IsDir() {
			return fmt.Errorf("%s is not a regular file or directory (mode %v)", rel, li.Mode())
		}
		// O_NONBLOCK so that a FIFO swapped in after the Lstat cannot hang the reader; it
		// changes nothing for regular files and dirs.
		f, err := sub.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.Mode().Type() != li.Mode().Type() {
			return fmt.Errorf("%s changed type while being read", rel)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no ownership information", rel)
		}
		entries[rel] = entry{mode: fi.Mode(), uid: st.Uid, gid: st.Gid}
		if fi.Mode().IsRegular() {
			data, err := io.ReadAll(f)
			if err != nil {
				return err
			}
			files[rel] = File{Data: data, Mode: fi.Mode().Perm()}
			return nil
		}
		names, err := f.Readdirnames(-1)
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			child := n
			if rel != "." {
				child = rel + "/" + n
			}
			// Also bounds the recursion: no valid path is deeper than maxPathDepth.
			if err := ValidatePath(child); err != nil {
				return err
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("."); err != nil {
		return nil, nil, err
	}
	return files, entries, nil
}

// holdsPayload reports whether the payload dir name holds exactly files as Write would have
// written them with gid: the same paths, bytes and modes, no other entries, dirs with mode 0755,
// and everything owned as gid asks. Any error counts as "no", so a damaged payload dir is
// replaced rather than reported.
func holdsPayload(root *os.Root, name string, files map[string]File, gid int) bool {
	got, entries, err := scanPayloadDir(root, name)
	if err != nil || len(got) != len(files) {
		return false
	}
	wantDirs := map[string]bool{".": true}
	for p, want := range files {
		g, ok := got[p]
		// Compared on the full mode, so a setuid bit someone added counts.
		if !ok || entries[p].mode != want.Mode || !bytes.Equal(g.Data, want.Data) {
			return false
		}
		for i := 0; i < len(p); i++ {
			if p[i] == '/' {
				wantDirs[p[:i]] = true
			}
		}
	}
	if len(entries) != len(files)+len(wantDirs) {
		return false
	}
	uid, g := payloadOwner(gid)
	for p, e := range entries {
		if e.uid != uid || e.gid != g {
			return false
		}
		if _, isFile := files[p]; !isFile && (!wantDirs[p] || e.mode != fs.ModeDir|dirPerm) {
			return false
		}
	}
	return true
}
