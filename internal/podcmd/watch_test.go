package podcmd

// Specification of `shared-resource-csi watch` (watch.go, watchchange.go, signal.go) over a
// directory written by internal/atomicwriter exactly as the driver writes a pod's view: a swap of
// ..data to other files is a change, reported once; a rewrite of the same files (no swap), a view
// that only lost files (revocation) and a swap back to what the application was given are not; the
// signal variant signals the named process once per change and keeps watching; a --dir that is not
// a mounted share fails at once with a message saying what to fix.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// How long a test waits for a change to be reported, and how long it watches for one that must
// not come (inotify reports a rename within microseconds; 1 s is ample).
const (
	watchReportWithin = 5 * time.Second
	watchQuietFor     = time.Second
)

func writeShare(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	payload := map[string]atomicwriter.File{}
	for p, d := range files {
		payload[p] = atomicwriter.File{Data: []byte(d), Mode: 0o644}
	}
	if err := (atomicwriter.Writer{Dir: dir, GID: -1}).Write(payload); err != nil {
		t.Fatal(err)
	}
}

func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	l, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startWatcher runs the watcher's loop on dir and delivers each change it reports.
func startWatcher(t *testing.T, args ...string) (changes <-chan []string, errs <-chan error) {
	t.Helper()
	o, err := parseWatchFlags(append([]string{"--resync=0"}, args...), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newDirWatcher(o, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, ec := make(chan []string, 10), make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := w.next(ctx)
			if err != nil {
				ec <- err
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait(); w.close() })
	return ch, ec
}

func expectChange(t *testing.T, changes <-chan []string, errs <-chan error, why string) {
	t.Helper()
	select {
	case <-changes:
	case err := <-errs:
		t.Fatalf("%s: the watcher failed: %v", why, err)
	case <-time.After(watchReportWithin):
		t.Fatalf("%s: no change reported within %v", why, watchReportWithin)
	}
}

func expectNoChange(t *testing.T, changes <-chan []string, errs <-chan error, why string) {
	t.Helper()
	select {
	case c := <-changes:
		t.Fatalf("%s: a change was reported: %v", why, c)
	case err := <-errs:
		t.Fatalf("%s: the watcher failed: %v", why, err)
	case <-time.After(watchQuietFor):
	}
}

func TestWatchSwapToOtherFilesIsOneChange(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1"})
	changes, errs := startWatcher(t, "--dir", dir)
	expectNoChange(t, changes, errs, "nothing written")
	writeShare(t, dir, map[string]string{"ca.crt": "v2"})
	expectChange(t, changes, errs, "ca.crt rewritten with other bytes")
	expectNoChange(t, changes, errs, "after the one change")
	writeShare(t, dir, map[string]string{"ca.crt": "v2", "extra": "x"})
	expectChange(t, changes, errs, "a file added")
}

func TestWatchSameFilesAgainIsNoChange(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1", "nested/key": "k"})
	before := dataTarget(t, dir)
	changes, errs := startWatcher(t, "--dir", dir)
	// What a relist finding the same bytes (or a change of keys the pod's items do not
	// select, or a driver restart resuming the volume) does to the pod's view: a Write of the
	// same set, which leaves ..data alone.
	for range 3 {
		writeShare(t, dir, map[string]string{"ca.crt": "v1", "nested/key": "k"})
	}
	if after := dataTarget(t, dir); after != before {
		t.Fatalf("the atomic writer swapped ..data for the same files (%s -> %s): the premise of the watcher is gone", before, after)
	}
	expectNoChange(t, changes, errs, "the same files written again")
}

func TestWatchRevocationWaitsAndRestoreOfSameFilesIsNoChange(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1"})
	changes, errs := startWatcher(t, "--dir", dir)
	writeShare(t, dir, nil) // revoked: ..data swapped to an empty set
	expectNoChange(t, changes, errs, "revoked (--on-revoke=wait)")
	writeShare(t, dir, map[string]string{"ca.crt": "v1"}) // granted again, unchanged: a swap
	expectNoChange(t, changes, errs, "restored with the files the application started with")
	writeShare(t, dir, nil)
	writeShare(t, dir, map[string]string{"ca.crt": "v2"})
	expectChange(t, changes, errs, "restored with other files")
}

func TestWatchRevocationCountsWithOnRevokeNotify(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1"})
	changes, errs := startWatcher(t, "--dir", dir, "--on-revoke=notify")
	writeShare(t, dir, nil)
	expectChange(t, changes, errs, "revoked (--on-revoke=notify)")
}

// A volume of two shares, one of them revoked, loses that share's files and keeps the other's: a
// revocation as much as an emptied view, so --on-revoke=wait does not act on it, nor on the files
// coming back the same; a file that then changes is a change.
func TestWatchAViewThatOnlyLostFilesIsARevocation(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1", "token": "t1"})
	changes, errs := startWatcher(t, "--dir", dir)
	writeShare(t, dir, map[string]string{"ca.crt": "v1"}) // the share of token revoked
	expectNoChange(t, changes, errs, "one share's files gone, the other's unchanged (--on-revoke=wait)")
	writeShare(t, dir, map[string]string{"ca.crt": "v1", "token": "t1"})
	expectNoChange(t, changes, errs, "restored with the files the application started with")
	writeShare(t, dir, map[string]string{"ca.crt": "v1"})
	writeShare(t, dir, map[string]string{"ca.crt": "v2"})
	expectChange(t, changes, errs, "a file that stayed changed")
}

func TestWatchAViewThatOnlyLostFilesCountsWithOnRevokeNotify(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1", "token": "t1"})
	changes, errs := startWatcher(t, "--dir", dir, "--on-revoke=notify")
	writeShare(t, dir, map[string]string{"ca.crt": "v1"})
	expectChange(t, changes, errs, "one share's files gone (--on-revoke=notify)")
}

// The UIDs --signal checks come from /proc/PID/status.
func TestWatchReadsTheUIDsOfAProcess(t *testing.T) {
	status := "Name:\tnginx\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t101\t102\t103\t104\nGid:\t101\t101\t101\t101\n"
	if r, e, ok := statusUIDs(status); !ok || r != 101 || e != 102 {
		t.Errorf("statusUIDs = %d, %d, %v; want 101, 102", r, e, ok)
	}
	if _, _, ok := statusUIDs("Name:\tx\n"); ok {
		t.Error("statusUIDs of a status without a Uid line says ok")
	}
	if !runsAs(os.Getpid(), os.Geteuid()) || runsAs(os.Getpid(), os.Geteuid()+1) {
		t.Error("runsAs does not recognise this process's own user")
	}
}

func TestWatchSeveralDirsReportsTheOneThatChanged(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeShare(t, a, map[string]string{"a": "1"})
	writeShare(t, b, map[string]string{"b": "1"})
	changes, errs := startWatcher(t, "--dir", a, "--dir", b)
	writeShare(t, b, map[string]string{"b": "2"})
	select {
	case c := <-changes:
		if len(c) != 1 || !strings.HasPrefix(c[0], b+" ") {
			t.Fatalf("reported %v, want %s alone", c, b)
		}
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(watchReportWithin):
		t.Fatal("no change reported")
	}
}

// The resync is the safety net for a lost inotify event: a changed view is found without one.
func TestWatchResyncFindsAChangeWithoutAnEvent(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"ca.crt": "v1"})
	o, err := parseWatchFlags([]string{"--dir", dir, "--resync=300ms"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newDirWatcher(o, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	writeShare(t, dir, map[string]string{"ca.crt": "v2"})
	// Drop the event, as an overflowed queue would.
	buf := make([]byte, 4096)
	time.Sleep(50 * time.Millisecond)
	if _, err := syscall.Read(w.fd, buf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchReportWithin)
	defer cancel()
	if _, err := w.next(ctx); err != nil {
		t.Fatalf("the resync did not find the change: %v", err)
	}
}

func TestWatchCommandExitsWithTheCodeOnChange(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"token": "v1"})
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runWatchCommand(context.Background(), []string{"--dir", dir, "--exit-code=77"}, &stderr)
	}()
	waitLogged(t, &stderr, "watching "+dir)
	writeShare(t, dir, map[string]string{"token": "v2"})
	select {
	case code := <-done:
		if code != 77 {
			t.Fatalf("exit code %d, want 77 (--exit-code); stderr:\n%s", code, stderr.String())
		}
	case <-time.After(watchReportWithin):
		t.Fatalf("the watcher did not exit; stderr:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "v2") || strings.Contains(stderr.String(), "v1") {
		t.Errorf("the watcher's log names file data:\n%s", stderr.String())
	}
}

func TestWatchCommandFailsClearlyOnAWrongDir(t *testing.T) {
	notShare := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dir", filepath.Join(notShare, "missing")}, watchExitFailed, "is the share's volume mounted there?"},
		{[]string{"--dir", notShare}, watchExitFailed, "has no readable ..data link"},
		{[]string{}, watchExitUsage, "--dir is required"},
		{[]string{"--dir", notShare, "--signal", "HUP"}, watchExitUsage, "--signal needs --process"},
		{[]string{"--dir", notShare, "--signal", "KILL", "--process", "x"}, watchExitUsage, "not one of HUP"},
		{[]string{"--dir", notShare, "--exit-code", "1"}, watchExitUsage, "the watcher's own failures"},
	} {
		var stderr bytes.Buffer
		code := runWatchCommand(context.Background(), c.args, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("watch %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// The signal variant: a process named hup-counter (this test binary, re-run as
// TestWatchHelperHUPCounter) counts the SIGHUPs it gets; two changes are two signals, and both
// the process and the watcher keep running.
func TestWatchSignalsTheNamedProcessOncePerChange(t *testing.T) {
	dir := t.TempDir()
	writeShare(t, dir, map[string]string{"nginx.conf": "v1"})
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	// A name of this run's own: the watcher signals every process of the name on the machine, so
	// a fixed name would count the signals of another test binary running the same test.
	name := fmt.Sprintf("hup-%08x", rand.Uint32())
	counter := filepath.Join(tmp, name)
	if err := os.Symlink(bin, counter); err != nil {
		t.Fatal(err)
	}
	count := filepath.Join(tmp, "hups")
	child := exec.Command(counter, "-test.run=^TestWatchHelperHUPCounter$")
	workerCount := filepath.Join(tmp, "worker-hups")
	child.Env = append(os.Environ(), "WATCH_HUP_COUNT_FILE="+count, "WATCH_HUP_WORKER_COUNT_FILE="+workerCount)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	watchEventually(t, 5*time.Second, func() error { // both handlers are installed
		if _, err := os.Stat(count); err != nil {
			return err
		}
		_, err := os.Stat(workerCount)
		return err
	})

	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- runWatchCommand(ctx, []string{"--dir", dir, "--signal", "HUP", "--process", name}, &stderr)
	}()
	waitLogged(t, &stderr, "watching "+dir)
	hups := func() int { b, _ := os.ReadFile(count); return strings.Count(string(b), "HUP") }
	for i, v := range []string{"v2", "v3"} {
		writeShare(t, dir, map[string]string{"nginx.conf": v})
		watchEventually(t, watchReportWithin, func() error {
			if n := hups(); n != i+1 {
				return fmt.Errorf("hup-counter got %d SIGHUPs, want %d; watcher:\n%s", n, i+1, stderr.String())
			}
			return nil
		})
	}
	writeShare(t, dir, map[string]string{"nginx.conf": "v3"}) // the same: no signal
	time.Sleep(watchQuietFor)
	if n := hups(); n != 2 {
		t.Errorf("hup-counter got %d SIGHUPs after two changes and one rewrite of the same file, want 2", n)
	}
	if b, _ := os.ReadFile(workerCount); strings.Count(string(b), "HUP") != 0 {
		t.Errorf("the worker (a hup-counter child of hup-counter) was signalled too: %q; only the topmost process of the name is", b)
	}
	if err := child.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the signalled process is gone: %v", err)
	}
	select {
	case code := <-done:
		t.Fatalf("the signalling watcher exited (%d); it must keep watching:\n%s", code, stderr.String())
	default:
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("stopped watcher exited %d, want 0", code)
	}
}

// TestWatchHelperHUPCounter is not a test: TestWatchSignalsTheNamedProcessOncePerChange runs
// the test binary as this, a process that appends a line per SIGHUP to a file, and that starts
// one "worker" of the same name counting into another file (as nginx's master does).
func TestWatchHelperHUPCounter(t *testing.T) {
	file := os.Getenv("WATCH_HUP_COUNT_FILE")
	if file == "" {
		t.Skip("helper process of TestWatchSignalsTheNamedProcessOncePerChange")
	}
	hup := make(chan os.Signal, 10)
	signal.Notify(hup, syscall.SIGHUP)
	if worker := os.Getenv("WATCH_HUP_WORKER_COUNT_FILE"); worker != "" {
		w := exec.Command(os.Args[0], "-test.run=^TestWatchHelperHUPCounter$")
		w.Env = append(os.Environ(), "WATCH_HUP_COUNT_FILE="+worker, "WATCH_HUP_WORKER_COUNT_FILE=")
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Process.Kill(); _ = w.Wait() }()
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for {
		select {
		case <-hup:
			f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("HUP\n"); err != nil {
				t.Error(err)
			}
			f.Close()
		case <-deadline:
			return
		}
	}
}

// syncBuffer is a bytes.Buffer the watcher's goroutine writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitLogged(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	watchEventually(t, watchReportWithin, func() error {
		if !strings.Contains(b.String(), want) {
			return fmt.Errorf("the watcher has not logged %q:\n%s", want, b.String())
		}
		return nil
	})
}

// watchEventually retries f until it returns nil or the timeout passes.
func watchEventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
