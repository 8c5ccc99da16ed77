package main

// Specification of what a share's list of keys, lengthened after publish, makes the node hold: a
// reconcile reserves the growth of every volume's record, and the volumes stay within the budget,
// as charged and in the heap after a restart (what a record holds in the heap, and the Go
// runtime's memory limit: internal/volume's recordheap_test.go).

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// A share's list of keys edited after its volumes were published, to the longest list a share may
// have, grows every volume's record (and, once the records are decoded again at a restart, the
// heap) by some 300 KiB: the reconcile that would note it reserves the growth, and where it does
// not fit, the volume keeps noting the entries of its old list the new one still has, and the pod
// is told. The node never holds more than its budget, as charged and as the heap measured after a
// restart shows.
func TestAListLengthenedAfterPublishStaysWithinTheBudget(t *testing.T) {
	c := newFakeCluster(t)
	d, events := c.node()
	setShareItems(t, d, entry("ca.crt"))
	publishVolume(t, d, "vol-00")
	perVolume := d.budget.InUse()
	long := []map[string]any{entry("ca.crt")}
	longList := share.Exposure{{Key: "ca.crt", Path: "ca.crt"}}
	for i := 1; i < share.MaxItems; i++ {
		k, p := fmt.Sprintf("%03dk", i)+strings.Repeat("k", 249), fmt.Sprintf("%03dp", i)+strings.Repeat("p", 249)
		long, longList = append(long, entry(k, p)), append(longList, share.ExposedKey{Key: k, Path: p})
	}
	const volumes = 40
	d.budget.Limit = volumes*perVolume + volume.ExposureBytes(longList)*10 // room for the volumes, and for some of the lists' growth
	for i := 1; i < volumes; i++ {
		publishVolume(t, d, fmt.Sprintf("vol-%02d", i))
	}
	reasons(events)
	chargedBefore := d.budget.InUse()
	heapBefore, _ := restartedHeap(t, d, volumes)

	setShareItems(t, d, long...)
	for i := range volumes {
		if err := reconcileVolume(t, d, fmt.Sprintf("vol-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	charged := d.budget.InUse()
	told := reasons(events)
	var noted int
	for i := range volumes {
		if rec := savedRecord(t, d, fmt.Sprintf("vol-%02d", i)); len(rec.Shares[0].Exposed) == share.MaxItems {
			noted++
		} else if !rec.Shares[0].Exposed.Same(share.Exposure{{Key: "ca.crt", Path: "ca.crt"}}) {
			t.Errorf("vol-%02d notes the list %v, want the new one or ca.crt alone", i, rec.Shares[0].Exposed.Names())
		}
	}

	heapAfter, restarted := restartedHeap(t, d, volumes)
	heapGrowth := heapAfter - heapBefore
	t.Logf("%d volumes of %d KiB, the budget %d KiB; after the list grew: %d noting it, charged %d KiB (%+d KiB), %d pods told %s; "+
		"records decoded again: heap %+d KiB (%d KiB before the edit, %d KiB after), charged %d KiB",
		volumes, perVolume>>10, d.budget.Limit>>10, noted, charged>>10, (charged-chargedBefore)>>10, len(told), reasonRefreshFailed,
		heapGrowth>>10, heapBefore>>10, heapAfter>>10, restarted>>10)
	if heapGrowth > charged-chargedBefore {
		t.Errorf("the edit grew the heap of the records decoded again by %d KiB; their charge grew by %d KiB", heapGrowth>>10, (charged-chargedBefore)>>10)
	}
	if restarted > d.budget.Limit {
		t.Errorf("after a restart the volumes are charged %d KiB, over the budget of %d KiB", restarted>>10, d.budget.Limit>>10)
	}
	if charged > d.budget.Limit {
		t.Errorf("after the share's list grew, the volumes are charged %d KiB, over the budget of %d KiB", charged>>10, d.budget.Limit>>10)
	}
	if noted == volumes || !slices.Contains(told, reasonRefreshFailed) {
		t.Errorf("%d of %d volumes note the new list, and the pods were told %v: want the ones that do not fit told %s", noted, volumes, told, reasonRefreshFailed)
	}
}

// restartedHeap reads and decodes the records of d's volumes vol-00... on their own, as
// recoverVolumes does at a restart, and returns the heap they hold and what they are charged.
func restartedHeap(t *testing.T, d *driver, volumes int) (heap, charged int64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	restartedBudget := &volume.Budget{Limit: d.budget.Limit}
	restarted := volume.NewStore(filepath.Dir(d.store.Path()), restartedBudget)
	for i := range volumes {
		rec, err := restarted.ReadRecord(fmt.Sprintf("vol-%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		restarted.Remember(rec)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(restarted)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), restartedBudget.InUse()
}
