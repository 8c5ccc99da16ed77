//go:build root

package podcmd

// Specification of `shared-resource-csi watch` where users matter, as root (to run processes as
// another user): a watcher that may not read the files refuses to start, exit 1, saying what to
// change; --signal signals only processes of the watcher's own user. A test here that does not
// run as root fails, never skips.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// nobody is the user the tests run the other side as.
const nobody = 65534

// openDir is a fresh directory every user may traverse (t.TempDir's are 0700), removed when the
// test ends.
func openDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs processes as another user and must run as root")
	}
	dir, err := os.MkdirTemp("", "watch-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testBinaryFor is a copy of this test binary that every user may run.
func testBinaryFor(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "watch.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// A share whose files the watcher's user may not read (0400, root's): the watcher refuses to
// start, exit 1, naming its user and what to change, rather than watch ..data alone and restart
// the application on a revocation and on a restore of the same bytes.
func TestWatchRefusesFilesItCannotRead(t *testing.T) {
	dir := openDir(t)
	share := filepath.Join(dir, "share")
	if err := (atomicwriter.Writer{Dir: share, GID: -1}).Write(map[string]atomicwriter.File{"tls.key": {Data: []byte("k"), Mode: 0o400}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testBinaryFor(t, dir), "-test.run=^TestWatchHelperRunWatch$")
	cmd.Env = append(os.Environ(), "WATCH_HELPER_ARGS=--dir="+share)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, _ := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if ctx.Err() != nil {
		t.Fatalf("the watcher did not refuse files it may not read: it was still running after 10 s:\n%s", out)
	}
	for _, want := range []string{"may not read the share's files as uid 65534", "run it as a user that may read them"} {
		if code != watchExitFailed || !strings.Contains(string(out), want) {
			t.Errorf("watch as uid %d over a 0400 file of root's: exit %d, output %q; want exit %d and %q", nobody, code, out, watchExitFailed, want)
		}
	}
}

// TestWatchHelperRunWatch is not a test: TestWatchRefusesFilesItCannotRead runs the test binary
// as this, as another user: the watcher with the arguments of WATCH_HELPER_ARGS, exiting with
// its code.
func TestWatchHelperRunWatch(t *testing.T) {
	args := os.Getenv("WATCH_HELPER_ARGS")
	if args == "" {
		t.Skip("helper process of TestWatchRefusesFilesItCannotRead")
	}
	os.Exit(runWatchCommand(context.Background(), strings.Split(args, " "), os.Stderr))
}

// A process of the name --process gives, but another user's: the watcher (root, here, which may
// signal anyone) does not signal it, and says why.
func TestWatchSignalsOnlyItsOwnUsersProcesses(t *testing.T) {
	dir := openDir(t)
	share := filepath.Join(dir, "share")
	writeShare(t, share, map[string]string{"nginx.conf": "v1"})
	name := fmt.Sprintf("hup-%08x", rand.Uint32())
	counter := filepath.Join(dir, name)
	if err := os.Symlink(testBinaryFor(t, dir), counter); err != nil {
		t.Fatal(err)
	}
	counts := filepath.Join(dir, "counts")
	if err := os.Mkdir(counts, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(counts, 0o777); err != nil {
		t.Fatal(err)
	}
	count := filepath.Join(counts, "hups")
	child := exec.Command(counter, "-test.run=^TestWatchHelperHUPCounter$")
	child.Env = append(os.Environ(), "WATCH_HUP_COUNT_FILE="+count, "WATCH_HUP_WORKER_COUNT_FILE=")
	child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	child.Stdout, child.Stderr = io.Discard, io.Discard
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	watchEventually(t, 5*time.Second, func() error { _, err := os.Stat(count); return err })

	var stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- runWatchCommand(ctx, []string{"--dir", share, "--signal", "HUP", "--process", name}, &stderr)
	}()
	waitLogged(t, &stderr, "watching "+share)
	writeShare(t, share, map[string]string{"nginx.conf": "v2"})
	waitLogged(t, &stderr, "changed")
	time.Sleep(watchQuietFor)
	if b, _ := os.ReadFile(count); strings.Count(string(b), "HUP") != 0 {
		t.Errorf("a process named %q of uid %d was signalled by a watcher of uid %d:\n%s", name, nobody, os.Geteuid(), stderr.String())
	}
	if want := "run as another user, and are not signalled"; !strings.Contains(stderr.String(), want) {
		t.Errorf("the watcher did not say why it signalled nothing (want %q):\n%s", want, stderr.String())
	}
	cancel()
	<-done
}
