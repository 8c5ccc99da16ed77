package volume

// The container's memory limit, and how the driver divides it. The kernel charges the driver's
// memory cgroup both the Go runtime's memory (its heap, stacks, the source cache) and the tmpfs
// pages of every volume the driver writes; the container is OOM-killed when the two together
// reach the limit. So the limit is split: the volume budget (Budget) bounds what volumes hold,
// and the Go runtime is given the rest as its soft memory limit (GOMEMLIMIT): what the volumes do
// not hold outside its heap, as that changes. The collector then runs before the heap grows into
// room the volumes use, rather than letting it reach twice the live heap as it does by default
// (GOGC). Without a container limit the runtime keeps its defaults.

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// DriverMemoryMargin is what the driver keeps for itself out of its memory limit, besides the
// source cache: its heap and stacks at a thousand volumes measured some 40 MiB (BENCHMARKS.md),
// plus room for bursts.
const DriverMemoryMargin = 64 << 20

// DefaultBudget derives the budget from the container's memory limit: the limit, less the
// source cache's bound (--cache-max-bytes) and DriverMemoryMargin. No limit found (none set, or
// not in a container): no budget, and an error says why.
func DefaultBudget(cacheBytes int64) (int64, error) {
	limit, err := cgroupMemoryLimit()
	if err != nil {
		return 0, err
	}
	budget := limit - cacheBytes - DriverMemoryMargin
	if budget <= 0 {
		return 0, fmt.Errorf("the container's memory limit of %d bytes leaves no room for volumes beside the source cache (%d) and the driver (%d): raise it, or set --volume-bytes-budget", limit, cacheBytes, DriverMemoryMargin)
	}
	return budget, nil
}

// runtimeMemory is the Go runtime's soft memory limit, kept at what the container's memory limit
// leaves beside what the volumes hold outside the heap: their tmpfs pages and the kernel's entries
// for them. The budget charges volumes their heap too (their records' lists, as the driver
// charges them), which is the runtime's own memory: a fixed limit of the container's less the
// whole budget would sit below the heap the budget admits when volumes hold mostly lists, and the
// collector would run without end while the heap passed the limit all the same. So the limit
// follows the budget's charges (Budget.FollowedBy).
type runtimeMemory struct {
	container int64 // the container's memory limit
	// floor is what the runtime needs besides the volumes' heap, whatever they hold: the source
	// cache's bound and DriverMemoryMargin. Volumes charged more than the limit leaves (a budget
	// set larger than the limit allows, or a restart over the budget) do not push the runtime's
	// limit below it and their heap.
	floor int64
	set   int64             // the limit set last; 0 before the first
	apply func(int64) int64 // debug.SetMemoryLimit
}

// newRuntimeMemory is what sets the Go runtime's soft memory limit (debug.SetMemoryLimit) as it
// follows a budget (Budget.FollowedBy), in a container whose memory limit is container beside a
// source cache bounded by cacheBytes.
func newRuntimeMemory(container, cacheBytes int64) *runtimeMemory {
	return &runtimeMemory{container: container, floor: cacheBytes + DriverMemoryMargin, apply: debug.SetMemoryLimit}
}

// goMemoryLimit is the Go runtime's share of a container's memory limit when the volumes hold
// outside bytes outside the heap and heap in it: the rest of the container's limit, never less
// than floor and heap.
func goMemoryLimit(container, floor, outside, heap int64) int64 {
	return max(container-outside, floor+heap)
}

// Follow sets the limit for volumes holding outside bytes outside the heap and heap in it, when
// it moves by a MiB or more (debug.SetMemoryLimit is cheap, but this runs on every charge). A
// nil runtimeMemory keeps no limit.
func (m *runtimeMemory) Follow(outside, heap int64) {
	if m == nil {
		return
	}
	n := goMemoryLimit(m.container, m.floor, outside, heap)
	if d := n - m.set; m.set != 0 && d < 1<<20 && d > -1<<20 {
		return
	}
	m.set = n
	m.apply(n)
}

// LimitRuntimeMemory makes the Go runtime's soft memory limit follow the volume budget b
// (runtimeMemory), from before any volume is recovered: the container's memory limit less what
// the volumes hold outside the heap, never below the source cache's bound (cacheBytes),
// DriverMemoryMargin and the volumes' heap. A GOMEMLIMIT in the environment is the admin's
// choice, and wins; without a container limit, the runtime keeps its default.
func LimitRuntimeMemory(b *Budget, cacheBytes int64) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		klog.InfoS("Go runtime memory limit from the environment", "GOMEMLIMIT", v)
		return
	}
	containerLimit, err := cgroupMemoryLimit()
	if err != nil {
		klog.InfoS("No Go runtime memory limit: the container's memory limit is unknown", "reason", err.Error())
		return
	}
	m := newRuntimeMemory(containerLimit, cacheBytes)
	b.FollowedBy(m)
	klog.InfoS("Go runtime memory limit: the container's memory limit less what volumes hold outside the heap, as that changes",
		"bytes", goMemoryLimit(m.container, m.floor, 0, 0), "containerLimit", containerLimit, "floor", m.floor, "volumeBudget", b.Limit)
}

// cgroupMemoryLimit reads the memory limit of the driver's cgroup: cgroup v2's memory.max, or
// v1's memory.limit_in_bytes (where "no limit" is a huge number).
func cgroupMemoryLimit() (int64, error) {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, errors.New("the container has no memory limit")
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		if n >= 1<<60 {
			return 0, errors.New("the container has no memory limit")
		}
		return n, nil
	}
	return 0, errors.New("no memory cgroup found")
}
