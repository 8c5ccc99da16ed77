//go:build root

package main

// Specification of the driver's mounts (tmpfs.go), as root: a volume's tmpfs (nosuid, nodev,
// noexec, size- and inode-capped, large folios without extra memory; never unlimited), the read-only bind a
// pod sees, and unmountExact taking off only the topmost mount. A test here that does not run as
// root fails, never skips. Reading the mount table, which needs no root, is in mountinfo_test.go.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/mountinfo"
)

// tmpfsTestNeedRoot fails (not skips) the test when not root: the project's
// rule is that a test that cannot run must be loud about it.
func tmpfsTestNeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts filesystems and must run as root")
	}
}

// tmpfsTestMount mounts a tmpfs on a fresh temp dir and unmounts it when the
// test ends (before t.TempDir's own cleanup, as cleanups run last-in first-out).
func tmpfsTestMount(t *testing.T, size int64) string {
	t.Helper()
	tmpfsTestNeedRoot(t)
	dir := tmpfsTestRealDir(t)
	if err := mountTmpfs(dir, size, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmountExact(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

// tmpfsTestRealDir is t.TempDir with symlinks resolved, because mountinfo
// lists resolved paths.
func tmpfsTestRealDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// The volume tmpfs is mounted nosuid,nodev,noexec with its size cap, and with large folios
// where files cover them (huge=within_size, when the kernel has transparent huge pages) without
// costing memory: a 1 KiB file still takes one 4 KiB page, a 1 MiB file 1 MiB.
func TestTmpfsMountOptions(t *testing.T) {
	dir := tmpfsTestMount(t, 4<<20)
	entries, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := mountinfo.At(entries, dir)
	if !ok {
		t.Fatal("no mount at", dir)
	}
	for _, opt := range []string{"nosuid", "nodev", "noexec"} {
		if !hasOption(e.Options, opt) {
			t.Errorf("mount options %q lack %s", e.Options, opt)
		}
	}
	if !hasOption(e.SuperOptions, "size=4096k") {
		t.Errorf("tmpfs options %q lack the size cap size=4096k", e.SuperOptions)
	}
	if want := fmt.Sprintf("nr_inodes=%d", tmpfsInodes); !hasOption(e.SuperOptions, want) {
		t.Errorf("tmpfs options %q lack the cap on entries %s", e.SuperOptions, want)
	}
	_, statErr := os.Stat("/sys/kernel/mm/transparent_hugepage")
	if thp := statErr == nil; hasOption(e.SuperOptions, tmpfsHugeOption) != thp {
		t.Errorf("tmpfs options %q: %s present is %v, want %v (the kernel has transparent huge pages: %v)",
			e.SuperOptions, tmpfsHugeOption, !thp, thp, thp)
	}
	for _, size := range []int{1 << 10, 1 << 20} {
		name := filepath.Join(dir, "f")
		if err := os.WriteFile(name, bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Stat(name, &st); err != nil {
			t.Fatal(err)
		}
		want := max(int64(size), 4096) / 512
		if st.Blocks != want {
			t.Errorf("a %d-byte file takes %d blocks of 512 bytes, want %d", size, st.Blocks, want)
		}
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTmpfsMountRejectsUnlimitedSize(t *testing.T) {
	tmpfsTestNeedRoot(t)
	dir := tmpfsTestRealDir(t)
	for _, size := range []int64{0, -1} {
		if err := mountTmpfs(dir, size, ""); err == nil {
			_ = unmountExact(dir)
			t.Fatalf("mountTmpfs accepted size %d (tmpfs would be unlimited)", size)
		}
	}
	entries, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := mountinfo.At(entries, dir); ok {
		t.Fatalf("something got mounted: %+v", e)
	}
}

func TestTmpfsBindReadOnly(t *testing.T) {
	src := tmpfsTestMount(t, 1<<20)
	if err := (atomicwriter.Writer{Dir: src, GID: -1}).Write(map[string]atomicwriter.File{"ca.crt": {Data: []byte("hello"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	target := tmpfsTestRealDir(t)
	if err := bindReadOnly(src, target); err != nil {
		t.Fatal(err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			if err := unmountExact(target); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	if got, err := os.ReadFile(filepath.Join(target, "ca.crt")); err != nil || string(got) != "hello" {
		t.Fatalf("read through bind = %q, %v", got, err)
	}
	for what, err := range map[string]error{
		"overwrite": os.WriteFile(filepath.Join(target, "ca.crt"), []byte("evil"), 0o644),
		"create":    os.WriteFile(filepath.Join(target, "new"), []byte("evil"), 0o644),
		"mkdir":     os.Mkdir(filepath.Join(target, "d"), 0o755),
		"remove":    os.Remove(filepath.Join(target, "ca.crt")),
		"rename":    os.Rename(filepath.Join(target, "..data"), filepath.Join(target, "x")),
		"chmod":     os.Chmod(filepath.Join(target, "..data", "ca.crt"), 0o777),
	} {
		if !errors.Is(err, unix.EROFS) {
			t.Errorf("%s through the read-only bind: %v, want EROFS", what, err)
		}
	}

	// The source stays writable, and the bind shows updates immediately.
	if err := (atomicwriter.Writer{Dir: src, GID: -1}).Write(map[string]atomicwriter.File{"ca.crt": {Data: []byte("rotated"), Mode: 0o644}}); err != nil {
		t.Fatalf("source not writable: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "ca.crt")); err != nil || string(got) != "rotated" {
		t.Fatalf("bind after rotation = %q, %v", got, err)
	}

	entries, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := mountinfo.At(entries, target)
	if !ok {
		t.Fatalf("no mountinfo entry for %s", target)
	}
	opts := strings.Split(e.Options, ",")
	for _, want := range []string{"ro", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(opts, want) {
			t.Errorf("bind options %q lack %q", e.Options, want)
		}
	}
	if e.FSType != "tmpfs" {
		t.Errorf("bind fstype %q, want tmpfs", e.FSType)
	}
	s, ok := mountinfo.At(entries, src)
	if !ok {
		t.Fatalf("no mountinfo entry for %s", src)
	}
	sopts := strings.Split(s.Options, ",")
	for _, want := range []string{"rw", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(sopts, want) {
			t.Errorf("tmpfs options %q lack %q", s.Options, want)
		}
	}
	for _, want := range []string{"size=1024k", "mode=755"} {
		if !slices.Contains(strings.Split(s.SuperOptions, ","), want) {
			t.Errorf("tmpfs super options %q lack %q", s.SuperOptions, want)
		}
	}
	if s.MajorMinor != e.MajorMinor {
		t.Errorf("bind is on device %s, tmpfs on %s", e.MajorMinor, s.MajorMinor)
	}

	if err := unmountExact(target); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	if err := unmountExact(src); err != nil {
		t.Fatal(err)
	}
	entries, err = mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, src} {
		if e, ok := mountinfo.At(entries, p); ok {
			t.Errorf("still mounted after unmountExact: %+v", e)
		}
	}
	// The tmpfs cleanup will call unmountExact(src) again: it must be a no-op.
}

func TestMountUnmountExactNotMounted(t *testing.T) {
	tmpfsTestNeedRoot(t)
	dir := t.TempDir()
	if err := unmountExact(dir); err != nil {
		t.Errorf("unmountExact on a plain dir: %v, want nil", err)
	}
	if err := unmountExact(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("unmountExact on a missing path: %v, want nil", err)
	}
}

func TestMountUnmountExactOnlyTopmost(t *testing.T) {
	lower := tmpfsTestMount(t, 1<<20)
	topmostDev := func() string {
		entries, err := mountinfo.Read()
		if err != nil {
			t.Fatal(err)
		}
		e, ok := mountinfo.At(entries, lower)
		if !ok {
			t.Fatal("nothing mounted at", lower)
		}
		return e.MajorMinor
	}
	lowerDev := topmostDev()
	if err := mountTmpfs(lower, 1<<20, ""); err != nil {
		t.Fatal(err)
	}
	if topmostDev() == lowerDev {
		t.Fatal("the second tmpfs is not the topmost mount")
	}
	if err := unmountExact(lower); err != nil {
		t.Fatal(err)
	}
	if id := topmostDev(); id != lowerDev {
		t.Fatalf("after unmountExact the topmost mount is %s, want the lower one, %s", id, lowerDev)
	}
}

// BenchmarkTmpfsWrite: writing one file into a fresh tmpfs, as a publish does, with and without
// large folios (huge=within_size). Each run mounts, writes and unmounts 200 times and reports the
// median write (create, write, close), so that -benchtime 1x (make bench) still gives a figure.
func BenchmarkTmpfsWrite(b *testing.B) {
	tmpfsTestNeedRoot(b)
	dir := b.TempDir()
	for _, opts := range []string{"", tmpfsHugeOption} {
		for _, size := range []struct {
			name  string
			bytes int
		}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
			name := fmt.Sprintf("huge=%s/size=%s", cmp.Or(strings.TrimPrefix(opts, "huge="), "none"), size.name)
			b.Run(name, func(b *testing.B) {
				data := bytes.Repeat([]byte{'x'}, size.bytes)
				for range b.N {
					const writes = 200
					took := make([]time.Duration, 0, writes)
					for range writes {
						if err := unix.Mount("tmpfs", dir, "tmpfs", 0, strings.TrimSuffix("size=4m,"+opts, ",")); err != nil {
							b.Fatal(err)
						}
						start := time.Now()
						err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644)
						took = append(took, time.Since(start))
						if err != nil {
							b.Fatal(err)
						}
						if err := unix.Unmount(dir, 0); err != nil {
							b.Fatal(err)
						}
					}
					slices.Sort(took)
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(float64(took[writes/2].Nanoseconds())/1e3, "write-p50-us")
				}
			})
		}
	}
}

// A volume's tmpfs holds at most tmpfsInodes entries, hard links included (tmpfs counts each link
// as an inode: internal/volume charges the view's links for that reason): past it, creating a file or
// a link fails with ENOSPC, whatever the size cap leaves.
func TestTmpfsCapsEntriesHardLinksIncluded(t *testing.T) {
	for _, kind := range []string{"files", "hard links"} {
		t.Run(kind, func(t *testing.T) {
			dir := tmpfsTestMount(t, 4<<20)
			first := filepath.Join(dir, "f")
			if err := os.WriteFile(first, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			made := 2 // the root and f
			for ; made <= tmpfsInodes+1; made++ {
				name := filepath.Join(dir, fmt.Sprintf("e%d", made))
				var err error
				if kind == "files" {
					err = os.WriteFile(name, nil, 0o644)
				} else {
					err = os.Link(first, name)
				}
				if errors.Is(err, unix.ENOSPC) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if made > tmpfsInodes {
				t.Fatalf("%d entries made in a tmpfs of nr_inodes=%d", made, tmpfsInodes)
			}
			t.Logf("%s: ENOSPC after %d entries (nr_inodes=%d)", kind, made, tmpfsInodes)
		})
	}
}
