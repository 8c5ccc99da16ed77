package main

// Specification of taking a volume off the node (unpublish.go, volume.go) on a fake node, step by step:
//   - teardown removes the volume's own binds at the target (all of them), the target dir if the
//     driver made it, the tmpfs with the record, the volume dir, and frees its budget; it never
//     unmounts a mount it did not make;
//   - an unpublish that fails at a step answers Internal and keeps the volume in the store, so
//     the kubelet's retry finishes the job from where it stopped;
//   - cleanOrphan, for a volume dir with no usable record, unmounts the binds of its tmpfs at pod
//     volume paths and the tmpfs, and removes only empty directories.
// The whole publish and unpublish, and the kubelet's own target: publish_test.go.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shared-resource/csi-driver/internal/volume"
)

// nothingLeft fails unless the node holds no mount, no volume dir, no record and no charge.
func nothingLeft(t *testing.T, d *driver, step string) {
	t.Helper()
	m := d.mounter.(*fakeMounter)
	ids, _ := d.store.VolumeIDsOnDisk()
	if m.count() != 0 || len(ids) != 0 || d.store.Count() != 0 || d.budget.InUse() != 0 {
		t.Fatalf("%s: %d mounts, volume dirs %v, %d records, %d bytes charged; want nothing", step, m.count(), ids, d.store.Count(), d.budget.InUse())
	}
}

func TestUnpublishThatFailsAtAStepIsFinishedByTheRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(d *driver, target string) string // the path whose unmount fails
	}{
		{"the bind's unmount fails", func(_ *driver, target string) string { return target }},
		{"the tmpfs's unmount fails", func(d *driver, _ string) string { return d.store.MountPoint("vol-1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			d, _ := c.node()
			req := publishVolume(t, d, "vol-1")
			m := d.mounter.(*fakeMounter)
			m.failUnmount = map[string]error{tc.at(d, req.TargetPath): errors.New("device or resource busy")}
			ns := &nodeServer{d: d}
			if _, err := ns.NodeUnpublishVolume(context.Background(), unpublishRequest(req)); status.Code(err) != codes.Internal {
				t.Fatalf("unpublish: %v, want Internal", err)
			}
			if _, ok := d.store.Get("vol-1"); !ok || !exists(d.store.RecordPath("vol-1")) {
				t.Fatal("the failed unpublish forgot the volume: the kubelet's retry would find nothing to finish")
			}
			if _, err := ns.NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
				t.Fatalf("the retry: %v", err)
			}
			nothingLeft(t, d, "after the retry")
			if exists(req.TargetPath) {
				t.Fatal("the target the driver made is still there")
			}
		})
	}
}

// Binds of the volume stacked at the target (a retried bind, a crash between two) all go.
func TestTeardownUnmountsEveryBindOfItsOwn(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	req := publishVolume(t, d, "vol-1")
	rec, _ := d.store.Get("vol-1")
	if err := d.mounter.bindReadOnly(d.store.DirOf(rec).ViewPath(), req.TargetPath); err != nil {
		t.Fatal(err)
	}
	if err := d.teardown(rec); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, d, "teardown of a volume bound twice")
}

// A mount at the target that is not the volume's (an admin's, another driver's) stays, with the
// kubelet's target dir; the volume's own tmpfs and dir go.
func TestTeardownLeavesAMountItDidNotMake(t *testing.T) {
	c := newFakeCluster(t)
	d, _ := c.node()
	req := publishRequest(t, d, "vol-1")
	if err := os.Mkdir(req.TargetPath, 0o750); err != nil { // the kubelet's
		t.Fatal(err)
	}
	if _, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	m := d.mounter.(*fakeMounter)
	if err := m.unmount(req.TargetPath); err != nil || m.mountTmpfs(req.TargetPath, 1, "") != nil {
		t.Fatal(err)
	}
	if _, err := (&nodeServer{d: d}).NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
		t.Fatal(err)
	}
	if top, ok := m.at(req.TargetPath); !ok || top.entry.FSType != "tmpfs" || m.count() != 1 || !exists(req.TargetPath) {
		t.Fatalf("the foreign mount at the target: %+v, %v (%d mounts); want it left, alone", top, ok, m.count())
	}
	if exists(d.store.MountPoint("vol-1")) || d.store.Count() != 0 {
		t.Fatal("the volume's own dir or record is still there")
	}
}

// orphanWorld is a volume dir vol-x with a tmpfs and no record, as a crash before the record was
// saved leaves it, bound at a pod's volume path.
func orphanWorld(t *testing.T) (d *driver, m *fakeMounter, volDir, podTarget string) {
	t.Helper()
	d, _ = newFakeCluster(t).node()
	m = d.mounter.(*fakeMounter)
	volDir = d.store.MountPoint("vol-x")
	podTarget = filepath.Join(d.kubeletRoot, "pods", testPodUID, "volumes", "kubernetes.io~csi", "x", "mount")
	for _, dir := range []string{volDir, podTarget} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.mountTmpfs(volDir, 1<<20, ""); err != nil || os.Mkdir(filepath.Join(volDir, volume.ViewDir), 0o700) != nil {
		t.Fatal(err)
	}
	if err := m.bindReadOnly(filepath.Join(volDir, volume.ViewDir), podTarget); err != nil {
		t.Fatal(err)
	}
	return d, m, volDir, podTarget
}

func TestCleanOrphanUnmountsItsBindsAndTmpfsAndRemovesItsDirs(t *testing.T) {
	d, m, volDir, podTarget := orphanWorld(t)
	d.cleanOrphan(volDir)
	if m.count() != 0 || exists(volDir) || exists(podTarget) {
		t.Fatalf("%d mounts, volume dir there %v, pod's target there %v; want none", m.count(), exists(volDir), exists(podTarget))
	}
}

// Only binds at pod volume paths are the driver's: a bind of the same tmpfs elsewhere is not
// unmounted, and a directory that is not empty is not removed.
func TestCleanOrphanLeavesWhatIsNotItsOwn(t *testing.T) {
	d, m, volDir, podTarget := orphanWorld(t)
	elsewhere := filepath.Join(d.kubeletRoot, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o700); err != nil || m.bindReadOnly(filepath.Join(volDir, volume.ViewDir), elsewhere) != nil {
		t.Fatal(err)
	}
	d.cleanOrphan(volDir)
	if _, ok := m.at(elsewhere); !ok || m.count() != 1 || exists(podTarget) {
		t.Fatalf("the bind outside the pods dir: left %v; %d mounts; pod target there %v", ok, m.count(), exists(podTarget))
	}

	// A volume dir with no tmpfs that holds a file: not made by the driver's publish; left.
	other := d.store.MountPoint("vol-y")
	if err := os.MkdirAll(other, 0o700); err != nil || os.WriteFile(filepath.Join(other, "keep"), nil, 0o600) != nil {
		t.Fatal(err)
	}
	d.cleanOrphan(other)
	if !exists(filepath.Join(other, "keep")) {
		t.Fatal("cleanOrphan deleted a file it did not make")
	}
}
