//go:build root

package atomicwriter

// Specifies Writer.Write where only root can look: exact modes (a mode 0000 file is read back),
// group ownership (files given to uid 0 and another group, then read by uid 1000 in and out of
// that group, so the kernel checks the modes as for a pod), a change of group alone republished,
// and a full file system (a 64 KiB tmpfs). Behind the build tag root, as root: a test
// here that does not run as root fails, never skips. The rest of Write is in write_test.go.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Each file gets exactly its mode, whatever the umask; a mode change alone is published.
func TestWriteModes(t *testing.T) {
	needRoot(t, "reads a mode 0000 file")
	dir := t.TempDir()
	files := map[string]File{}
	for _, m := range []os.FileMode{0o000, 0o400, 0o440, 0o444, 0o600, 0o640, 0o644, 0o660, 0o666, 0o700, 0o755, 0o777} {
		files[fmt.Sprintf("modes/%04o", uint32(m))] = fileOf("v", m)
	}
	files["top.key"] = fileOf("k", 0o400)
	mustWrite(t, dir, -1, files)
	checkLayout(t, dir, files, -1) // stats every file through its top-level link

	ts := payloadDirs(t, dir)
	files["modes/0644"] = fileOf("v", 0o604)
	mustWrite(t, dir, -1, files)
	if slices.Equal(ts, payloadDirs(t, dir)) {
		t.Fatal("a mode change was not published")
	}
	checkLayout(t, dir, files, -1)
}

// With a GID, the payload dir and every dir and file in it are owned by 0:GID, so that a
// non-root reader in the group reads a 0440 file; the volume dir and the links are not
// re-owned. Without one, ownership is as created.
func TestWriteGroupOwnership(t *testing.T) {
	needRoot(t, "gives files to uid 0 and another group")
	const gid = 2345
	// t.TempDir's parents are 0700, which no non-root reader could traverse.
	base, err := os.MkdirTemp("", "atomicwriter-fsgroup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "vol")
	files := map[string]File{
		"ca.crt":             fileOf("CA", 0o644),
		"certs/tls.key":      fileOf("GROUP-READABLE", 0o440),
		"certs/owner.key":    fileOf("OWNER-ONLY", 0o400),
		"certs/deep/x/y.pem": fileOf("Y", 0o440),
	}
	mustWrite(t, dir, gid, files)
	checkLayout(t, dir, files, gid)
	for _, p := range []string{dir, filepath.Join(dir, "..data"), filepath.Join(dir, "certs")} {
		if uid, g := ownerOf(t, p); uid != uint32(os.Geteuid()) || g != uint32(os.Getegid()) {
			t.Errorf("%s owned by %d:%d, want the writer's %d:%d", p, uid, g, os.Geteuid(), os.Getegid())
		}
	}

	// What fsGroup is for: a non-root reader in the group reads the 0440 file through the
	// top-level link, and still cannot read the 0400 one; outside the group it reads neither.
	if out, err := readAs(t, filepath.Join(dir, "certs/tls.key"), gid); err != nil || string(out) != "GROUP-READABLE" {
		t.Errorf("uid 1000 in group %d reading a 0440 file: %q, %v; want its content", gid, out, err)
	}
	if out, err := readAs(t, filepath.Join(dir, "certs/deep/x/y.pem"), gid); err != nil || string(out) != "Y" {
		t.Errorf("uid 1000 in group %d reading a nested 0440 file: %q, %v; want its content", gid, out, err)
	}
	if out, err := readAs(t, filepath.Join(dir, "certs/owner.key"), gid); err == nil {
		t.Errorf("uid 1000 in group %d read a 0400 file owned by root: %q", gid, out)
	}
	if out, err := readAs(t, filepath.Join(dir, "certs/tls.key"), 3000); err == nil {
		t.Errorf("uid 1000 outside group %d read a 0440 file: %q", gid, out)
	}
	if out, err := readAs(t, filepath.Join(dir, "ca.crt"), 3000); err != nil || string(out) != "CA" {
		t.Errorf("uid 1000 reading a 0644 file: %q, %v; want its content", out, err)
	}

	// GID -1: ownership is left as created, and the change of ownership alone is published.
	mustWrite(t, dir, -1, files)
	checkLayout(t, dir, files, -1)
	if out, err := readAs(t, filepath.Join(dir, "certs/tls.key"), gid); err == nil {
		t.Errorf("after GID -1, uid 1000 in group %d still reads the 0440 file: %q", gid, out)
	}
}

// Ownership is part of the payload: the same bytes and modes with another GID are published.
func TestWriteRepublishesWhenGroupChanges(t *testing.T) {
	needRoot(t, "gives files to uid 0 and another group")
	dir := t.TempDir()
	files := map[string]File{
		"ca.crt":        fileOf("CA", 0o644),
		"certs/tls.key": fileOf("KEY", 0o440),
	}
	steps := []struct {
		gid     int
		swapped bool
	}{
		{-1, true}, // first write
		{-1, false},
		{2345, true}, // same bytes and modes, new group: must be published
		{2345, false},
		{2346, true},
		{-1, true}, // back to "as created"
		{-1, false},
	}
	var ts []string
	for i, s := range steps {
		if err := (Writer{Dir: dir, GID: s.gid}).Write(maps.Clone(files)); err != nil {
			t.Fatalf("step %d (gid %d): %v", i, s.gid, err)
		}
		now := payloadDirs(t, dir)
		if swapped := !slices.Equal(ts, now); swapped != s.swapped {
			t.Fatalf("step %d (gid %d): swapped = %v (%q -> %q), want %v", i, s.gid, swapped, ts, now, s.swapped)
		}
		checkLayout(t, dir, files, s.gid)
		ts = now
	}
}

// On a full file system the write fails with ENOSPC before the swap, leaves the old set in
// place and nothing of its own behind, and frees its space: the next write that fits works.
func TestWriteENOSPCKeepsOldSet(t *testing.T) {
	dir := mountTmpfs(t, 64<<10)
	small := map[string]File{"ca.crt": fileOf("CA", 0o644), "tls.key": fileOf("KEY", 0o644)}
	mustWrite(t, dir, -1, small)
	big := map[string]File{"ca.crt": fileOf("CA", 0o644), "huge.bin": {Data: bytes.Repeat([]byte{'x'}, 1<<20), Mode: 0o644}}
	if err := (Writer{Dir: dir, GID: -1}).Write(big); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 1 MiB into a 64 KiB tmpfs: %v, want ENOSPC", err)
	}
	checkLayout(t, dir, small, -1)
	if _, err := os.Lstat(filepath.Join(dir, "..data_tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("..data_tmp left behind (err %v)", err)
	}
	next := map[string]File{"ca.crt": fileOf("CA2", 0o644), "big.bin": {Data: bytes.Repeat([]byte{'y'}, 40<<10), Mode: 0o644}}
	if err := (Writer{Dir: dir, GID: -1}).Write(next); err != nil {
		t.Fatalf("write after ENOSPC: %v", err)
	}
	checkLayout(t, dir, next, -1)
}

// needRoot fails the test, loudly, unless it runs as root; why says what needs root.
func needRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test %s and must run as root (euid is %d)", why, os.Geteuid())
	}
}

// mountTmpfs mounts a tmpfs of size bytes (nosuid, nodev, noexec, as the driver mounts a
// volume's) on a fresh temp dir and unmounts it when the test ends, before t.TempDir's own
// cleanup (cleanups run last-in first-out).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	needRoot(t, "mounts a tmpfs")
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := "size=" + strconv.FormatInt(size, 10) + ",mode=0755"
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		err := unix.Unmount(dir, 0)
		for i := 0; errors.Is(err, unix.EBUSY) && i < 5; i++ {
			time.Sleep(50 * time.Millisecond)
			err = unix.Unmount(dir, 0)
		}
		if err != nil {
			t.Errorf("cleanup: unmount %s: %v", dir, err)
		}
	})
	return dir
}

// readAs runs cat on path as uid 1000 with the given groups and returns its output and error,
// so that file modes and group ownership are checked by the kernel, as for a pod.
func readAs(t *testing.T, path string, groups ...uint32) ([]byte, error) {
	t.Helper()
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cat, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: groups}}
	return cmd.CombinedOutput()
}
