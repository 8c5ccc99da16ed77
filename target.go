package main

// The pod's side of a volume: its target path (checked, created) below the kubelet's root, and
// recognising the read-only bind of the volume's view onto it later, cheaply, so that unpublish
// and recovery only ever unmount what the driver mounted; and whether a pod's directory is still
// there. (Making the bind, and making it again: volume.go.)

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shared-resource/csi-driver/internal/mountinfo"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// checkTarget says whether the target directory exists, and refuses symlinks anywhere below the
// kubelet root: the driver must mount onto exactly the path it was given, not wherever a link
// points. The kubelet creates the target's parent; CSI makes the plugin create the target.
func checkTarget(kubeletRoot, target string) (exists bool, err error) {
	if exists, ok := checkTargetFast(kubeletRoot, target); ok {
		return exists, nil
	}
	return walkTarget(kubeletRoot, target)
}

// walkTarget is checkTarget segment by segment, with a message for each way a path can fail.
func walkTarget(kubeletRoot, target string) (exists bool, err error) {
	rel, err := filepath.Rel(kubeletRoot, target)
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "target_path %q: %v", target, err)
	}
	p := kubeletRoot
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		p = filepath.Join(p, s)
		fi, err := os.Lstat(p)
		last := i == len(segs)-1
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return false, status.Errorf(codes.InvalidArgument, "target_path %q: %s is a symlink; refusing to follow it", target, p)
		case err == nil && !fi.IsDir():
			return false, status.Errorf(codes.InvalidArgument, "target_path %q: %s is not a directory", target, p)
		case err == nil:
			continue
		case errors.Is(err, os.ErrNotExist) && last:
			return false, nil
		case errors.Is(err, os.ErrNotExist):
			return false, status.Errorf(codes.FailedPrecondition, "target_path %q: parent %s does not exist (the kubelet creates it)", target, p)
		default:
			return false, status.Errorf(codes.Internal, "target_path %q: %v", target, err)
		}
	}
	return true, nil
}

// checkTargetFast is checkTarget's common case in three syscalls where the walk below takes one
// lstat per segment: the target's parent opened with no symlink anywhere on its path
// (openat2 RESOLVE_NO_SYMLINKS, so every segment is a directory or the open fails), then an
// lstat of the target in it. ok is false whenever the walk must decide (a symlink, something
// that is not a directory, a missing parent, an error, a kernel without openat2 or a symlink
// in the kubelet root itself, which the walk does not look at): it gives the exact message.
func checkTargetFast(kubeletRoot, target string) (exists, ok bool) {
	rel, err := filepath.Rel(kubeletRoot, target)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return false, false
	}
	parent := filepath.Dir(target)
	fd, err := unix.Openat2(unix.AT_FDCWD, parent, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return false, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	err = unix.Fstatat(fd, filepath.Base(target), &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return true, true
	case errors.Is(err, unix.ENOENT):
		return false, true
	}
	return false, false
}

func createTarget(target string) error {
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return status.Errorf(codes.Internal, "creating target_path %q: %v", target, err)
	}
	return nil
}

// isOurBind says whether the topmost mount at target is the read-only bind of this volume's data:
// same file system (device) as the volume's tmpfs, rooted at its data dir.
func isOurBind(mounts []mountinfo.Entry, vol volume.Dir, target string) bool {
	tm, ok := mountinfo.At(mounts, vol.Path)
	if !ok {
		return false
	}
	b, ok := mountinfo.At(mounts, target)
	return ok && b.MajorMinor == tm.MajorMinor && isDataRoot(b.Root)
}

func hasOption(options, opt string) bool {
	return slices.Contains(strings.Split(options, ","), opt)
}

// bindIsOurs says whether the topmost mount at target is this volume's bind. Only when the
// volume's data dir is gone (a wiped state dir) is the mount table consulted.
func (d *driver) bindIsOurs(vol volume.Dir, target string) (bool, error) {
	ours, err := d.mounter.isBindOf(vol.ViewPath(), target)
	if !errors.Is(err, fs.ErrNotExist) {
		return ours, err
	}
	mounts, err := d.mounter.mounts()
	if err != nil {
		return false, err
	}
	return isOurBind(mounts, vol, target), nil
}

// isDataRoot says whether a bind's root in mountinfo is a volume's data dir. The kernel shows
// "/data//deleted" once the directory was removed under the bind (a wiped state dir).
func isDataRoot(root string) bool {
	return root == "/"+volume.ViewDir || root == "/"+volume.ViewDir+"//deleted"
}

// podDirExists says whether the kubelet still has the pod's directory: it removes it only after
// the pod's volumes are unmounted, so a volume whose pod dir is gone will never be unpublished.
func (d *driver) podDirExists(podUID string) bool {
	return dirExists(filepath.Join(d.kubeletRoot, "pods", podUID))
}

// dirExists says whether p is a directory (not a link to one).
func dirExists(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}
