package main

// What the driver promises, told as one story, step by step, the way the kubelet, an admin and a
// restart drive it: on a fake node (a temp dir and the fake mounter, unitdriver_test.go) against
// a fake API server (fakecluster_test.go) with the SharedSecret "share" over Secret p/src. It
// runs in well under a second, without root or a cluster. Each step is one promise; the file
// named beside it specifies the promise in detail, and the same story against a real kernel,
// API server and kubelet is test/e2e/api/driver_test.go's and test/e2e/pods/pods_test.go's.

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/shared-resource/csi-driver/internal/volume"
)

func TestTheDriversStory(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	ctx := context.Background()
	const id = "vol-1"
	req := publishRequest(t, d, id)
	step := func(promise string, check func(t *testing.T)) {
		if !t.Run(promise, check) {
			t.FailNow() // each step starts where the last one left the node
		}
	}
	seesOnly := func(t *testing.T, pairs ...string) {
		t.Helper()
		if got := podView(t, d, id); !sees(got, pairs...) {
			t.Fatalf("the pod sees %v, want %q", got, pairs)
		}
	}

	step("publish: the pod sees the share's files at its target, read-only", func(t *testing.T) { // publish_test.go
		if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, req); err != nil {
			t.Fatal(err)
		}
		seesOnly(t, "ca.crt", "CA")
		bind, ok := d.mounter.(*fakeMounter).at(req.TargetPath)
		if !ok || bind.source != filepath.Join(d.store.MountPoint(id), volume.ViewDir) || !hasOption(bind.entry.Options, "ro") {
			t.Fatalf("the target's mount: %+v; want a read-only bind of the volume's view", bind)
		}
	})

	step("relist, nothing changed: the volume is left alone, and nobody is told", func(t *testing.T) { // reconcile_test.go
		d.relistCycle(ctx, 0)
		seesOnly(t, "ca.crt", "CA")
		expectEvents(t, events, "nothing changed")
	})

	step("refresh: a new version of the source reaches the pod, which is told", func(t *testing.T) { // reconcile_test.go
		c.setSource(map[string]string{"ca.crt": "CA2"})
		d.relistCycle(ctx, 0)
		seesOnly(t, "ca.crt", "CA2")
		expectEvents(t, events, "refreshed", reasonRefreshed)
	})

	step("an outage never revokes: a pod whose review cannot be made keeps its files", func(t *testing.T) { // reconcile_test.go
		c.allowed, c.reviewErr = false, errOutage
		d.relistCycle(ctx, 0)
		seesOnly(t, "ca.crt", "CA2")
		expectEvents(t, events, "outage")
		c.reviewErr = nil
	})

	step("revoke: a pod that may no longer use the share loses its files, and is told once", func(t *testing.T) { // judge_test.go
		d.relistCycle(ctx, 0)
		d.relistCycle(ctx, 0)
		seesOnly(t)
		expectEvents(t, events, "revoked", reasonRevoked)
	})

	step("restore: access back, the files are back as the source is now", func(t *testing.T) { // reconcile_test.go
		c.setSource(map[string]string{"ca.crt": "CA3"})
		c.allowed = true
		d.relistCycle(ctx, 0)
		seesOnly(t, "ca.crt", "CA3")
		expectEvents(t, events, "restored", reasonRestored)
	})

	step("restart: a new driver over the same node resumes the volume, and its relist", func(t *testing.T) { // recover_test.go
		charged := d.budget.InUse()
		d, events = c.restart(d)
		rec, ok := d.store.Get(id)
		if !ok || rec.TargetPath != req.TargetPath || d.budget.InUse() != charged || d.mounter.(*fakeMounter).count() != 2 {
			t.Fatalf("resumed %v at %q, %d bytes charged (%d before the restart), %d mounts; want the volume as it was, bound",
				ok, rec.TargetPath, d.budget.InUse(), charged, d.mounter.(*fakeMounter).count())
		}
		seesOnly(t, "ca.crt", "CA3")
		if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, req); err != nil || d.mounter.(*fakeMounter).count() != 2 {
			t.Fatalf("the kubelet's publish after the restart: %v; want success, the same two mounts", err)
		}
		c.setSource(map[string]string{"ca.crt": "CA4"})
		d.relistCycle(ctx, 0)
		seesOnly(t, "ca.crt", "CA4")
		expectEvents(t, events, "refreshed after the restart", reasonRefreshed)
	})

	step("unpublish: everything the driver made is gone, and its budget freed", func(t *testing.T) { // unpublish_test.go
		if _, err := (&nodeServer{d: d}).NodeUnpublishVolume(ctx, unpublishRequest(req)); err != nil {
			t.Fatal(err)
		}
		nothingLeft(t, d, "after the unpublish")
		if exists(req.TargetPath) || !exists(filepath.Dir(req.TargetPath)) {
			t.Fatal("want the target the driver made gone, and the kubelet's dir above it left")
		}
	})
}
