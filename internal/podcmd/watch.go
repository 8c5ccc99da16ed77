package podcmd

// `shared-resource-csi watch`: a small process a pod runs beside its application to tell it that
// a share's files changed (docs/telling-the-application.md). It needs no API access, no
// privilege and no shell: it watches the directories it is given (where the pod mounts its
// shares) with inotify, and when the set of files the pod sees there really changed it either
//
//   - exits with --exit-code (42 by default), which a restartPolicyRules entry with the action
//     RestartAllContainers turns into an in-place restart of every container of the pod (same
//     pod, node, IP and volumes: the share is not published again); or
//   - with --signal, sends that signal to the processes named --process (shareProcessNamespace:
//     true) and keeps watching.
//
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
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

const (
	// watchCommand is the subcommand's name: `shared-resource-csi watch ...`.
	watchCommand = "watch"
	// watchExitChanged is the default --exit-code: chosen to collide with no code a shell,
	// the runtime or a signal gives (1, 2, 126, 127, 128+n).
	watchExitChanged = 42
	// watchExitUsage and watchExitFailed are the codes of a watcher that cannot do its job: a
	// bad flag, a directory that is not a mounted share. They are not --exit-code, so they
	// never restart the application; the kubelet restarts the watcher alone (with back-off).
	watchExitUsage  = 2
	watchExitFailed = 1 // also: it may not read the files (readView)
	// dataLink is the link the atomic writer swaps.
	dataLink = "..data"
)

// watchOptions are the subcommand's flags.
type watchOptions struct {
	dirs     []string
	exitCode int
	signal   syscall.Signal // 0: exit mode
	process  string
	onRevoke string        // wait or notify
	delayMax time.Duration // a random delay in [0, delayMax) before acting on a change
	resync   time.Duration // how often the dirs are looked at even without an inotify event
}

type dirList []string

func (l *dirList) String() string     { return strings.Join(*l, ",") }
func (l *dirList) Set(v string) error { *l = append(*l, v); return nil }

// watchSignals are the signals --signal takes, by name (without SIG).
var watchSignals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "WINCH": syscall.SIGWINCH,
}

func parseWatchFlags(args []string, usage io.Writer) (*watchOptions, error) {
	o := &watchOptions{}
	var dirs dirList
	var sig string
	fs := flag.NewFlagSet("shared-resource-csi watch", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Var(&dirs, "dir", "a directory where the pod mounts a share (its volumeMounts.mountPath); repeat for several")
	fs.IntVar(&o.exitCode, "exit-code", watchExitChanged, "the code to exit with when the files changed (pair it with a restartPolicyRules entry: action RestartAllContainers, exitCodes operator In, the same value)")
	fs.StringVar(&sig, "signal", "", "instead of exiting, send this signal (HUP, USR1, USR2, TERM, INT, QUIT, WINCH) to the processes named --process that run as the watcher's own user, and keep watching; needs shareProcessNamespace: true and the same user as the application")
	fs.StringVar(&o.process, "process", "", "with --signal: the process name to signal (its /proc/PID/comm or the base name of its argv[0]); of a tree of same-named processes (a master and its workers) only the topmost ones are signalled")
	fs.StringVar(&o.onRevoke, "on-revoke", "wait", "what an emptied view (access revoked) does: wait (nothing; the files count when they come back different) or notify (a change like any other)")
	fs.DurationVar(&o.delayMax, "delay-max", 0, "wait a random time up to this before acting on a change, so the replicas of a Deployment do not all restart at once")
	fs.DurationVar(&o.resync, "resync", time.Minute, "how often the dirs are compared even without an inotify event (a safety net; 0 disables)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.dirs = dirs
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q: the watcher takes flags only", fs.Arg(0))
	case len(o.dirs) == 0:
		return nil, errors.New("--dir is required: the mountPath of the share's volume in this container")
	case o.exitCode < 1 || o.exitCode > 255:
		return nil, fmt.Errorf("--exit-code %d: must be 1 to 255", o.exitCode)
	case o.exitCode == watchExitUsage || o.exitCode == watchExitFailed:
		return nil, fmt.Errorf("--exit-code %d: 1 and 2 are the watcher's own failures; pick another (default %d)", o.exitCode, watchExitChanged)
	case o.onRevoke != "wait" && o.onRevoke != "notify":
		return nil, fmt.Errorf("--on-revoke %q: must be wait or notify", o.onRevoke)
	case o.delayMax < 0 || o.resync < 0:
		return nil, errors.New("--delay-max and --resync must not be negative")
	}
	if sig != "" {
		s, ok := watchSignals[strings.TrimPrefix(strings.ToUpper(sig), "SIG")]
		if !ok {
			return nil, fmt.Errorf("--signal %q: not one of HUP, USR1, USR2, TERM, INT, QUIT, WINCH", sig)
		}
		if o.process == "" {
			return nil, errors.New("--signal needs --process: the name of the process to signal")
		}
		o.signal = s
	} else if o.process != "" {
		return nil, errors.New("--process needs --signal")
	}
	return o, nil
}

// runWatchCommand runs `shared-resource-csi watch args...` and returns the process's exit code.
// Everything it says goes to stderr, one line per event, naming no file data.
func runWatchCommand(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parseWatchFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "shared-resource-csi watch: %v\n", err)
		return watchExitUsage
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "shared-resource-csi watch: "+format+"\n", a...)
	}
	w, err := newDirWatcher(o, logf)
	if err != nil {
		logf("%v", err)
		return watchExitFailed
	}
	defer w.close()
	for {
		changed, err := w.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0 // stopped (SIGTERM): the pod is going away
			}
			logf("%v", err)
			return watchExitFailed
		}
		if d := o.delayMax; d > 0 {
			wait := rand.N(d)
			logf("waiting %v (--delay-max) before acting", wait.Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return 0
			case <-time.After(wait):
			}
		}
		if o.signal == 0 {
			logf("%s changed; exiting %d so that the kubelet restarts the pod's containers (restartPolicyRules: RestartAllContainers on exit code %d)",
				strings.Join(changed, ", "), o.exitCode, o.exitCode)
			return o.exitCode
		}
		n, err := signalProcesses(o.process, o.signal)
		if err != nil {
			logf("%s changed, but signalling %q failed: %v", strings.Join(changed, ", "), o.process, err)
			continue
		}
		logf("%s changed; sent %v to %d process(es) named %q", strings.Join(changed, ", "), o.signal, n, o.process)
	}
}

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

// next waits until the files of one or more dirs really changed (see the file's comment), and
// returns those dirs; what they hold now becomes what the application was given.
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

// signalProcesses sends sig to every process named name that runs as the watcher's own user (its
// real and effective UID the watcher's effective UID) and is not a child of another process of
// that name (nginx's master, not its workers), other than this one; it returns how many. In a
// shared process namespace every container's processes are visible, and a name is no identity:
// the user is the one thing the watcher can check that a process of another container does not
// choose to match.
func signalProcesses(name string, sig syscall.Signal) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self, uid := os.Getpid(), os.Geteuid()
	parents := map[int]int{} // matching pid -> its parent
	others := 0              // of the name, but another user's
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || !processName(pid, name) {
			continue
		}
		if !runsAs(pid, uid) {
			others++
			continue
		}
		parents[pid] = parentPID(pid)
	}
	if len(parents) == 0 && others > 0 {
		return 0, fmt.Errorf("no process named %q runs as uid %d, the watcher's user (%d of that name run as another user, and are not signalled): run the watcher as the application's user", name, uid, others)
	}
	if len(parents) == 0 {
		return 0, fmt.Errorf("no process named %q is visible (does the pod set shareProcessNamespace: true?)", name)
	}
	n := 0
	var errs []error
	for pid, ppid := range parents {
		if _, child := parents[ppid]; child {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil {
			errs = append(errs, fmt.Errorf("pid %d: %w (run the watcher as the application's user)", pid, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// processName says whether pid's comm or the base name of its argv[0] is name.
func processName(pid int, name string) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.TrimSpace(string(b)) == name {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(b), "\x00")
	return argv0 != "" && filepath.Base(argv0) == name
}

// runsAs says whether pid's real and effective UIDs are both uid (/proc/PID/status).
func runsAs(pid, uid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	ruid, euid, ok := statusUIDs(string(b))
	return ok && ruid == uid && euid == uid
}

// statusUIDs reads the real and effective UIDs from the text of a /proc/PID/status.
func statusUIDs(status string) (ruid, euid int, ok bool) {
	for line := range strings.Lines(status) {
		rest, found := strings.CutPrefix(line, "Uid:")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, false
		}
		r, err1 := strconv.Atoi(f[0])
		e, err2 := strconv.Atoi(f[1])
		return r, e, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

// parentPID is pid's parent from /proc/PID/stat (the field after the parenthesised comm), or 0.
func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
