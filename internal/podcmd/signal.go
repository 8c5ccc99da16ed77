package podcmd

// The watcher's --signal: finding the processes of the pod's shared process namespace to signal,
// from /proc, by name and user.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

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
