package main

// This file holds the filesystem mechanics of the node driver: the per-volume
// tmpfs, the read-only bind into the pod, /proc/self/mountinfo parsing, and the
// atomic writer that publishes a set of files the way the kubelet's
// AtomicWriter does for secret volumes. Nothing here knows about Kubernetes
// objects; callers hand in plain paths and byte maps.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
	// atomicDirPerm lets a pod running as any UID traverse the payload dirs;
	// access control is on the files themselves (mode) and on the bind mount.
	atomicDirPerm os.FileMode = 0o755
)

// mountTmpfs mounts a fresh tmpfs of at most sizeBytes on dir (which must
// exist). extraData is appended to the mount data when non-empty (for example
// an SELinux "context=...").
//
// nosuid/nodev/noexec because the content is data (certificates, tokens), never
// something to execute or a device node; size is always set because the memory
// is charged to the node and a runaway payload must hit ENOSPC instead of
// eating RAM.
func mountTmpfs(dir string, sizeBytes int64, extraData string) error {
	// tmpfs treats size=0 as "unlimited", which is exactly what the size cap is
	// there to prevent, so refuse it rather than pass it through.
	if sizeBytes <= 0 {
		return fmt.Errorf("mount tmpfs on %s: size must be positive, got %d", dir, sizeBytes)
	}
	data := "size=" + strconv.FormatInt(sizeBytes, 10) + ",mode=0755"
	if extraData != "" {
		data += "," + extraData
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, data); err != nil {
		return fmt.Errorf("mount tmpfs on %s (%s): %w", dir, data, err)
	}
	return nil
}

// bindReadOnly bind-mounts source onto target and makes the bind read-only,
// nosuid, nodev and noexec.
//
// It takes two mount calls because the kernel ignores MS_RDONLY (and the other
// per-mount flags) on the initial MS_BIND; only a MS_REMOUNT|MS_BIND applies
// them. Between the two calls the bind is writable, so if the remount fails the
// bind is taken down again: the caller must never be left with a writable view
// of the volume in a pod.
func bindReadOnly(source, target string) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	const roFlags = unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY |
		unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	err := unix.Mount("", target, "", roFlags, "")
	if err == nil {
		return nil
	}
	err = fmt.Errorf("remount bind of %s on %s read-only: %w", source, target, err)
	if uerr := unmountExact(target); uerr != nil {
		// The writable bind we just made is the topmost mount on target, so a
		// lazy detach removes exactly it. MNT_DETACH is acceptable here (and
		// only here) because nothing can be using a mount that is
		// microseconds old and was never handed to anyone; leaving it writable
		// would be worse.
		if derr := unix.Unmount(target, unix.MNT_DETACH); derr != nil {
			return errors.Join(err,
				fmt.Errorf("WRITABLE BIND LEFT on %s: unmount: %w; detach: %w", target, uerr, derr))
		}
	}
	return err
}

// unmountExact unmounts the topmost mount at exactly path.
//
// It deliberately uses plain umount2(path, 0): no MNT_DETACH, because a lazy
// unmount hides a mount that is still in use instead of reporting it, and no
// lookup by source, because the same tmpfs may be mounted in several places
// and only this one is meant. A path that is not a mount point (EINVAL) or does
// not exist counts as already unmounted, which makes teardown idempotent. EBUSY
// is retried briefly because a process that was just reading (for example the
// kubelet's own stat) often lets go within milliseconds.
func unmountExact(path string) error {
	const (
		attempts = 5
		pause    = 50 * time.Millisecond
	)
	var err error
	for i := range attempts {
		err = unix.Unmount(path, 0)
		switch {
		case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && i < attempts-1:
			time.Sleep(pause)
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: %w", path, err)
}

// mountEntry is one line of /proc/self/mountinfo (see proc(5)).
type mountEntry struct {
	ID, ParentID int
	MajorMinor   string // "0:52"
	Root         string // root of the mount within its filesystem, e.g. "/" or "/data"
	MountPoint   string // unescaped (mountinfo escapes space, tab, newline, backslash as \040 \011 \012 \134)
	Options      string // per-mount options, e.g. "ro,nosuid,nodev,noexec,relatime"
	FSType       string
	Source       string
	SuperOptions string
}

// readMountInfo parses /proc/self/mountinfo.
//
// The file is read until two consecutive reads are identical: on older kernels
// (before the mount-table cursor, Linux 5.8) a read split over several chunks
// while mounts change can skip or repeat entries, and a skipped entry would
// make a mounted volume look unmounted. On a busy node other pods' mounts may
// change on every read; since Linux 5.8 a single read is consistent for the
// entries that exist throughout it (the driver's own mounts do: it holds the
// volume's lock), so churn elsewhere is never a reason to fail: after the last
// attempt the last read is used.
func readMountInfo() ([]mountEntry, error) {
	const (
		path     = "/proc/self/mountinfo"
		attempts = 10
	)
	prev, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for i := range attempts - 1 {
		cur, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(prev, cur) {
			break
		}
		prev = cur
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	return parseMountInfo(bytes.NewReader(prev))
}

// parseMountInfo parses the mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7..)  (-) (8)    (9)        (10)
//
// Fields are split on single spaces rather than runs of whitespace because the
// kernel prints an empty source as an empty field, and real spaces inside
// paths are always escaped. It never panics on malformed input; it returns an
// error naming the line instead.
func parseMountInfo(r io.Reader) ([]mountEntry, error) {
	var entries []mountEntry
	sc := bufio.NewScanner(r)
	// Lines with long SELinux or overlay lowerdir options exceed the default
	// 64 KiB token limit on real nodes.
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if line == "" {
			continue
		}
		e, err := parseMountInfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", lineNo, err)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo line %d: %w", lineNo+1, err)
	}
	return entries, nil
}

func parseMountInfoLine(line string) (mountEntry, error) {
	fields := strings.Split(line, " ")
	// The optional fields (shared:N, master:N, propagate_from:N, unbindable)
	// vary in number, so the separator is found by searching; it cannot be
	// earlier than index 6 and no earlier field can be a bare "-" there.
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 {
		return mountEntry{}, fmt.Errorf("no \" - \" separator after the sixth field in %q", line)
	}
	post := fields[sep+1:]
	if len(post) < 3 {
		return mountEntry{}, fmt.Errorf("want fstype, source and super options after \" - \" in %q", line)
	}
	id, err := strconv.Atoi(fields[0])
	if err != nil {
		return mountEntry{}, fmt.Errorf("mount ID: %w", err)
	}
	parent, err := strconv.Atoi(fields[1])
	if err != nil {
		return mountEntry{}, fmt.Errorf("parent ID: %w", err)
	}
	if !strings.Contains(fields[2], ":") {
		return mountEntry{}, fmt.Errorf("major:minor %q has no colon", fields[2])
	}
	return mountEntry{
		ID:           id,
		ParentID:     parent,
		MajorMinor:   fields[2],
		Root:         mountInfoUnescape(fields[3]),
		MountPoint:   mountInfoUnescape(fields[4]),
		Options:      fields[5],
		FSType:       mountInfoUnescape(post[0]),
		Source:       mountInfoUnescape(post[1]),
		SuperOptions: post[2],
	}, nil
}

// mountInfoUnescape undoes the kernel's mangle(): space, tab, newline and
// backslash are written as a backslash and three octal digits. Anything that
// is not such a sequence is kept verbatim so a malformed line cannot lose data.
func mountInfoUnescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && mountInfoIsOctal(s, i+1) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountInfoIsOctal reports whether s[i:i+3] is three octal digits forming a byte value
// (at most \377).
func mountInfoIsOctal(s string, i int) bool {
	if i+3 > len(s) {
		return false
	}
	for _, c := range []byte(s[i : i+3]) {
		if c < '0' || c > '7' {
			return false
		}
	}
	return s[i] <= '3'
}

// mountAt returns the last (topmost) entry whose MountPoint is
// filepath.Clean(path). Mounts stacked on one path appear in mount order, so
// the last one is the one a lookup of path actually reaches.
func mountAt(entries []mountEntry, path string) (mountEntry, bool) {
	path = filepath.Clean(path)
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == path {
			return entries[i], true
		}
	}
	return mountEntry{}, false
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

// writeAtomic makes dir hold exactly files (key -> bytes), each with
// permission bits mode, atomically for readers, in the kubelet AtomicWriter
// layout:
//
//	dir/..2026_11_21_10_20_30.1234567/<key>   the real files, in a fresh timestamped dir
//	dir/..data -> ..2026_11_21_10_20_30.1234567   swapped by renaming ..data_tmp over it
//	dir/<key> -> ..data/<key>                 one symlink per key
//
// A reader that resolves ..data once sees either the complete old set or the
// complete new set; a file opened through dir/<key> is always complete. An
// empty (or nil) map is valid and means "revoked": ..data points at an empty
// dir and no key symlinks remain.
//
// Every key is validated, and every key's top-level name is checked to be free
// or already the writer's symlink, before anything is written, so a bad
// payload leaves dir unchanged. A failure before the swap (for example ENOSPC
// on a full tmpfs) removes the new timestamped dir, so dir still shows the old
// complete set; errors wrap the errno (errors.Is(err, unix.ENOSPC) works). A
// failure after the swap leaves the new set published but possibly some key
// symlinks missing or stale ones present; the next call repairs that.
//
// Only entries the writer creates are ever removed: timestamped dirs,
// ..data_tmp, and symlinks whose target is exactly "..data/<their own name>".
// All operations go through an os.Root on dir, so nothing outside dir is
// followed or touched even if entries inside it are tampered with.
//
// Calls for the same dir must be serialized by the caller (they share
// ..data_tmp); readers need no locking.
func writeAtomic(dir string, files map[string][]byte, mode os.FileMode) error {
	if mode&^os.ModePerm != 0 {
		return fmt.Errorf("write %s: mode %v has bits other than permissions", dir, mode)
	}
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	// Sorted so that with several bad keys the error is the same every time.
	slices.Sort(keys)
	for _, k := range keys {
		if err := validateKey(k); err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
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
	for _, k := range keys {
		if err := atomicCheckKeySlot(root, k); err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
	}

	// Skipping an identical payload keeps periodic resyncs from churning
	// inodes and from waking up inotify watchers in pods for nothing.
	newTs := oldTs
	if oldTs == "" || !atomicSameFiles(root, oldTs, files, mode) {
		newTs, err = atomicPublish(root, keys, files, mode)
		if err != nil {
			return fmt.Errorf("write %s: %w", dir, err)
		}
	}
	if err := atomicReconcile(root, newTs, files); err != nil {
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

// atomicKeyLinkTarget is what dir/<key> points at. Relative, so the link
// resolves the same inside the pod's bind mount as on the host.
func atomicKeyLinkTarget(key string) string {
	return atomicDataDirName + "/" + key
}

// atomicCheckKeySlot fails if dir/<key> exists and is anything other than the
// writer's own symlink: overwriting or shadowing it is not the writer's call,
// and finding out after the swap would leave dir half-updated.
func atomicCheckKeySlot(root *os.Root, key string) error {
	fi, err := root.Lstat(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := root.Readlink(key)
		if err != nil {
			return err
		}
		if target == atomicKeyLinkTarget(key) {
			return nil
		}
	}
	return fmt.Errorf("key %q: %s already exists and is not a symlink to %s; not touching it",
		key, key, atomicKeyLinkTarget(key))
}

// atomicSameFiles reports whether the timestamped dir ts holds exactly files
// with permission bits mode. Any error counts as "different" so a damaged
// payload dir gets replaced rather than reported.
func atomicSameFiles(root *os.Root, ts string, files map[string][]byte, mode os.FileMode) bool {
	sub, err := root.OpenRoot(ts)
	if err != nil {
		return false
	}
	defer sub.Close()
	entries, err := fs.ReadDir(sub.FS(), ".")
	if err != nil || len(entries) != len(files) {
		return false
	}
	for _, e := range entries {
		want, ok := files[e.Name()]
		if !ok || !e.Type().IsRegular() {
			return false
		}
		info, err := e.Info()
		if err != nil || info.Mode().Perm() != mode || info.Size() != int64(len(want)) {
			return false
		}
		got, err := sub.ReadFile(e.Name())
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	return true
}

// atomicPublish writes files into a fresh timestamped dir and swaps ..data to
// it. On any error the new dir (and ..data_tmp) are removed again, so ..data
// keeps pointing at the old complete set.
func atomicPublish(root *os.Root, keys []string, files map[string][]byte, mode os.FileMode) (string, error) {
	ts, err := atomicMkTsDir(root)
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
	for _, k := range keys {
		if err := atomicWriteFile(root, ts+"/"+k, files[k], mode); err != nil {
			return fail(err)
		}
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

// atomicMkTsDir creates a new, empty timestamped dir with mode 0755.
// os.MkdirTemp cannot be used through an os.Root, so the random suffix is
// generated here the same way (decimal digits), retrying on a collision.
func atomicMkTsDir(root *os.Root) (string, error) {
	const attempts = 100
	for range attempts {
		name := time.Now().UTC().Format(atomicTsLayout) + strconv.FormatUint(uint64(rand.Uint32()), 10)
		err := root.Mkdir(name, atomicDirPerm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		// The umask may have cleared bits pods need to traverse the dir.
		if err := root.Chmod(name, atomicDirPerm); err != nil {
			return "", errors.Join(err, root.Remove(name))
		}
		return name, nil
	}
	return "", fmt.Errorf("could not create a unique timestamped dir after %d attempts", attempts)
}

// atomicWriteFile creates name exclusively and writes data. The mode is set
// with fchmod after creation because open(2) applies the process umask, and
// the caller's mode must be exact (e.g. 0440 for a group-readable key).
func atomicWriteFile(root *os.Root, name string, data []byte, mode os.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		return errors.Join(err, f.Close())
	}
	// No fsync: the target is a tmpfs, where there is nothing to sync to.
	if _, err := f.Write(data); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// atomicReconcile makes the top level of dir match files after ..data points
// at ts: key symlinks are created for new keys, symlinks of keys no longer
// present are removed, then every timestamped dir other than ts is removed
// (the previous one, and any left by an interrupted write). It continues past
// errors so one bad entry does not block the cleanup of the others.
func atomicReconcile(root *os.Root, ts string, files map[string][]byte) error {
	var errs []error
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		err := root.Symlink(atomicKeyLinkTarget(k), k)
		if errors.Is(err, fs.ErrExist) {
			// Checked before the swap; re-check in case it changed since.
			err = atomicCheckKeySlot(root, k)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", k, err))
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
			// ..data and anything else reserved: not a key, not ours to judge.
		case e.Type()&fs.ModeSymlink != 0:
			if _, want := files[name]; want {
				continue
			}
			target, err := root.Readlink(name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if target != atomicKeyLinkTarget(name) {
				continue // not one of ours
			}
			if err := root.Remove(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Old payload dirs go last, after no key symlink can lead into them any
	// more except via a reader that already resolved ..data (which keeps
	// working on its open files).
	for _, d := range staleDirs {
		if err := root.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readCurrent returns the files ..data currently points at (key -> bytes), or
// an empty map if dir or its ..data does not exist yet. The payload dir is
// opened once and every file is read relative to it, so a concurrent swap
// cannot produce a mix of two sets.
func readCurrent(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	defer root.Close()
	ts, err := atomicCurrentTarget(root)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if ts == "" {
		return out, nil
	}
	sub, err := root.OpenRoot(ts)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	defer sub.Close()
	entries, err := fs.ReadDir(sub.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		// The writer only ever puts regular files with valid key names here;
		// anything else means the dir was tampered with.
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("read %s: %s/%s is not a regular file", dir, ts, e.Name())
		}
		if err := validateKey(e.Name()); err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		data, err := sub.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		out[e.Name()] = data
	}
	return out, nil
}
