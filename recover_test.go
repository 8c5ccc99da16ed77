package main

// Specification of recovery at start (recover.go) on a fake node: a new driver over the state a
// previous one left resumes each whole volume (its record, its budget, its relist, its bind: the
// restart step of driver_test.go's story) and cleans each broken one, and leaves alone what it
// did not make. Then the crash points
// (internal/crashpoint): for a crash just after each step of publish, unpublish and reconcile, the
// state that step leaves is made on the node, a new driver recovers, and the kubelet's retry (or
// the next relist) ends with the node as if nothing had crashed. The production build has no
// crash point (internal/crashpoint/off.go), so these tests make each step's state from a whole operation,
// undoing the steps that come after it; the same story, with the driver SIGKILLed at each crash
// point of its test build: test/e2e/api/crash_test.go.

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// crashStates says, for each step of an operation, what the test does to a node to make the state
// the operation leaves when the driver dies just after that step.
type crashStates map[crashpoint.Step]func(t *testing.T, d *driver, target string)

// forEachStep runs run for each step of an operation, as a subtest; a step that states does not
// say how to make fails the test, so a crash point added to internal/crashpoint gets its unit test.
func forEachStep(t *testing.T, steps []crashpoint.Step, states crashStates, run func(t *testing.T, step crashpoint.Step)) {
	for _, step := range steps {
		if states[step] == nil {
			t.Fatalf("crash step %s has no unit specification: say here what state it leaves", step)
		}
		t.Run(string(step), func(t *testing.T) { run(t, step) })
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// publishUndo undoes one step of a whole publish (createVolume's numbering), last first.
var publishUndo = crashStates{
	crashpoint.PublishBind:   func(t *testing.T, d *driver, target string) { must(t, d.mounter.unmount(target)) },
	crashpoint.PublishTarget: func(t *testing.T, _ *driver, target string) { must(t, os.Remove(target)) },
	crashpoint.PublishRecord: func(t *testing.T, d *driver, _ string) { must(t, os.Remove(d.store.RecordPath("vol-1"))) },
	crashpoint.PublishData: func(t *testing.T, d *driver, _ string) {
		must(t, os.RemoveAll(filepath.Join(d.store.MountPoint("vol-1"), volume.CopiesDir)))
		must(t, os.RemoveAll(filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir)))
	},
	crashpoint.PublishTmpfs: func(t *testing.T, d *driver, _ string) { must(t, d.mounter.unmount(d.store.MountPoint("vol-1"))) },
	crashpoint.PublishDir:   func(t *testing.T, d *driver, _ string) { must(t, os.Remove(d.store.MountPoint("vol-1"))) },
}

// A crash during a publish, then the kubelet's retry: recovery cleans a volume not yet whole
// (up to the record; and the record without its target, which nobody could unpublish) and
// resumes one whose target exists, re-binding it; the retry then publishes it whole, and the
// unpublish leaves nothing.
func TestRecoverFromACrashAfterEachPublishStep(t *testing.T) {
	resumed := map[crashpoint.Step]bool{crashpoint.PublishTarget: true, crashpoint.PublishBind: true}
	steps := crashpoint.PublishSteps()
	forEachStep(t, steps, publishUndo, func(t *testing.T, at crashpoint.Step) {
		c := newFakeCluster(t)
		d, _ := c.node()
		req := publishVolume(t, d, "vol-1")
		for i := len(steps) - 1; steps[i] != at; i-- {
			publishUndo[steps[i]](t, d, req.TargetPath)
		}
		d, _ = c.restart(d)
		m := d.mounter.(*fakeMounter)
		if _, ok := d.store.Get("vol-1"); ok != resumed[at] || (m.count() == 2) != resumed[at] || exists(d.store.MountPoint("vol-1")) != resumed[at] {
			t.Fatalf("after recovery: resumed %v, %d mounts, volume dir there %v; want resumed %v (bound) or all cleaned",
				ok, m.count(), exists(d.store.MountPoint("vol-1")), resumed[at])
		}
		ns := &nodeServer{d: d}
		if _, err := ns.NodePublishVolume(context.Background(), req); err != nil || !sees(podView(t, d, "vol-1"), "ca.crt", "CA") || m.count() != 2 {
			t.Fatalf("the kubelet's retry: %v; the pod sees %v, %d mounts", err, podView(t, d, "vol-1"), m.count())
		}
		if _, err := ns.NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
			t.Fatal(err)
		}
		nothingLeft(t, d, "after the unpublish")
	})
}

// unpublishDo does one step of an unpublish (teardown's order).
var unpublishDo = crashStates{
	crashpoint.UnpublishBind:   func(t *testing.T, d *driver, target string) { must(t, d.mounter.unmount(target)) },
	crashpoint.UnpublishTarget: func(t *testing.T, _ *driver, target string) { must(t, os.Remove(target)) },
	crashpoint.UnpublishTmpfs:  func(t *testing.T, d *driver, _ string) { must(t, d.mounter.unmount(d.store.MountPoint("vol-1"))) },
	crashpoint.UnpublishDir:    func(t *testing.T, d *driver, _ string) { must(t, os.Remove(d.store.MountPoint("vol-1"))) },
}

// A crash during an unpublish, then the kubelet's retry: whatever step was reached, the retry
// succeeds and leaves nothing. (Crashed just after the bind went, the volume is resumed and bound
// again: its target and pod are still there; the retry takes it.)
func TestRecoverFromACrashAfterEachUnpublishStep(t *testing.T) {
	steps := crashpoint.UnpublishSteps()
	forEachStep(t, steps, unpublishDo, func(t *testing.T, at crashpoint.Step) {
		c := newFakeCluster(t)
		d, _ := c.node()
		req := publishVolume(t, d, "vol-1")
		for _, step := range steps {
			unpublishDo[step](t, d, req.TargetPath)
			if step == at {
				break
			}
		}
		d, _ = c.restart(d)
		if _, err := (&nodeServer{d: d}).NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
			t.Fatalf("the kubelet's retry: %v", err)
		}
		nothingLeft(t, d, "after the retry")
		if exists(req.TargetPath) {
			t.Fatal("the target the driver made is still there")
		}
	})
}

// A crash during a reconcile that revokes, or refreshes, a volume. A reconcile writes the new
// copies, swaps the view, then saves the record (applyVerdicts): each crash state is the whole
// reconcile with what came after the step put back as it was. Recovery never changes what the
// pod sees (it does not rebuild the view from a record that may be older than it); the next
// relist brings the volume to its verdict, and the record and the budget say so.
func TestRecoverFromACrashAfterEachReconcileStep(t *testing.T) {
	for _, change := range []string{"revoke", "refresh"} {
		t.Run(change, func(t *testing.T) {
			var old struct {
				record []byte
				copied map[string]atomicwriter.File
				view   map[string]atomicwriter.File
			}
			undo := crashStates{
				crashpoint.ReconcileRecord: func(t *testing.T, d *driver, _ string) {
					must(t, os.WriteFile(d.store.RecordPath("vol-1"), old.record, 0o600))
				},
				crashpoint.ReconcileData: func(t *testing.T, d *driver, _ string) {
					must(t, atomicwriter.Writer{Dir: filepath.Join(d.store.MountPoint("vol-1"), volume.ViewDir), GID: -1}.Write(old.view))
				},
				crashpoint.ReconcileCopies: func(t *testing.T, d *driver, _ string) {
					must(t, d.store.DirOf(volume.Record{VolumeID: "vol-1", GID: -1}).WriteCopy(0, old.copied))
				},
			}
			steps := crashpoint.ReconcileSteps()
			forEachStep(t, steps, undo, func(t *testing.T, at crashpoint.Step) {
				c := newFakeCluster(t)
				d, _ := c.node()
				publishVolume(t, d, "vol-1")
				vol := d.store.DirOf(volume.Record{VolumeID: "vol-1", GID: -1})
				old.record, _ = os.ReadFile(d.store.RecordPath("vol-1"))
				old.copied, _ = atomicwriter.ReadFiles(vol.CopyPath(0))
				old.view, _ = atomicwriter.ReadFiles(vol.ViewPath())
				want := []string{"ca.crt", "CA2"} // what the pod sees once the change is done
				if change == "revoke" {
					c.allowed, want = false, nil
				} else {
					c.setSource(map[string]string{"ca.crt": "CA2"})
				}
				must(t, reconcileVolume(t, d, "vol-1"))
				if change == "revoke" { // a revoke writes no copy, and drops it only after the last step
					undo[crashpoint.ReconcileCopies](t, d, "")
				}
				for i := len(steps) - 1; steps[i] != at; i-- {
					undo[steps[i]](t, d, "")
				}
				atCrash := podView(t, d, "vol-1")

				d, _ = c.restart(d)
				if got := podView(t, d, "vol-1"); !reflect.DeepEqual(got, atCrash) {
					t.Fatalf("recovery changed the pod's view from %v to %v", atCrash, got)
				}
				d.relistCycle(context.Background(), 0)
				rec := savedRecord(t, d, "vol-1")
				if !sees(podView(t, d, "vol-1"), want...) || rec.Shares[0].Told.Hidden() != (change == "revoke") ||
					change == "refresh" && rec.Shares[0].ResourceVersion != "2" {
					t.Fatalf("after the next relist the pod sees %v, record %+v; want %q", podView(t, d, "vol-1"), rec.Shares[0], want)
				}
				if d.budget.InUse() != volume.RecordedBytes(rec) {
					t.Fatalf("%d bytes charged, the saved record says %d", d.budget.InUse(), volume.RecordedBytes(rec))
				}
			})
		})
	}
}

// What is not whole is cleaned; an entry that is no volume id is not the driver's, and stays.
func TestRecoverCleansWhatIsNotWhole(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breaks func(t *testing.T, d *driver)
	}{
		{"its record is corrupt", func(t *testing.T, d *driver) { must(t, os.WriteFile(d.store.RecordPath("vol-1"), []byte("{"), 0o600)) }},
		{"its record names a target outside the pods dir", func(t *testing.T, d *driver) {
			rec, _ := d.store.Get("vol-1")
			rec.TargetPath = "/etc"
			b, err := volume.EncodeRecord(rec)
			if err == nil {
				err = d.store.DirOf(rec).WriteRecord(b)
			}
			must(t, err)
		}},
		{"its pod is gone", func(t *testing.T, d *driver) {
			rec, _ := d.store.Get("vol-1")
			must(t, d.mounter.unmount(rec.TargetPath))
			must(t, os.RemoveAll(filepath.Join(d.kubeletRoot, "pods", testPodUID)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			d, _ := c.node()
			publishVolume(t, d, "vol-1")
			foreign := filepath.Join(d.store.Path(), "not a volume id")
			must(t, os.Mkdir(foreign, 0o700))
			tc.breaks(t, d)
			d, _ = c.restart(d)
			if !exists(foreign) {
				t.Fatal("recovery removed a directory the driver did not make")
			}
			must(t, os.Remove(foreign))
			nothingLeft(t, d, "after recovery")
		})
	}
}
