package main

// Every mount the driver makes and removes: each volume's tmpfs, the read-only bind of its view
// onto the pod's target, and the exact unmount of either. The driver reaches them through the
// mounter interface, so that publish and unpublish can be unit-tested without root against a
// fake (fakemounter_test.go); kernelMounter is the real one. Nothing here knows about
// Kubernetes objects: callers hand in plain paths. (Reading the mount table: internal/mountinfo.)

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/mountinfo"
)

// mounter makes, finds and removes mounts.
type mounter interface {
	// mountTmpfs mounts a fresh tmpfs of at most sizeBytes on dir, which must exist; options
	// are added to the mount data (an SELinux context=...).
	mountTmpfs(dir string, sizeBytes int64, options string) error
	// bindReadOnly binds source onto target, read-only from the moment it exists.
	bindReadOnly(source, target string) error
	// unmount unmounts the topmost mount at exactly path; none there is success.
	unmount(path string) error
	// isBindOf says whether the topmost mount at target shows the directory source (target
	// missing: false). An error that wraps fs.ErrNotExist: source itself is gone.
	isBindOf(source, target string) (bool, error)
	// mounts reads the mount table.
	mounts() ([]mountinfo.Entry, error)
}

// kernelMounter is the driver's mounter: the system calls below.
type kernelMounter struct{}

var _ mounter = kernelMounter{}

func (kernelMounter) mountTmpfs(dir string, sizeBytes int64, options string) error {
	return mountTmpfs(dir, sizeBytes, options)
}
func (kernelMounter) bindReadOnly(source, target string) error { return bindReadOnly(source, target) }
func (kernelMounter) unmount(path string) error                { return unmountExact(path) }
func (kernelMounter) mounts() ([]mountinfo.Entry, error)       { return mountinfo.Read() }

// isBindOf compares two stat(2)s: lstat of a mount point shows the mounted directory, so target
// is a bind of source exactly when it is the very inode of source on the same device. Reading
// the mount table instead reads every mount on the node, under a lock the kernel also takes for
// every mount and unmount: with 1000 volumes that made each unpublish cost tens of milliseconds.
func (kernelMounter) isBindOf(source, target string) (bool, error) {
	var src, tgt unix.Stat_t
	if err := unix.Stat(source, &src); err != nil {
		return false, fmt.Errorf("stat %s: %w", source, err)
	}
	if err := unix.Lstat(target, &tgt); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("lstat %s: %w", target, err)
	}
	return tgt.Dev == src.Dev && tgt.Ino == src.Ino, nil
}

// mountTmpfs mounts a fresh tmpfs of at most sizeBytes on dir (which must
// exist). extraData is appended to the mount data when non-empty (for example
// an SELinux "context=...").
//
// nosuid/nodev/noexec because the content is data (certificates, tokens), never
// something to execute or a device node; size is always set because the memory
// is charged to the node and a runaway payload must hit ENOSPC instead of
// eating RAM. nr_inodes likewise (tmpfsInodes): files, directories and links
// cost memory whatever their size, and tmpfs's default allows millions.
//
// huge=within_size lets the kernel back a file with large folios where the
// file (or the write that extends it) covers them, and with small pages
// elsewhere, so it never costs memory: a 1 KiB file still takes one page.
// Since Linux 6.14 that includes folios smaller than 2 MiB, and writing a
// 1 MiB Secret into a fresh tmpfs takes a third of the time it takes page by
// page (BenchmarkTmpfsWrite). A kernel built without transparent huge pages
// refuses the option with EINVAL; the mount is then retried without it.
func mountTmpfs(dir string, sizeBytes int64, extraData string) error {
	// tmpfs treats size=0 as "unlimited", which is exactly what the size cap is
	// there to prevent, so refuse it rather than pass it through.
	if sizeBytes <= 0 {
		return fmt.Errorf("mount tmpfs on %s: size must be positive, got %d", dir, sizeBytes)
	}
	data := tmpfsMountData(sizeBytes, extraData)
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	err := unix.Mount("tmpfs", dir, "tmpfs", flags, data+","+tmpfsHugeOption)
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount("tmpfs", dir, "tmpfs", flags, data)
	}
	if err != nil {
		return fmt.Errorf("mount tmpfs on %s (%s): %w", dir, data, err)
	}
	return nil
}

// tmpfsHugeOption is the mount option for large folios (see mountTmpfs).
const tmpfsHugeOption = "huge=within_size"

// tmpfsInodes is the nr_inodes of a volume's tmpfs: how many entries (files, directories,
// symbolic links, and hard links, which tmpfs counts as inodes: shmem_link) it may hold at once.
// A volume holds at most maxVolumeEntries files and directories over its shares' copies (N);
// the atomic writer adds at most a link per file and three entries per directory it fills, and
// the view links every file again: 4N steady, 5N with the view a refresh keeps for readers
// (internal/volume). An update drops that kept view first, then writes a new copy or a new view (at
// most 2N) beside the old one: 6N. Since Linux 6.6 an inode's security label
// (SELinux) is counted against the same space, about a tenth of an inode more each: 8N, and 128
// for the record (twice while it is saved), the volume's own directories and the entries of up
// to maxShares shares. The bound is the last line: publish and refresh refuse what would exceed
// maxVolumeEntries with a message, before the kernel would refuse it with ENOSPC. At the bound
// the kernel holds some 32 MiB for the volume's entries, and only for a moment: steady, a
// volume at the bound is charged 16 MiB in the budget.
const tmpfsInodes = 8*maxVolumeEntries + 128

// tmpfsMountData is the mount data of a volume's tmpfs: its size, its number of inodes, and
// extraData (an SELinux context=...), if any.
func tmpfsMountData(sizeBytes int64, extraData string) string {
	data := "size=" + strconv.FormatInt(sizeBytes, 10) + ",nr_inodes=" + strconv.Itoa(tmpfsInodes) + ",mode=0755"
	if extraData != "" {
		data += "," + extraData
	}
	return data
}

// bindReadOnly bind-mounts source onto target, read-only, nosuid, nodev and
// noexec from the moment it exists, in every mount namespace it propagates to.
// It needs the new mount API (Linux 5.12); on an older kernel it fails rather
// than fall back to a bind that the host could see writable.
func bindReadOnly(source, target string) error {
	// The bind is made read-only before it is attached: open_tree clones source as a detached
	// mount, mount_setattr makes that read-only, move_mount attaches it at target. A classic
	// bind followed by a read-only remount is not enough when the driver runs in its own mount
	// namespace (a container with Bidirectional propagation): the bind propagates to the host
	// as it is created (writable), and the remount does not propagate, so the kubelet and the
	// pod's container runtime would see a writable mount.
	fd, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("clone %s: this kernel lacks open_tree/mount_setattr (Linux 5.12+), needed for a bind mount that is read-only on the host too: %w", source, err)
	}
	if err != nil {
		return fmt.Errorf("clone %s: %w", source, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("make the bind of %s read-only: %w", source, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	return nil
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
