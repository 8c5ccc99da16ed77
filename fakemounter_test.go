package main

// A mounter for unit tests (the model: csi-driver-nfs's fake mounter): it keeps a mount table of
// its own instead of asking the kernel, so publish and unpublish run without root over plain
// temp dirs. What it keeps is what the driver's own checks read back: a tmpfs is a directory
// whose contents vanish when it is unmounted, a bind shows its source at its target (isBindOf),
// and mounts lists both as /proc/self/mountinfo would (the bind with the tmpfs's device and
// the root /data). It refuses what the kernel would refuse (a mount on a missing directory),
// and each kind of mount can be made to fail.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/shared-resource/csi-driver/internal/mountinfo"
)

type fakeMount struct {
	entry  mountinfo.Entry
	source string // a bind's source dir; "" for a tmpfs
	size   int64  // a tmpfs's size limit
}

type fakeMounter struct {
	mu     sync.Mutex
	table  []fakeMount // in mount order: the last at a path is the topmost
	nextID int
	// failTmpfs, failBind: the next mount of that kind fails with this error.
	failTmpfs, failBind error
	// failUnmount: the next unmount of the path fails with its error.
	failUnmount map[string]error
}

var _ mounter = (*fakeMounter)(nil)

func (f *fakeMounter) mountTmpfs(dir string, sizeBytes int64, options string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failTmpfs; err != nil {
		f.failTmpfs = nil
		return err
	}
	if err := isDir(dir); err != nil {
		return err
	}
	f.nextID++
	f.table = append(f.table, fakeMount{size: sizeBytes, entry: mountinfo.Entry{MajorMinor: fmt.Sprintf("0:%d", f.nextID), Root: "/",
		MountPoint: filepath.Clean(dir), Options: "rw,nosuid,nodev,noexec", FSType: "tmpfs", Source: "tmpfs", SuperOptions: options}})
	return nil
}

func (f *fakeMounter) bindReadOnly(source, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failBind; err != nil {
		f.failBind = nil
		return err
	}
	if err := isDir(source); err != nil {
		return err
	}
	if err := isDir(target); err != nil {
		return err
	}
	// The bind's device is the tmpfs's that holds source, and its root is source's path in it.
	e := mountinfo.Entry{MajorMinor: "0:0", Root: "/", MountPoint: filepath.Clean(target), Options: "ro,nosuid,nodev,noexec", FSType: "none"}
	for _, m := range f.table {
		if m.source == "" && strings.HasPrefix(source, m.entry.MountPoint+"/") {
			e.MajorMinor, e.FSType = m.entry.MajorMinor, "tmpfs"
			e.Root = strings.TrimPrefix(source, m.entry.MountPoint)
		}
	}
	f.table = append(f.table, fakeMount{entry: e, source: filepath.Clean(source)})
	return nil
}

// unmount removes the topmost mount at path; a tmpfs takes its files with it.
func (f *fakeMounter) unmount(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	path = filepath.Clean(path)
	if err := f.failUnmount[path]; err != nil {
		delete(f.failUnmount, path)
		return err
	}
	for i := len(f.table) - 1; i >= 0; i-- {
		m := f.table[i]
		if m.entry.MountPoint != path {
			continue
		}
		f.table = append(f.table[:i], f.table[i+1:]...)
		if m.source == "" {
			entries, err := os.ReadDir(path)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(path, e.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return nil
}

func (f *fakeMounter) isBindOf(source, target string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Stat(source); err != nil {
		return false, err
	}
	top, ok := f.topmost(target)
	return ok && top.source == filepath.Clean(source), nil
}

func (f *fakeMounter) mounts() ([]mountinfo.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]mountinfo.Entry, len(f.table))
	for i, m := range f.table {
		out[i] = m.entry
	}
	return out, nil
}

func (f *fakeMounter) topmost(path string) (fakeMount, bool) {
	path = filepath.Clean(path)
	for i := len(f.table) - 1; i >= 0; i-- {
		if f.table[i].entry.MountPoint == path {
			return f.table[i], true
		}
	}
	return fakeMount{}, false
}

// at returns the topmost mount at path, for a test to look at.
func (f *fakeMounter) at(path string) (fakeMount, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.topmost(path)
}

// count is how many mounts the fake holds.
func (f *fakeMounter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.table)
}

func isDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "mount", Path: p, Err: errors.New("not a directory")}
	}
	return nil
}
