package volume

// Specification of the Go runtime's memory limit (memorylimit.go): the container's limit less
// what the volumes hold outside the heap, following the budget's charges. Against volumes the
// driver publishes, it is specified in the root's memorylimit_test.go.

import (
	"slices"
	"testing"
)

// The Go runtime gets the container's limit less what the volumes hold outside its heap, never
// less than its own share (the source cache's bound and the driver's margin) beside the volumes'
// heap: volumes holding their whole budget in tmpfs leave it the limit less the budget; volumes
// holding it in their records' lists leave it nearly the whole limit; a budget set larger than
// the limit allows, or volumes over it, leave it its floor and the volumes' heap.
func TestGoMemoryLimitFollowsWhatVolumesHoldOutsideTheHeap(t *testing.T) {
	const limit, floor = 256 << 20, 128 << 20
	for _, c := range []struct {
		name                string
		outside, heap, want int64
	}{
		{"no volumes", 0, 0, 256 << 20},
		{"the budget in tmpfs", 128 << 20, 0, 128 << 20},
		{"the budget in lists", 4 << 20, 124 << 20, 252 << 20},
		{"a budget by hand over the limit, in tmpfs", 300 << 20, 0, 128 << 20},
		{"a budget by hand over the limit, half in lists", 150 << 20, 150 << 20, 278 << 20},
	} {
		if got := goMemoryLimit(limit, floor, c.outside, c.heap); got != c.want {
			t.Errorf("%s: %d MiB, want %d MiB", c.name, got>>20, c.want>>20)
		}
	}

	// The budget tells it every change; it sets the runtime's limit when that moves by a MiB.
	var set []int64
	b := &Budget{Limit: 128 << 20}
	b.FollowedBy(&runtimeMemory{container: limit, floor: floor, apply: func(n int64) int64 { set = append(set, n); return 0 }})
	b.ChargeSaved("v", 40<<20, 30<<20)
	room, _ := b.Reserve(512 << 10)
	room.Release()
	b.ChargeSaved("v", 0, 0)
	if want := []int64{256 << 20, 246 << 20, 256 << 20}; !slices.Equal(set, want) {
		t.Errorf("limits set %v, want %v", set, want)
	}
}
