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
// What counts as a change, and the reading of the dirs: watchchange.go. Signalling: signal.go.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"
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
