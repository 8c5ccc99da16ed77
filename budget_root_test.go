//go:build root

package main

// The budget against a real tmpfs, as root: volumes whose names a pod chose as long as it may
// are written the way the driver writes them (the shares' copies and the view of hard links, by
// the atomic writer, and the record), on a tmpfs of the driver's default size (--tmpfs-size 4Mi),
// and what the tmpfs then holds (statfs: its pages, and its inodes, each costing the kernel an
// inode, a dentry and a name of up to 253 bytes) must not be more than what the volume is charged
// for its tmpfs (volume.RecordedBytes, less what it charges for the driver's heap).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// inodeKernelBytes is what one inode of a volume's tmpfs costs the kernel at most, names of 253
// bytes included: shmem_inode_cache (744 bytes on Linux 6.18, x86_64), a dentry (192) and the
// name's own allocation (kmalloc-512 for a 16-byte header, 253 bytes and a NUL). A hard link is
// counted as an inode by tmpfs, and costs a dentry and a name.
const inodeKernelBytes = 744 + 192 + 512

func TestLongNamedVolumesAreChargedWhatTheirTmpfsHolds(t *testing.T) {
	seg := func(prefix string, i int) string {
		return fmt.Sprintf("%s%04d", prefix, i) + strings.Repeat("n", 253-len(prefix)-4)
	}
	for _, c := range []struct {
		name  string
		paths func() []string
	}{
		{"300 files of 253-byte names", func() []string {
			var out []string
			for i := range 300 {
				out = append(out, seg("f", i))
			}
			return out
		}},
		{"100 files 8 directories deep, every segment 253 bytes", func() []string {
			var out []string
			for i := range 100 {
				p := seg("d", i)
				for d := range 7 {
					p += "/" + seg(fmt.Sprintf("s%d-", d), i)
				}
				out = append(out, p+"/"+seg("f", i))
			}
			return out
		}},
		{"one top directory of 800 files of 253-byte names", func() []string {
			var out []string
			for i := range 800 {
				out = append(out, seg("top", 0)+"/"+seg("f", i))
			}
			return out
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := tmpfsTestMount(t, 4<<20)
			var before unix.Statfs_t
			if err := unix.Statfs(dir, &before); err != nil {
				t.Fatal(err)
			}
			rec := volume.Record{VolumeID: "vol-long", Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "s"}}}, GID: -1}
			files := map[string]atomicwriter.File{}
			for _, p := range c.paths() {
				files[p] = atomicwriter.File{Data: []byte("x"), Mode: 0o444}
				rec.Items = append(rec.Items, volume.Item{Key: "k", Path: p})
			}
			rec.Shares[0].Bytes = volume.ChargedBytes(files)
			vd := volume.Dir{Path: dir, GID: -1}
			if err := vd.Populate(volume.ComposeView([]map[string]atomicwriter.File{files})); err != nil {
				t.Fatal(err)
			}
			b, err := volume.EncodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, volume.RecordFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			var after unix.Statfs_t
			if err := unix.Statfs(dir, &after); err != nil {
				t.Fatal(err)
			}
			blocks := int64(before.Bfree-after.Bfree) * after.Bsize
			inodes := int64(before.Ffree - after.Ffree)
			held := blocks + inodes*inodeKernelBytes
			charged := volume.RecordedBytes(rec) - volume.HeapBytes(rec)
			t.Logf("%d KiB of tmpfs pages and %d inodes: %d KiB held at most; charged %d KiB for the tmpfs (and %d KiB for the heap)",
				blocks>>10, inodes, held>>10, charged>>10, volume.HeapBytes(rec)>>10)
			if charged < held {
				t.Errorf("charged %d KiB for a tmpfs that holds %d KiB (%d KiB of pages, %d inodes)", charged>>10, held>>10, blocks>>10, inodes)
			}
			// With no file kept open, the walk finds every page and inode the kernel counts:
			// nothing is charged as removed but kept open.
			usage, ok := vd.KernelUsage()
			m, err := vd.Measure()
			if err != nil || !ok || usage != m.Seen {
				t.Errorf("the kernel counts %+v (%v) in the tmpfs, the walk finds %+v (%v)", usage, ok, m.Seen, err)
			}
		})
	}
}

// A pod that keeps a file of its volume open while refreshes replace it keeps that version's
// pages in the volume's tmpfs after the file was removed: no name leads to them, so neither the
// record nor a walk of the tmpfs counts them, but the kernel does, and the reconcile that removed
// them charges the volume them on top of its record: the file's pages, its inode and the longest
// name, and the inode of the payload dir it was in. A driver restarted while the file is open
// charges them as it resumes the volume, before its first relist; closed, they are freed, and the
// next reconcile charges the record alone.
func TestFilesKeptOpenAfterARefreshAreCharged(t *testing.T) {
	tmpfsTestNeedRoot(t)
	for _, size := range []int{8 << 10, 64 << 10} {
		t.Run(fmt.Sprintf("%d KiB", size>>10), func(t *testing.T) {
			c := newFakeCluster(t)
			d, _ := c.node()
			root := tmpfsTestRealDir(t)
			d.kubeletRoot, d.mounter, d.tmpfsSize = root, kernelMounter{}, 4<<20
			d.store = volume.NewStore(filepath.Join(root, "plugins", driverName), d.budget)
			version := func(v string) map[string]string { return map[string]string{"ca.crt": strings.Repeat(v, size)} }
			// Version a, removed: its pages, and two inodes, its own and the payload dir's it was
			// in (the open file's dentry holds its parent's, and with it the inode).
			kept := int64(size) + 2*(volume.EntryBytes+volume.MaxEntryNameBytes)
			charged := func(d *driver, when string, want int64) {
				t.Helper()
				saved := volume.RecordedBytes(savedRecord(t, d, "vol"))
				if got := d.budget.Charge("vol").Bytes(); got != saved+want {
					t.Errorf("%s: charged %d bytes, want the record's %d and %d more", when, got, saved, want)
				}
			}
			c.setSource(version("a"))
			req := publishVolume(t, d, "vol")
			t.Cleanup(func() {
				if _, err := (&nodeServer{d: d}).NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
			held, err := os.Open(filepath.Join(req.TargetPath, "ca.crt")) // the pod reads version a, and keeps it open
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			reconcile := func(d *driver) {
				t.Helper()
				if err := reconcileVolume(t, d, "vol"); err != nil {
					t.Fatal(err)
				}
			}
			// b replaces a: the view showing a is kept for readers (the record charges it).
			c.setSource(version("b"))
			reconcile(d)
			charged(d, "a kept for readers", 0)
			// The next reconcile, with no change, drops the kept view: a's file is removed, and
			// only the open file keeps its pages.
			reconcile(d)
			charged(d, "a removed, open", kept)
			// c replaces b: b is not open, and goes.
			c.setSource(version("c"))
			reconcile(d)
			reconcile(d)
			charged(d, "c", kept)

			// Restarted while the file is open: charged as it resumes the volume (at least: the
			// record as found may count more), then by its first reconcile.
			n, _ := c.restart(d)
			if got, saved := n.budget.Charge("vol").Bytes(), volume.RecordedBytes(savedRecord(t, n, "vol")); got < saved+kept {
				t.Errorf("resumed: charged %d bytes, want at least the record's %d and %d for version a", got, saved, kept)
			}
			reconcile(n)
			charged(n, "resumed, reconciled", kept)

			held.Close()
			reconcile(n)
			charged(n, "closed", 0)
		})
	}
}

// The kernel's count is the volume's own tmpfs's: a volume dir that is not a tmpfs's mount point
// (a unit test's plain directory, on a /tmp that may be a tmpfs) is not counted, and a tmpfs
// mounted inside another counts its own pages alone.
func TestKernelCountIsTheVolumesOwnTmpfs(t *testing.T) {
	outer := tmpfsTestMount(t, 4<<20)
	if err := os.WriteFile(filepath.Join(outer, "other"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(outer, "plain")
	if err := os.Mkdir(plain, 0o700); err != nil {
		t.Fatal(err)
	}
	if u, ok := (volume.Dir{Path: plain}).KernelUsage(); ok {
		t.Errorf("a plain directory on a tmpfs was counted %+v: the tmpfs's, not a volume's", u)
	}
	inner := filepath.Join(outer, "inner")
	if err := os.Mkdir(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountTmpfs(inner, 4<<20, ""); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unmountExact(inner); err != nil {
			t.Error(err)
		}
	}()
	if err := os.WriteFile(filepath.Join(inner, "f"), make([]byte, 8<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	// Its root and the file: two inodes, two pages.
	if u, ok := (volume.Dir{Path: inner}).KernelUsage(); !ok || u != (volume.Usage{PageBytes: 2 * volume.PageSize, InodeSpace: 2 * volume.InodeSpaceBytes}) {
		t.Errorf("a tmpfs holding one 8 KiB file counted %+v (%v), want two pages and two inodes", u, ok)
	}
}

// Extended attributes take a tmpfs's inode space (an SELinux label on every inode of a tmpfs
// mounted without context=): the walk counts them as the kernel does, so a volume whose inodes
// carry them is not charged them as files removed but kept open.
func TestKernelCountOfExtendedAttributesIsTheWalks(t *testing.T) {
	dir := tmpfsTestMount(t, 4<<20)
	for i := range 40 {
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := os.Link(p, p+".link"); err != nil {
				t.Fatal(err)
			}
		}
		value := strings.Repeat("v", 10+i*7) // as long as a label, and longer
		if err := unix.Setxattr(p, "user.label", []byte(value), 0); err != nil {
			t.Fatalf("setting a user xattr on a tmpfs (Linux 6.6 or later, which also counts xattrs in a tmpfs's inode space): %v", err)
		}
	}
	vd := volume.Dir{Path: dir}
	usage, ok := vd.KernelUsage()
	m, err := vd.Measure()
	if err != nil || !ok {
		t.Fatal(err, ok)
	}
	if usage != m.Seen {
		t.Errorf("the kernel counts %+v, the walk %+v", usage, m.Seen)
	}
	if b := usage.Beyond(m.Seen); b != 0 {
		t.Errorf("%d bytes charged as kept open, with nothing open", b)
	}
}
