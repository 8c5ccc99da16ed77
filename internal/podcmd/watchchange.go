package podcmd

// What counts as a change: the driver (like the kubelet for Secret volumes) swaps a volume's
// whole set of files at once by renaming ..data (internal/atomicwriter), and only when the set
// the pod sees differs: a relist that finds the same bytes, a change of keys the pod's items do
// not select, a refresh that failed, and a driver restart that resumes its volumes all leave
// ..data alone. The watcher still compares what the pod sees (paths, modes and bytes, hashed)
// before and after a swap, so a swap back to what the application started with (revoked, then
// granted again unchanged) does not count either.
//
// Revocation does not count by default (--on-revoke=wait): a restarted application would find
// no files and fail to start, turning a permission change into an outage, and a restart does not
// take back what the application already read (revoking a credential is rotating it where it is
// issued). A revocation is a view that only lost files: emptied (its one share revoked), or
// without the files of one of its shares (a volume of several). When the files come back, they
// count if they differ from what the application started with. --on-revoke=notify counts it
// like any change.
//
// The watcher must be able to read the files: it compares what they hold. A watcher that cannot
// (a 0400 file of another user, a 0440 file of a group it is not in) refuses to start, exit 1,
// saying so: knowing only that ..data moved, it could not tell a revocation from a change, nor a
// restore of the same bytes from new ones.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// dirWatcher watches the dirs' ..data links and knows what the application was given.
type dirWatcher struct {
	o        *watchOptions
	logf     func(string, ...any)
	fd       int
	wds      map[int32]string // inotify watch descriptor -> dir
	baseline map[string]viewState
}

// viewState is what a pod sees in one dir: a hash of its files, each file's, and whether there
// are any.
type viewState struct {
	sum   [sha256.Size]byte
	files map[string][sha256.Size]byte // path -> hash of its mode and bytes
	empty bool
	link  string // ..data's target, for the log
}

// onlyLost says whether st is what was left of was after files were taken away, and nothing
// else changed: fewer files, each of them still what it was. A revocation does that (of the
// volume's one share: nothing left; of one of several: that share's files gone).
func (st viewState) onlyLost(was viewState) bool {
	if len(st.files) >= len(was.files) {
		return false
	}
	for p, h := range st.files {
		if was.files[p] != h {
			return false
		}
	}
	return true
}

func newDirWatcher(o *watchOptions, logf func(string, ...any)) (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	w := &dirWatcher{o: o, logf: logf, fd: fd, wds: map[int32]string{}, baseline: map[string]viewState{}}
	for _, dir := range o.dirs {
		// Watched before the first read, so a swap between the two is not missed.
		wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("%s: %w (is the share's volume mounted there? --dir is the container's volumeMounts.mountPath)", dir, err)
		}
		w.wds[int32(wd)] = dir
		st, err := readView(dir)
		if err != nil {
			w.close()
			return nil, err
		}
		w.baseline[dir] = st
		logf("watching %s (%s -> %s, empty: %v)", dir, dataLink, st.link, st.empty)
	}
	return w, nil
}

func (w *dirWatcher) close() { unix.Close(w.fd) }

// readView reads what the pod sees in dir. A dir without ..data is not a share's volume (or
// not mounted yet): an error, so that a wrong --dir fails at once instead of watching nothing.
func readView(dir string) (viewState, error) {
	if _, err := os.Stat(dir); err != nil {
		return viewState{}, fmt.Errorf("%s: %w (is the share's volume mounted there? --dir is the container's volumeMounts.mountPath)", dir, err)
	}
	link, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		return viewState{}, fmt.Errorf("%s has no readable %s link (%w): not a volume of the driver, or of a Secret/ConfigMap", dir, dataLink, err)
	}
	files, err := atomicwriter.ReadFiles(dir)
	if errors.Is(err, fs.ErrPermission) {
		// Knowing only that ..data moved, the watcher could not tell a revocation from a change,
		// nor a restore of the same bytes from new ones: it would restart the application for
		// nothing. So it refuses, and says what to change.
		return viewState{}, fmt.Errorf("%s: the watcher may not read the share's files as uid %d, gid %d (%w): it compares what they hold, so run it as a user that may read them: "+
			"the application's (securityContext.runAsUser), or in the files' group (the pod's fsGroup; mind the volume's defaultMode and items' modes)",
			dir, os.Geteuid(), os.Getegid(), err)
	}
	if err != nil {
		return viewState{}, err
	}
	each := make(map[string][sha256.Size]byte, len(files))
	for p, f := range files {
		each[p] = hashFiles(map[string]atomicwriter.File{p: f})
	}
	return viewState{sum: hashFiles(files), files: each, empty: len(files) == 0, link: link}, nil
}

// hashFiles hashes paths, modes and bytes, each length-prefixed so no two sets collide by
// concatenation.
func hashFiles(files map[string]atomicwriter.File) [sha256.Size]byte {
	h := sha256.New()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var n [8]byte
	for _, p := range paths {
		f := files[p]
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
		binary.BigEndian.PutUint64(n[:], uint64(f.Mode))
		h.Write(n[:])
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// next waits until the files of one or more dirs really changed (see this file's first comment),
// and returns those dirs; what they hold now becomes what the application was given.
func (w *dirWatcher) next(ctx context.Context) ([]string, error) {
	lastSync := time.Now()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Poll with a short timeout so that ctx and --resync are honoured.
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 200); err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("poll inotify: %w", err)
		}
		look := false
		if fds[0].Revents&unix.POLLIN != 0 {
			n, err := unix.Read(w.fd, buf)
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				return nil, fmt.Errorf("read inotify: %w", err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				off += unix.SizeofInotifyEvent + int(ev.Len)
				switch {
				case ev.Mask&unix.IN_Q_OVERFLOW != 0:
					look = true // events lost: compare everything
				case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
					return nil, fmt.Errorf("%s was removed or unmounted: the volume is gone", w.wds[ev.Wd])
				case name == dataLink:
					look = true
				}
			}
		}
		if w.o.resync > 0 && time.Since(lastSync) >= w.o.resync {
			look = true
		}
		if !look {
			continue
		}
		lastSync = time.Now()
		var changed []string
		for _, dir := range w.o.dirs {
			st, err := readView(dir)
			if err != nil {
				return nil, err
			}
			old := w.baseline[dir]
			switch {
			case st.sum == old.sum:
				continue
			case w.o.onRevoke == "wait" && st.onlyLost(old):
				what := "is now empty"
				if !st.empty {
					what = fmt.Sprintf("lost %d of its %d files, the others unchanged", len(old.files)-len(st.files), len(old.files))
				}
				w.logf("%s %s (access revoked?); not acting: the application keeps what it read, and files that come back different count as a change (--on-revoke)", dir, what)
				continue
			}
			w.baseline[dir] = st
			changed = append(changed, dir+" ("+dataLink+" -> "+st.link+")")
		}
		if len(changed) > 0 {
			return changed, nil
		}
	}
}
