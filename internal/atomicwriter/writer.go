package atomicwriter

// Writer.Write: the steps of the package doc, (1) to (9), in order.

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// File is one file of a payload: its bytes and its permission bits.
type File struct {
	Data []byte
	Mode os.FileMode // permission bits only (Write refuses any other bit)
}

// Writer publishes payloads into one volume dir; see the package doc for the layout, the
// contract and the steps.
type Writer struct {
	// Dir is the volume dir. Write creates it (and missing parents) with mode 0755 if it does
	// not exist, and refuses it if it is a symlink or not a directory.
	Dir string
	// GID >= 0 is a group (fsGroup) that owns the payload dir and every dir and file in it, with
	// uid 0, so that a non-root pod whose supplementary groups include GID reads a 0440 file.
	// GID < 0 leaves ownership as created: the process's euid:egid. (0 is root's group, not
	// "none".) The volume dir and the links are never re-owned.
	GID int
	// Origins optionally maps a file path to another volume dir, written by a Writer on the
	// same file system, whose current set holds the same bytes at that path (the caller knows:
	// it wrote them from the same File, or read them from there). Such a file is hard-linked
	// from there instead of written, when the origin's file also has exactly the size, mode and
	// owner the file would be written with; otherwise, and whenever linking fails, it is
	// written. Linking saves memory on a tmpfs and never changes the bytes a reader sees. A
	// payload identical to the current one is published again when a file of it could be linked
	// from its origin and is not (step 5): the origin was rewritten since, and came back to
	// these bytes. Where linking then fails (another file system), every write would publish
	// again; Origins is for dirs on the same one.
	Origins map[string]string
	// KeepPrevious keeps, after a write that swaps ..data, the payload dir it replaced, until
	// the next write (which removes it, or keeps it in turn only if it swaps again with
	// KeepPrevious). A reader that resolved ..data just before the swap (a path through ..data
	// or a top-level link, looked up while the swap happens) then still finds every file of the
	// set it started on; removed at once, as the kubelet's writer does, a file of that set can
	// be missing for an instant. The cost: the previous set's bytes stay in memory until the next
	// write. Never for a write that takes files away a reader must stop seeing: DropPrevious, or
	// a write without KeepPrevious, removes the kept dir.
	KeepPrevious bool
}

// Write makes w.Dir hold exactly files (relative path -> file), atomically for readers. An
// empty or nil map is valid and means "revoked". Calls for the same dir must be serialized.
func (w Writer) Write(files map[string]File) error {
	if err := w.write(files); err != nil {
		return fmt.Errorf("write %s: %w", w.Dir, err)
	}
	return nil
}

func (w Writer) write(files map[string]File) error {
	// (1) Validate the payload without looking at the disk: a bad payload changes nothing.
	paths, err := validatePayload(files, w.GID)
	if err != nil {
		return err
	}
	// (2) Make sure the volume dir is there; from now on go through a root on it. A dir this
	// call has just created is empty: it has no current payload, no name in the way and nothing
	// stale to clean, so steps (3), (4), (5) and the cleanup of (9) are skipped for it (each is
	// a syscall or several per file, and a new volume is written this way on every publish).
	created, err := ensureDir(w.Dir)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(w.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tops := topNames(paths)
	from := newLinker(w.Origins)
	defer from.close()
	if created {
		if _, err := w.publish(root, from, paths, files, true); err != nil {
			return err
		}
		return linkTopLevel(root, tops)
	}
	// (3) The current payload dir, if there is one.
	current, err := currentPayloadDir(root)
	if err != nil {
		return err
	}
	// (4) Every top-level name the payload needs is free or already the writer's link.
	for _, name := range tops {
		if err := checkTopName(root, name); err != nil {
			return err
		}
	}
	// (5) An identical payload is not published again; nor one whose files are the same bytes
	// as their origins' but not linked from them (linker.linksOrigins).
	keep := ""
	if current == "" || !holdsPayload(root, current, files, w.GID) || !from.linksOrigins(root, current, files, w.GID) {
		previous := current
		current, err = w.publish(root, from, paths, files, false)
		if err != nil {
			return err
		}
		if w.KeepPrevious {
			keep = previous
		}
	}
	// (8), (9) The top-level links, and the cleanup of what the previous payload left.
	return updateTopLevel(root, current, keep, tops)
}

// DropPrevious removes every payload dir of dir but the one ..data points at: the one a write
// with KeepPrevious kept, and any an interrupted write left behind. A dir without ..data (or no
// dir) has nothing to drop. Like Write, it must not run concurrently with a write to dir.
func DropPrevious(dir string) error {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drop previous payloads of %s: %w", dir, err)
	}
	defer root.Close()
	current, err := currentPayloadDir(root)
	if err != nil || current == "" {
		if err != nil {
			return fmt.Errorf("drop previous payloads of %s: %w", dir, err)
		}
		return nil
	}
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return fmt.Errorf("drop previous payloads of %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if isPayloadDirName(e.Name()) && e.IsDir() && e.Name() != current {
			if err := root.RemoveAll(e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drop previous payloads of %s: %w", dir, err)
	}
	return nil
}

// ensureDir creates dir (and missing parents) with mode 0755 if it does not exist, and refuses a
// dir that is a symlink or not a directory: the writer must not end up publishing somewhere else.
func ensureDir(dir string) (created bool, err error) {
	// Mkdir first: a new volume's dir does not exist yet, and this is one syscall where a
	// stat, MkdirAll's own stat and the mkdir were three.
	err = os.Mkdir(dir, dirPerm)
	switch {
	case err == nil:
		// The process umask may have cleared bits pods need to traverse.
		return true, os.Chmod(dir, dirPerm)
	case errors.Is(err, fs.ErrNotExist): // a parent is missing (shares/ before a volume's first copy)
		if err := os.MkdirAll(filepath.Dir(dir), dirPerm); err != nil {
			return false, err
		}
		if err = os.Mkdir(dir, dirPerm); err == nil {
			return true, os.Chmod(dir, dirPerm)
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, err
		}
	case !errors.Is(err, fs.ErrExist):
		return false, err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%s is not a directory (mode %v)", dir, fi.Mode())
	}
	return false, nil
}

// payloadOwner is the ownership the writer gives (for gid >= 0) or leaves (gid < 0) on the
// payload dir and everything in it. For gid < 0 that is the process's euid:egid, which is what
// creation yields unless the volume dir is setgid (then the payload dir inherits its group, the
// identical-payload check never matches, and every write publishes again: harmless churn, and
// the driver's volume dirs are plain 0755 dirs).
func payloadOwner(gid int) (uid, g uint32) {
	if gid < 0 {
		return uint32(os.Geteuid()), uint32(os.Getegid())
	}
	return 0, uint32(gid)
}

// publish fills a new payload dir and swaps ..data to it, and returns its name. On failure the
// new dir and ..data_tmp are removed again, so ..data keeps pointing at the old complete set.
// created says the dir was created empty by this write: it has no ..data to replace, and none
// of an interrupted write's ..data_tmp.
func (w Writer) publish(root *os.Root, from *linker, paths []string, files map[string]File, created bool) (string, error) {
	// (6) Fill a new payload dir.
	dir, err := newPayloadDir(root, w.GID)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		// Best effort; a leftover would be collected by the next write, but a full tmpfs needs
		// the space back now.
		if rerr := root.Remove(dataTmpLink); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		if rerr := root.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return "", err
	}
	if err := w.fill(root, from, dir, paths, files); err != nil {
		return fail(err)
	}
	if created {
		// (7) In a dir with no ..data yet, symlink(2) makes ..data at once, pointing at the
		// complete set: as atomic for a reader as the rename below (no ..data, then the whole
		// set), without its three system calls (a rename costs tens of microseconds).
		if err := root.Symlink(dir, dataLink); err != nil {
			return fail(err)
		}
		return dir, nil
	}
	// (7) Swap ..data to it. A ..data_tmp left by an interrupted write would make symlink(2)
	// fail with EEXIST; only a link is the writer's to remove.
	if fi, err := root.Lstat(dataTmpLink); err == nil {
		if fi.Mode()&fs.ModeSymlink == 0 {
			return fail(fmt.Errorf("%s exists and is not a symlink", dataTmpLink))
		}
		if err := root.Remove(dataTmpLink); err != nil {
			return fail(err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	if err := root.Symlink(dir, dataTmpLink); err != nil {
		return fail(err)
	}
	// rename(2) replaces ..data in one step: the commit point.
	if err := root.Rename(dataTmpLink, dataLink); err != nil {
		return fail(err)
	}
	return dir, nil
}

// fill writes files (in the order of paths) into the new payload dir, or links them from their
// origins, making the dirs between as needed. Everything is made relative to a root on the
// payload dir, so even a 16-segment path never becomes one long absolute path.
func (w Writer) fill(root *os.Root, from *linker, dir string, paths []string, files map[string]File) error {
	sub, err := root.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer sub.Close()
	made := map[string]bool{}
	for _, p := range paths {
		for i := 0; i < len(p); i++ {
			if p[i] != '/' || made[p[:i]] {
				continue
			}
			if err := mkdirOwned(sub, p[:i], w.GID); err != nil {
				return err
			}
			made[p[:i]] = true
		}
		if from.link(sub, p, files[p], w.GID) {
			continue
		}
		if err := createFile(sub, p, files[p], w.GID); err != nil {
			return err
		}
	}
	return nil
}

// newPayloadDir makes a new, empty payload dir. os.MkdirTemp cannot work through an os.Root, so
// the random suffix is made here the same way (decimal digits), retrying on a collision.
func newPayloadDir(root *os.Root, gid int) (string, error) {
	const attempts = 100
	for range attempts {
		name := time.Now().UTC().Format(payloadDirLayout) + strconv.FormatUint(uint64(rand.Uint32()), 10)
		err := mkdirOwned(root, name, gid)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("could not create a unique timestamped dir after %d attempts", attempts)
}

// mkdirOwned makes name with mode 0755 and, for gid >= 0, owner 0:gid. A dir it made but could
// not set up is removed again. The mode is set explicitly because the umask may have cleared
// bits pods need to traverse the dir; owner and mode are set through the dir's own descriptor so
// they land on the dir just made.
func mkdirOwned(root *os.Root, name string, gid int) error {
	if err := root.Mkdir(name, dirPerm); err != nil {
		return err
	}
	err := func() error {
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|openNonblock, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		return setOwnerAndMode(f, dirPerm, gid)
	}()
	if err != nil {
		return errors.Join(err, root.Remove(name))
	}
	return nil
}

// createFile makes name exclusively and writes file into it. Owner and mode are set with
// fchown/fchmod after creation, because open(2) applies the umask and the mode must be exact
// (0440 for a group-readable file, say), and before the data is written. Until then the file
// has a subset of its final permission bits, so no moment is more permissive.
func createFile(root *os.Root, name string, file File, gid int) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|openNonblock, file.Mode)
	if err != nil {
		return err
	}
	if err := setOwnerAndMode(f, file.Mode, gid); err != nil {
		return errors.Join(err, f.Close())
	}
	// No fsync: the target is a tmpfs, where there is nothing to sync to.
	if _, err := f.Write(file.Data); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// openNonblock is added to the writer's opens of the files and dirs it creates: O_NONBLOCK
// changes nothing for regular files and directories, and it spares package os, which otherwise
// switches every descriptor it opens to non-blocking for its poller and, the poller refusing a
// regular file, back again: four fcntl calls per open, on every publish's every file.
const openNonblock = syscall.O_NONBLOCK

// setOwnerAndMode gives an open file the owner 0:gid (if gid >= 0) and then mode. Owner first:
// chown(2) may clear mode bits, so the mode set last is the one that stays.
func setOwnerAndMode(f *os.File, mode os.FileMode, gid int) error {
	if gid >= 0 {
		if err := f.Chown(0, gid); err != nil {
			return err
		}
	}
	return f.Chmod(mode)
}

// linkTopLevel makes the top-level links of a payload written into a dir created empty by this
// write: there is nothing to clean up, so no scan of the dir.
func linkTopLevel(root *os.Root, tops []string) error {
	var errs []error
	for _, name := range tops {
		if err := root.Symlink(topLinkTarget(name), name); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// updateTopLevel runs once ..data points at current, the payload dir of the payload whose first
// segments are tops; keep, when not "", is the payload dir current replaced, kept for readers
// (Writer.KeepPrevious). It continues past errors, so one bad entry does not block the cleanup
// of the others.
func updateTopLevel(root *os.Root, current, keep string, tops []string) error {
	var errs []error
	// (8) Make the top level match the payload: first the links of its names...
	for _, name := range tops {
		err := root.Symlink(topLinkTarget(name), name)
		if errors.Is(err, fs.ErrExist) {
			// Checked in step 4; checked again in case it changed since.
			err = checkTopName(root, name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", name, err))
		}
	}
	// ...then away with the writer's links of names no longer in it, and a leftover ..data_tmp.
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var stale []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case isPayloadDirName(name):
			if name != current && name != keep && e.IsDir() {
				stale = append(stale, name)
			}
		case name == dataTmpLink && e.Type()&fs.ModeSymlink != 0:
			// Left by an interrupted write; harmless, but the writer's.
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		case strings.HasPrefix(name, ".."):
			// ..data and anything else reserved: not a path, not the writer's to judge.
		case e.Type()&fs.ModeSymlink != 0:
			if _, want := slices.BinarySearch(tops, name); want {
				continue
			}
			target, err := root.Readlink(name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if target != topLinkTarget(name) {
				continue // not the writer's
			}
			if err := root.Remove(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// (9) Old payload dirs go last, when no top-level link leads into them any more; a reader
	// that resolved ..data earlier keeps working on the files it opened, and with KeepPrevious
	// also finds the ones it had yet to open.
	for _, d := range stale {
		if err := root.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
