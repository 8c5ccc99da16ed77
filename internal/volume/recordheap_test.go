package volume

// Specification of how the container's memory limit is divided (memorylimit.go) and of what a
// volume's record holds in the heap (HeapBytes): with volumes published up to the budget, each
// listing the longest keys its shares expose, and the driver restarted (every record decoded on
// its own), what the volumes hold in tmpfs pages and what their records hold in the heap stay
// within the budget, and the Go runtime's memory limit, which follows what the volumes hold
// outside the heap, leaves the runtime its own share beside the volumes' heap.

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
)

// A volume of nine shares each exposing 256 keys of 253 bytes under paths of 253 bytes (the
// longest lists a share may have), one small file each. A record of it is some 1.2 MiB, and so
// is its decoded copy in the heap: the heap measured after a restart must be within what the
// volumes are charged for it, and below the Go runtime's memory limit by the runtime's own share.
func TestRecordListsAfterARestartAreWithinTheBudget(t *testing.T) {
	const budget = 128 << 20 // the default: a 256 MiB limit less the default cache bound and margin
	const sharesPerVolume = 9
	list := make(share.Exposure, share.MaxItems)
	for i := range list {
		list[i] = share.ExposedKey{Key: fmt.Sprintf("%03dk", i) + strings.Repeat("k", 249), Path: fmt.Sprintf("%03dp", i) + strings.Repeat("p", 249)}
	}
	record := func(id string) Record {
		rec := Record{VolumeID: id, PodUID: "uid", TargetPath: "/target/" + id}
		for j := range sharesPerVolume {
			rec.Shares = append(rec.Shares, ShareState{Ref: share.Ref{Kind: share.KindSecret, Name: fmt.Sprintf("share-%d", j)},
				ResourceVersion: "1", Bytes: chargedBytesOfOneSmallFile(), Entries: 1, Exposed: list})
		}
		return rec
	}

	// Published up to the budget, as createVolume admits them: room reserved, then saved.
	stateDir := t.TempDir()
	publishedBudget := &Budget{Limit: budget}
	published := NewStore(stateDir, publishedBudget)
	var ids []string
	for i := 0; ; i++ {
		rec := record(fmt.Sprintf("vol-%03d", i))
		room, err := publishedBudget.Reserve(RecordedBytes(rec))
		if err != nil {
			room.Release()
			break
		}
		if err := os.MkdirAll(published.MountPoint(rec.VolumeID), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := published.Save(rec); err != nil {
			t.Fatal(err)
		}
		room.Release()
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
	limit := int64(budget + DriverMemoryMargin + 64<<20) // the container's limit with the default cache bound
	restartedBudget := &Budget{Limit: budget}
	restarted := NewStore(stateDir, restartedBudget)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	restartedBudget.FollowedBy(newRuntimeMemory(limit, 64<<20))
	for _, id := range ids {
		rec, err := restarted.ReadRecord(id)
		if err != nil {
			t.Fatal(err)
		}
		restarted.Remember(rec)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	goLimit := debug.SetMemoryLimit(-1) // as the volumes' charges set it

	charged := restartedBudget.InUse()
	var heapCharged int64
	for _, rec := range restarted.List() {
		heapCharged += HeapBytes(rec)
	}
	runtime.KeepAlive(restarted)
	held := charged - heapCharged + heap // tmpfs pages and entries as charged, and the heap as measured
	t.Logf("%d volumes of %d shares listing %d keys of 253 bytes: charged %d KiB (%d KiB of it for the heap); heap after a restart +%d KiB (%d KiB per volume); "+
		"tmpfs and heap %d KiB of the budget's %d KiB; Go runtime limit %d MiB of the container's %d MiB, the whole live heap %d MiB",
		len(ids), sharesPerVolume, share.MaxItems, charged>>10, heapCharged>>10, heap>>10, heap/int64(len(ids))>>10, held>>10, budget>>10, goLimit>>20, limit>>20, after.HeapAlloc>>20)
	if heap > heapCharged {
		t.Errorf("after a restart the records hold %d KiB of heap; their volumes are charged %d KiB for it", heap>>10, heapCharged>>10)
	}
	if held > budget {
		t.Errorf("the volumes hold %d KiB (tmpfs as charged, heap as measured), over the budget of %d KiB: beside the Go runtime's %d MiB, over the container's limit",
			held>>10, budget>>10, goLimit>>20)
	}
	// The runtime's limit leaves it, beside the volumes' heap, what the budget does not take of
	// the container's limit (the source cache's bound and the driver's margin); and what it holds
	// with the volumes' tmpfs stays within the container's limit.
	if own := limit - budget; goLimit-heap < own {
		t.Errorf("the Go runtime's limit of %d MiB leaves %d MiB beside the volumes' heap of %d MiB, under its own share of %d MiB: the collector would run without end",
			goLimit>>20, (goLimit-heap)>>20, heap>>20, own>>20)
	}
	if int64(after.HeapAlloc) >= goLimit {
		t.Errorf("the live heap of %d MiB is over the Go runtime's limit of %d MiB", after.HeapAlloc>>20, goLimit>>20)
	}
	if goLimit+(charged-heapCharged) > limit {
		t.Errorf("the Go runtime's limit of %d MiB and the volumes' %d MiB outside the heap are over the container's %d MiB",
			goLimit>>20, (charged-heapCharged)>>20, limit>>20)
	}
}

// chargedBytesOfOneSmallFile is what a share's copy of one file of a few bytes is charged.
func chargedBytesOfOneSmallFile() int64 {
	return ChargedBytes(map[string]atomicwriter.File{"ca.crt": {Data: []byte("CA")}})
}
