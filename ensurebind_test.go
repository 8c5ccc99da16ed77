package main

// Specification of ensureBind (volume.go): a volume that exists, published again by the kubelet's
// retry or resumed at start, ends bound read-only at its target, once. A missing bind is made; a
// writable bind of the volume (an older driver's) is replaced by a read-only one; a target gone
// is made again, and the record first says the driver made it, so unpublish removes it; a mount
// at the target that is not the volume's is refused, and left.

import (
	"os"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/volume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// boundOnce fails unless the target holds exactly one mount, the volume's read-only bind.
func boundOnce(t *testing.T, d *driver, rec volume.Record) {
	t.Helper()
	m := d.mounter.(*fakeMounter)
	top, ok := m.at(rec.TargetPath)
	if !ok || top.source != d.store.DirOf(rec).ViewPath() || !hasOption(top.entry.Options, "ro") || m.count() != 2 {
		t.Fatalf("the target's mount %+v (%v), %d mounts in all; want the volume's read-only bind, once", top, ok, m.count())
	}
}

func TestEnsureBindKeepsAReadOnlyBindAndMakesAMissingOne(t *testing.T) {
	d, _ := newFakeCluster(t).node()
	publishVolume(t, d, "vol-1")
	rec, _ := d.store.Get("vol-1")
	must(t, d.ensureBind(rec))
	boundOnce(t, d, rec)
	must(t, d.mounter.unmount(rec.TargetPath))
	must(t, d.ensureBind(rec))
	boundOnce(t, d, rec)
}

func TestEnsureBindReplacesAWritableBindOfTheVolume(t *testing.T) {
	d, _ := newFakeCluster(t).node()
	publishVolume(t, d, "vol-1")
	rec, _ := d.store.Get("vol-1")
	m := d.mounter.(*fakeMounter)
	bind, _ := m.at(rec.TargetPath)
	must(t, m.unmount(rec.TargetPath))
	bind.entry.Options = "rw,nosuid,nodev,noexec" // bound, then remounted read-only in the driver's namespace only
	m.table = append(m.table, bind)
	must(t, d.ensureBind(rec))
	boundOnce(t, d, rec)
}

// The kubelet made the target, and it is gone (a wiped pod dir, a crash between unmount and
// publish): the driver makes it, and owns it from then on.
func TestEnsureBindMakesAMissingTargetAndOwnsIt(t *testing.T) {
	d, _ := newFakeCluster(t).node()
	publishVolume(t, d, "vol-1")
	rec, _ := d.store.Get("vol-1")
	must(t, d.mounter.unmount(rec.TargetPath))
	must(t, os.Remove(rec.TargetPath))
	rec.CreatedTarget = false
	must(t, d.store.Save(rec))
	must(t, d.ensureBind(rec))
	boundOnce(t, d, rec)
	if !savedRecord(t, d, "vol-1").CreatedTarget {
		t.Fatal("the record does not say the driver made the target: unpublish would leave it")
	}
}

func TestEnsureBindRefusesAnotherMountAtTheTarget(t *testing.T) {
	d, _ := newFakeCluster(t).node()
	publishVolume(t, d, "vol-1")
	rec, _ := d.store.Get("vol-1")
	m := d.mounter.(*fakeMounter)
	must(t, m.unmount(rec.TargetPath))
	must(t, m.mountTmpfs(rec.TargetPath, 1, ""))
	err := d.ensureBind(rec)
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "already has another mount") {
		t.Fatalf("ensureBind over another mount: %v; want FailedPrecondition naming it", err)
	}
	if top, _ := m.at(rec.TargetPath); top.entry.FSType != "tmpfs" || top.source != "" || m.count() != 2 {
		t.Fatalf("the other mount %+v, %d mounts; want it left as it was, and no bind", top, m.count())
	}
}
