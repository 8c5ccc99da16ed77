package main

// Specification of how the container's memory limit is divided (memorylimit.go) and of what a
// volume's record holds in the heap (budget.go's recordHeapBytes): with volumes published up to
// the budget, each listing the longest keys its shares expose, and the driver restarted (every
// record decoded on its own), what the volumes hold in tmpfs pages and what their records hold in
// the heap stay within the budget, so that the Go runtime's share of the limit (the limit less the
// budget) is the driver's own.

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// The review's volume: nine shares each exposing 256 keys of 253 bytes under paths of 253
// bytes, one small file each. A record of it is some 1.2 MiB, and so is its decoded copy in the
// heap: the heap measured after a restart must be within what the volumes are charged for it.
func TestRecordListsAfterARestartAreWithinTheBudget(t *testing.T) {
	const budget = 128 << 20 // the default: a 256 MiB limit less the default cache bound and margin
	const sharesPerVolume = 9
	list := make(exposure, maxSharedItems)
	for i := range list {
		list[i] = exposedKey{Key: fmt.Sprintf("%03dk", i) + strings.Repeat("k", 249), Path: fmt.Sprintf("%03dp", i) + strings.Repeat("p", 249)}
	}
	record := func(id string) volumeRecord {
		rec := volumeRecord{VolumeID: id, PodUID: "uid", TargetPath: "/target/" + id}
		for j := range sharesPerVolume {
			rec.Shares = append(rec.Shares, shareState{shareRef: shareRef{Kind: kindSecret, Name: fmt.Sprintf("share-%d", j)},
				ResourceVersion: "1", Bytes: chargedBytesOfOneSmallFile(), Entries: 1, Exposed: list})
		}
		return rec
	}

	// Published up to the budget, as createVolume admits them: room reserved, then saved.
	stateDir := t.TempDir()
	published := newVolumeStore(stateDir, &volumeBudget{limit: budget})
	var ids []string
	for i := 0; ; i++ {
		rec := record(fmt.Sprintf("vol-%03d", i))
		room, err := published.budget.reserve(volumeBytes(rec))
		if err != nil {
			room.release()
			break
		}
		if err := os.MkdirAll(published.mountPoint(rec.VolumeID), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := published.save(rec); err != nil {
			t.Fatal(err)
		}
		room.release()
		ids = append(ids, rec.VolumeID)
	}
	if len(ids) < 2 {
		t.Fatalf("only %d volumes fit the budget of %d MiB: the test shows nothing", len(ids), budget>>20)
	}
	published = nil

	// Restarted: every record read and decoded on its own, as recoverVolumes does.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	restarted := newVolumeStore(stateDir, &volumeBudget{limit: budget})
	for _, id := range ids {
		rec, err := restarted.readRecord(id)
		if err != nil {
			t.Fatal(err)
		}
		restarted.remember(rec)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)

	charged := restarted.budget.inUse()
	var heapCharged int64
	for _, rec := range restarted.list() {
		heapCharged += recordHeapBytes(rec)
	}
	runtime.KeepAlive(restarted)
	held := charged - heapCharged + heap                 // tmpfs pages and entries as charged, and the heap as measured
	limit := int64(budget + driverMemoryMargin + 64<<20) // the container's limit with the default cache bound
	goLimit, _ := runtimeMemoryLimit(limit, budget)
	t.Logf("%d volumes of %d shares listing %d keys of 253 bytes: charged %d KiB (%d KiB of it for the heap); heap after a restart +%d KiB (%d KiB per volume); "+
		"tmpfs and heap %d KiB of the budget's %d KiB; Go runtime limit %d MiB of the container's %d MiB",
		len(ids), sharesPerVolume, maxSharedItems, charged>>10, heapCharged>>10, heap>>10, heap/int64(len(ids))>>10, held>>10, budget>>10, goLimit>>20, limit>>20)
	if heap > heapCharged {
		t.Errorf("after a restart the records hold %d KiB of heap; their volumes are charged %d KiB for it", heap>>10, heapCharged>>10)
	}
	if held > budget {
		t.Errorf("the volumes hold %d KiB (tmpfs as charged, heap as measured), over the budget of %d KiB: beside the Go runtime's %d MiB, over the container's limit",
			held>>10, budget>>10, goLimit>>20)
	}
}

// chargedBytesOfOneSmallFile is what a share's copy of one file of a few bytes is charged.
func chargedBytesOfOneSmallFile() int64 {
	return chargedBytes(map[string]atomicwriter.File{"ca.crt": {Data: []byte("CA")}})
}

// The Go runtime gets the container's limit less the volume budget; nothing without a limit, a
// budget, or a share left to it.
func TestRuntimeMemoryLimitIsTheContainersLessTheBudget(t *testing.T) {
	for _, c := range []struct {
		limit, budget, want int64
		ok                  bool
	}{
		{256 << 20, 128 << 20, 128 << 20, true},
		{512 << 20, 100 << 20, 412 << 20, true},
		{0, 128 << 20, 0, false},
		{256 << 20, 0, 0, false},
		{256 << 20, 256 << 20, 0, false},
		{256 << 20, 300 << 20, 0, false},
	} {
		got, ok := runtimeMemoryLimit(c.limit, c.budget)
		if got != c.want || ok != c.ok {
			t.Errorf("runtimeMemoryLimit(%d, %d) = %d, %v; want %d, %v", c.limit, c.budget, got, ok, c.want, c.ok)
		}
	}
}
