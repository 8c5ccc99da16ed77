package main

// This file holds the atomic writer: it publishes a set of files into a volume
// dir the way the kubelet's AtomicWriter does for secret volumes, extended to
// per-file modes, nested paths and group ownership (fsGroup). Nothing here
// knows about Kubernetes objects; callers hand in plain paths and bytes.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// atomicDataDirName is the symlink readers go through. Swapping it with a
	// single rename is what makes a whole set of files change at once.
	atomicDataDirName = "..data"
	// atomicDataTmpName is where the next ..data link is built before it is
	// renamed over ..data; symlink(2) cannot replace an existing name.
	atomicDataTmpName = "..data_tmp"
	// atomicTsLayout is the prefix of a timestamped payload dir, the same
	// format the kubelet uses, so the layout looks familiar to anyone who has
	// inspected a secret volume. The leading ".." keeps it out of the key
	// namespace (validateKey rejects keys starting with "..").
	atomicTsLayout = "..2006_01_02_15_04_05."
	// atomicMaxKeyLen matches the API server's limit for Secret/ConfigMap keys.
	atomicMaxKeyLen = 253
	// atomicMaxPathLen and atomicMaxPathDepth bound a nested file path. The
	// depth bound also bounds the recursion of readVolumeFiles on a payload
	// dir that was tampered with. (16 segments of at most 253 bytes stay
	// below the length bound, which is checked first only because it is
	// cheaper than splitting a huge string.)
	atomicMaxPathLen   = 4096
	atomicMaxPathDepth = 16
	// atomicMaxGid is the largest gid chown(2) accepts as a gid: (gid_t)-1
	// means "leave unchanged", which would silently not apply fsGroup.
	atomicMaxGid = math.MaxUint32 - 1
	// atomicDirPerm lets a pod running as any UID traverse the payload dirs;
	// access control is on the files themselves (mode, group) and on the bind
	// mount.
	atomicDirPerm os.FileMode = 0o755
)

// volumeFile is one file of a volume: its bytes and its permission bits.
type volumeFile struct {
	Data []byte
	Mode os.FileMode // permission bits only (validated: mode &^ 0o777 == 0)
}

// validateKey checks one file name taken from a Secret/ConfigMap key before
// anything is written. The character set is the API server's own rule for
// keys, so any key the API accepted passes; the checks still run here because
// the writer must not trust that (a key like "../x" would escape the volume).
// Keys starting with ".." are reserved for the writer's ..data link and
// timestamped dirs. Errors name the key, never the data.
func validateKey(key string) error {
	switch {
	case key == "":
		return errors.New("invalid key \"\": must not be empty")
	case len(key) > atomicMaxKeyLen:
		return fmt.Errorf("invalid key %q: %d bytes, at most %d allowed", key, len(key), atomicMaxKeyLen)
	case key == ".":
		return fmt.Errorf("invalid key %q: must not be \".\"", key)
	case strings.HasPrefix(key, ".."):
		return fmt.Errorf("invalid key %q: must not start with \"..\" (reserved for the writer's own entries)", key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '-' || c == '.' || c == '_' ||
			('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			continue
		}
		return fmt.Errorf("invalid key %q: byte %d (%q) is not one of [-._a-zA-Z0-9]", key, i, c)
	}
	return nil
}

// validateFilePath checks a relative file path inside a volume: 1 to
// atomicMaxPathLen bytes, at most atomicMaxPathDepth segments separated by
// single "/", each segment a valid key (validateKey). That excludes absolute
// paths, empty, "." and ".." segments, segments starting with ".." (so no
// path can reach ..data or a payload dir), and backslashes. Errors name the
// path.
func validateFilePath(p string) error {
	switch {
	case p == "":
		return errors.New("invalid path \"\": must not be empty")
	case len(p) > atomicMaxPathLen:
		return fmt.Errorf("invalid path %q: %d bytes, at most %d allowed", p, len(p), atomicMaxPathLen)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("invalid path %q: must be relative to the volume, not start with \"/\"", p)
	}
	segs := strings.Split(p, "/")
	if len(segs) > atomicMaxPathDepth {
		return fmt.Errorf("invalid path %q: %d segments, at most %d allowed", p, len(segs), atomicMaxPathDepth)
	}
	for i, s := range segs {
		if s == "" {
			return fmt.Errorf("invalid path %q: segment %d is empty (doubled or trailing \"/\")", p, i+1)
		}
		if err := validateKey(s); err != nil {
			return fmt.Errorf("invalid path %q: segment %d: %w", p, i+1, err)
		}
	}
	return nil
}

// atomicValidateVolume checks everything about a payload that can be checked
// without looking at the disk, and returns its paths sorted (so that with
// several problems the error is the same every time, and files are written in
// a stable order).
func atomicValidateVolume(files map[string]volumeFile, gid int) ([]string, error) {
	if int64(gid) > atomicMaxGid {
		return nil, fmt.Errorf("gid %d out of range (at most %d)", gid, int64(atomicMaxGid))
	}
	paths := slices.Sorted(maps.Keys(files))
	for _, p := range paths {
		if err := validateFilePath(p); err != nil {
			return nil, err
		}
		if m := files[p].Mode; m&^os.ModePerm != 0 {
			return nil, fmt.Errorf("path %q: mode %v has bits other than permissions (0777)", p, m)
		}
	}
	// A path cannot be a file and the directory of another file at once.
	for _, p := range paths {
		for i := 0; i < len(p); i++ {
			if p[i] == '/' {
				if _, ok := files[p[:i]]; ok {
					return nil, fmt.Errorf("path %q conflicts with path %q: it would have to be both a file and a directory", p[:i], p)
				}
			}
		}
	}
	return paths, nil
}

// atomicTopNames returns the sorted distinct first segments of paths: the
// names that get a user-visible symlink at the top of the volume dir.
func atomicTopNames(paths []string) []string {
	var tops []string
	for _, p := range paths {
		top, _, _ := strings.Cut(p, "/")
		tops = append(tops, top)
	}
	slices.Sort(tops)
	return slices.Compact(tops)
}

// writeVolume makes dir hold exactly files (relative path -> file),
// atomically for readers, in the kubelet AtomicWriter layout extended to
// nested paths:
//
//	dir/..2026_11_21_10_20_30.1234567/certs/ca.pem   the real files, in a fresh timestamped dir
//	dir/..data -> ..2026_11_21_10_20_30.1234567     swapped by renaming ..data_tmp over it
//	dir/certs -> ..data/certs                         one symlink per FIRST path segment
//	dir/ca.crt -> ..data/ca.crt
//
// Directories inside the timestamped dir are created as needed with mode
// 0755; each file gets exactly its Mode. A reader that resolves ..data once
// sees either the complete old set or the complete new set; a file opened
// through a top-level link is always complete. An empty (or nil) map is valid
// and means "revoked": ..data points at an empty dir and no top-level links
// remain.
//
// gid >= 0 (fsGroup): the timestamped dir and every dir and file the writer
// creates in it are owned by uid 0 and group gid, so a non-root pod whose
// supplementary groups include gid can read a 0440 file. gid < 0: ownership
// is left as created (the driver's euid:egid, root:root in the driver).
//
// Every path, mode and the gid are validated, the set is checked for paths
// that would be both a file and a directory ("a" and "a/b"), and every
// first segment's top-level name is checked to be free or already the
// writer's symlink, all before anything is written, so a bad payload leaves
// dir unchanged (and does not even create it). A failure before the swap (for
// example ENOSPC on a full tmpfs) removes the new timestamped dir, so dir
// still shows the old complete set; errors wrap the errno (errors.Is(err,
// unix.ENOSPC) works). A failure after the swap leaves the new set published
// but possibly some top-level links missing or stale ones present; the next
// call repairs that.
//
// An identical payload (same paths, bytes, modes and ownership) is not
// republished; only the top-level links are repaired.
//
// Only entries the writer creates are ever removed: timestamped dirs,
// ..data_tmp, and symlinks whose target is exactly "..data/<their own name>".
// All operations go through an os.Root on dir, so nothing outside dir is
// followed or touched even if entries inside it are tampered with.
//
// Calls for the same dir must be serialized by the caller (they share
// ..data_tmp); readers need no locking.
func writeVolume(dir string, files map[string]volumeFile, gid int) error {
	return atomicWriteVolume(dir, files, gid, nil)
}

// atomicWriteVolume is writeVolume and writeVolumeFrom (atomic_link.go).
func atomicWriteVolume(dir string, files map[string]volumeFile, gid int, origins map[string]string) error {
	paths, err := atomicValidateVolume(files, gid)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := atomicEnsureDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	defer root.Close()

	oldTs, err := atomicCurrentTarget(root)
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	tops := atomicTopNames(paths)
	for _, name := range tops {
		if err := atomicCheckTopSlot(root, name); err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
	}

	// Skipping an identical payload keeps periodic resyncs from churning
	// inodes and from waking up inotify watchers in pods for nothing.
	newTs := oldTs
	if oldTs == "" || !atomicSameVolume(root, oldTs, files, gid) {
		newTs, err = atomicPublish(root, paths, files, gid, origins)
		if err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
	}
	if err := atomicReconcile(root, newTs, tops); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	return nil
}

// atomicEnsureDir creates dir (and missing parents) with mode 0755 if it does
// not exist, and refuses a dir that is a symlink, since the writer must not
// end up publishing into some other place.
func atomicEnsureDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, atomicDirPerm); err != nil {
			return err
		}
		// The process umask may have cleared bits pods need to traverse.
		return os.Chmod(dir, atomicDirPerm)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (mode %v)", dir, fi.Mode())
	}
	return nil
}

// atomicCurrentTarget returns the timestamped dir ..data points at, or "" if
// there is no ..data yet. A ..data that is not a symlink to a timestamped dir
// name is an error: following it could lead anywhere.
func atomicCurrentTarget(root *os.Root) (string, error) {
	target, err := root.Readlink(atomicDataDirName)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", atomicDataDirName, err)
	}
	if !atomicIsTsDirName(target) {
		return "", fmt.Errorf("%s points at %q, which is not a timestamped payload dir", atomicDataDirName, target)
	}
	return target, nil
}

// atomicIsTsDirName reports whether name looks like a timestamped payload dir:
// "..YYYY_MM_DD_HH_MM_SS." followed by at least one digit. It also matches the
// kubelet's names, which is fine: the format is the writer's private namespace.
func atomicIsTsDirName(name string) bool {
	n := len(atomicTsLayout)
	if len(name) <= n || !strings.HasPrefix(name, "..") || name[n-1] != '.' {
		return false
	}
	if _, err := time.Parse(atomicTsLayout, name[:n]); err != nil {
		return false
	}
	for _, c := range []byte(name[n:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// atomicTopLinkTarget is what the top-level link dir/<name> points at.
// Relative, so the link resolves the same inside the pod's bind mount as on
// the host. It is also how the writer recognises its own links: a symlink is
// the writer's iff its target is exactly this for its own name.
func atomicTopLinkTarget(name string) string {
	return atomicDataDirName + "/" + name
}

// atomicCheckTopSlot fails if dir/<name> exists and is anything other than
// the writer's own symlink: overwriting or shadowing it is not the writer's
// call, and finding out after the swap would leave dir half-updated.
func atomicCheckTopSlot(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := root.Readlink(name)
		if err != nil {
			return err
		}
		if target == atomicTopLinkTarget(name) {
			return nil
		}
	}
	return fmt.Errorf("%q already exists in the volume dir and is not a symlink to %s; not touching it",
		name, atomicTopLinkTarget(name))
}

// atomicOwner is the ownership the writer gives (or, for gid < 0, leaves on)
// everything inside a timestamped dir. For gid < 0 that is the process's
// euid:egid, which is what creation yields unless dir itself is setgid (then
// the timestamped dir inherits dir's group, the identical-payload check never
// matches, and every write republishes: harmless churn, and the driver's
// volume dirs are plain 0755 dirs).
func atomicOwner(gid int) (uid, g uint32) {
	if gid < 0 {
		return uint32(os.Geteuid()), uint32(os.Getegid())
	}
	return 0, uint32(gid)
}

// atomicEntry is what the writer needs to know about one entry of a payload
// dir: its mode (type bits included) and owner.
type atomicEntry struct {
	mode     fs.FileMode
	uid, gid uint32
}

// atomicScan returns the regular files below a payload dir (path -> bytes and
// permission bits) and every entry's mode and owner ("." is the payload dir
// itself). Anything other than regular files and dirs, or a name that is not
// a valid path, means the dir was not made by the writer (or was tampered
// with) and is an error. Every entry is opened relative to sub and
// inspected through its own descriptor, so the bytes and the mode always
// belong to the same inode.
func atomicScan(sub *os.Root) (map[string]volumeFile, map[string]atomicEntry, error) {
	files := map[string]volumeFile{}
	entries := map[string]atomicEntry{}
	var walk func(rel string) error
	walk = func(rel string) error {
		// Lstat first: Root.Open would follow a symlink (within sub), and a
		// symlink inside a payload dir is never the writer's.
		li, err := sub.Lstat(rel)
		if err != nil {
			return err
		}
		if !li.Mode().IsRegular() && !li.IsDir() {
			return fmt.Errorf("%s is not a regular file or directory (mode %v)", rel, li.Mode())
		}
		// O_NONBLOCK so that a FIFO swapped in after the Lstat cannot hang
		// the reader; it changes nothing for regular files and dirs.
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
		entries[rel] = atomicEntry{mode: fi.Mode(), uid: st.Uid, gid: st.Gid}
		if fi.Mode().IsRegular() {
			data, err := io.ReadAll(f)
			if err != nil {
				return err
			}
			files[rel] = volumeFile{Data: data, Mode: fi.Mode().Perm()}
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
			// Also bounds the recursion: no valid path is deeper than
			// atomicMaxPathDepth.
			if err := validateFilePath(child); err != nil {
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

// atomicSameVolume reports whether the timestamped dir ts holds exactly files
// as writeVolume(…, gid) would have written them: same paths, bytes and modes,
// no other entries, dirs with mode 0755, and everything owned as gid asks.
// Any error counts as "different" so a damaged payload dir gets replaced
// rather than reported.
func atomicSameVolume(root *os.Root, ts string, files map[string]volumeFile, gid int) bool {
	sub, err := root.OpenRoot(ts)
	if err != nil {
		return false
	}
	defer sub.Close()
	got, entries, err := atomicScan(sub)
	if err != nil || len(got) != len(files) {
		return false
	}
	wantDirs := map[string]bool{".": true}
	for p, want := range files {
		g, ok := got[p]
		// Compared on the full mode so a setuid bit someone added counts.
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
	uid, g := atomicOwner(gid)
	for p, e := range entries {
		if e.uid != uid || e.gid != g {
			return false
		}
		if _, isFile := files[p]; !isFile && (!wantDirs[p] || e.mode != fs.ModeDir|atomicDirPerm) {
			return false
		}
	}
	return true
}

// atomicPublish writes files into a fresh timestamped dir and swaps ..data to
// it. On any error the new dir (and ..data_tmp) are removed again, so ..data
// keeps pointing at the old complete set.
func atomicPublish(root *os.Root, paths []string, files map[string]volumeFile, gid int, origins map[string]string) (string, error) {
	ts, err := atomicMkTsDir(root, gid)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		// Best effort; the leftover would be collected by the next write,
		// but a full tmpfs needs the space back now.
		if rerr := root.Remove(atomicDataTmpName); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		if rerr := root.RemoveAll(ts); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return "", err
	}
	if err := atomicFillTsDir(root, ts, paths, files, gid, origins); err != nil {
		return fail(err)
	}
	// A ..data_tmp left by an interrupted earlier write would make symlink(2)
	// fail with EEXIST. Only a symlink is ours to remove.
	if fi, err := root.Lstat(atomicDataTmpName); err == nil {
		if fi.Mode()&fs.ModeSymlink == 0 {
			return fail(fmt.Errorf("%s exists and is not a symlink", atomicDataTmpName))
		}
		if err := root.Remove(atomicDataTmpName); err != nil {
			return fail(err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	if err := root.Symlink(ts, atomicDataTmpName); err != nil {
		return fail(err)
	}
	// rename(2) replaces ..data in one step; this is the commit point.
	if err := root.Rename(atomicDataTmpName, atomicDataDirName); err != nil {
		return fail(err)
	}
	return ts, nil
}

// atomicFillTsDir writes files (in the order of paths) into the fresh
// timestamped dir ts, or links them from their origins (writeVolumeFrom),
// creating the dirs between as needed. Everything is
// created relative to a root on ts, so even a 16-segment path never becomes
// one long absolute path.
func atomicFillTsDir(root *os.Root, ts string, paths []string, files map[string]volumeFile, gid int, origins map[string]string) error {
	sub, err := root.OpenRoot(ts)
	if err != nil {
		return err
	}
	defer sub.Close()
	from := newAtomicOrigins(origins)
	defer from.close()
	made := map[string]bool{}
	for _, p := range paths {
		for i := 0; i < len(p); i++ {
			if p[i] != '/' || made[p[:i]] {
				continue
			}
			if err := atomicMkdir(sub, p[:i], gid); err != nil {
				return err
			}
			made[p[:i]] = true
		}
		if from.link(sub, p, files[p], gid) {
			continue
		}
		if err := atomicWriteFile(sub, p, files[p], gid); err != nil {
			return err
		}
	}
	return nil
}

// atomicMkTsDir creates a new, empty timestamped dir with mode 0755.
// os.MkdirTemp cannot be used through an os.Root, so the random suffix is
// generated here the same way (decimal digits), retrying on a collision.
func atomicMkTsDir(root *os.Root, gid int) (string, error) {
	const attempts = 100
	for range attempts {
		name := time.Now().UTC().Format(atomicTsLayout) + strconv.FormatUint(uint64(rand.Uint32()), 10)
		err := atomicMkdir(root, name, gid)
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

// atomicMkdir creates name with mode 0755 and, for gid >= 0, owner 0:gid. A
// dir it created but could not set up is removed again. The mode is set
// explicitly because the umask may have cleared bits pods need to traverse
// the dir; owner and mode are set through the dir's own descriptor so they
// land on the dir just made.
func atomicMkdir(root *os.Root, name string, gid int) error {
	if err := root.Mkdir(name, atomicDirPerm); err != nil {
		return err
	}
	err := func() error {
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		return atomicSetOwnerAndMode(f, atomicDirPerm, gid)
	}()
	if err != nil {
		return errors.Join(err, root.Remove(name))
	}
	return nil
}

// atomicSetOwnerAndMode applies gid (if >= 0) and then mode to an open file.
// Owner first: chown(2) may clear mode bits, so the mode set last is the one
// that stays.
func atomicSetOwnerAndMode(f *os.File, mode os.FileMode, gid int) error {
	if gid >= 0 {
		if err := f.Chown(0, gid); err != nil {
			return err
		}
	}
	return f.Chmod(mode)
}

// atomicWriteFile creates name exclusively and writes the file. Owner and
// mode are set with fchown/fchmod after creation because open(2) applies the
// process umask, and the mode must be exact (e.g. 0440 for a group-readable
// file); they are set before the data is written. Until then the file has a
// subset of its final permission bits, so no moment is more permissive.
func atomicWriteFile(root *os.Root, name string, file volumeFile, gid int) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, file.Mode)
	if err != nil {
		return err
	}
	if err := atomicSetOwnerAndMode(f, file.Mode, gid); err != nil {
		return errors.Join(err, f.Close())
	}
	// No fsync: the target is a tmpfs, where there is nothing to sync to.
	if _, err := f.Write(file.Data); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// atomicReconcile makes the top level of dir match tops (the payload's first
// segments) after ..data points at ts: links are created for new names,
// the writer's links for names no longer present are removed, then every
// timestamped dir other than ts is removed (the previous one, and any left by
// an interrupted write). It continues past errors so one bad entry does not
// block the cleanup of the others.
func atomicReconcile(root *os.Root, ts string, tops []string) error {
	var errs []error
	for _, name := range tops {
		err := root.Symlink(atomicTopLinkTarget(name), name)
		if errors.Is(err, fs.ErrExist) {
			// Checked before the swap; re-check in case it changed since.
			err = atomicCheckTopSlot(root, name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", name, err))
		}
	}

	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var staleDirs []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case atomicIsTsDirName(name):
			if name != ts && e.IsDir() {
				staleDirs = append(staleDirs, name)
			}
		case name == atomicDataTmpName && e.Type()&fs.ModeSymlink != 0:
			// Left by an interrupted write; harmless, but it is ours.
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		case strings.HasPrefix(name, ".."):
			// ..data and anything else reserved: not a path, not ours to judge.
		case e.Type()&fs.ModeSymlink != 0:
			if _, want := slices.BinarySearch(tops, name); want {
				continue
			}
			target, err := root.Readlink(name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if target != atomicTopLinkTarget(name) {
				continue // not one of ours
			}
			if err := root.Remove(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Old payload dirs go last, after no top-level link can lead into them
	// any more except via a reader that already resolved ..data (which keeps
	// working on its open files).
	for _, d := range staleDirs {
		if err := root.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// errVolumeChanging is returned by readVolumeFiles when ..data was swapped
// during every one of its attempts; with writes serialized per dir (as
// writeVolume requires) it means something else is rewriting the volume.
var errVolumeChanging = errors.New("..data changed during every read attempt")

// readVolumeFiles returns every regular file below the payload dir ..data
// currently points at (relative path -> bytes and permission bits), or an
// empty map if dir or its ..data does not exist yet. It never returns a mix
// of two sets or part of a set: ..data is resolved once per attempt and the
// whole tree is read relative to that dir, and the attempt only counts if
// ..data still points at the same dir afterwards. That check matters for
// nested paths: the writer removes the previous payload dir right after a
// swap, and a walk racing with that removal can find a subdir already empty
// without any error. A raced attempt is retried a few times, then
// errVolumeChanging is returned. Anything in the payload dir that the writer
// never creates (a symlink, a device, an invalid name) is an error.
func readVolumeFiles(dir string) (map[string]volumeFile, error) {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]volumeFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	defer root.Close()
	const attempts = 5
	for range attempts {
		ts, err := atomicCurrentTarget(root)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		if ts == "" {
			return map[string]volumeFile{}, nil
		}
		files, err := atomicScanTsDir(root, ts)
		if now, nerr := atomicCurrentTarget(root); nerr == nil && now != ts {
			continue // swapped while reading: whatever was read may be partial
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %s: %w", dir, ts, err)
		}
		return files, nil
	}
	return nil, fmt.Errorf("read %s: %w", dir, errVolumeChanging)
}

// atomicScanTsDir is atomicScan of the timestamped dir ts, files only.
func atomicScanTsDir(root *os.Root, ts string) (map[string]volumeFile, error) {
	sub, err := root.OpenRoot(ts)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	files, _, err := atomicScan(sub)
	return files, err
}
