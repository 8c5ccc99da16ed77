package main

// The container's memory limit, and how the driver divides it. The kernel charges the driver's
// memory cgroup both the Go runtime's memory (its heap, stacks, the source cache) and the tmpfs
// pages of every volume the driver writes; the container is OOM-killed when the two together
// reach the limit. So the limit is split: the volume budget (budget.go) bounds what volumes hold,
// and the Go runtime is given the rest as its soft memory limit (GOMEMLIMIT), so that the
// collector runs before the heap grows into room the volumes may be using, rather than letting
// it reach twice the live heap as it does by default (GOGC). Without a container limit, or
// without a budget, nothing is divided and the runtime keeps its defaults.

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// driverMemoryMargin is what the driver keeps for itself out of its memory limit, besides the
// source cache: its heap and stacks at a thousand volumes measured some 40 MiB (BENCHMARKS.md),
// plus room for bursts.
const driverMemoryMargin = 64 << 20

// defaultVolumeBudget derives the budget from the container's memory limit: the limit, less the
// source cache's bound (--cache-max-bytes) and driverMemoryMargin. No limit found (none set, or
// not in a container): no budget, and an error says why.
func defaultVolumeBudget(cacheBytes int64) (int64, error) {
	limit, err := cgroupMemoryLimit()
	if err != nil {
		return 0, err
	}
	budget := limit - cacheBytes - driverMemoryMargin
	if budget <= 0 {
		return 0, fmt.Errorf("the container's memory limit of %d bytes leaves no room for volumes beside the source cache (%d) and the driver (%d): raise it, or set --volume-bytes-budget", limit, cacheBytes, driverMemoryMargin)
	}
	return budget, nil
}

// runtimeMemoryLimit is the Go runtime's share of a container's memory limit beside a volume
// budget: the limit less the budget. The budget counts the volumes' heap too (their records'
// lists: recordHeapBytes), so this is the runtime's least share, the one left when the volumes
// hold their whole budget in tmpfs pages. False: no share to set (no limit, no budget, or a
// budget that leaves the runtime nothing; the runtime keeps its default).
func runtimeMemoryLimit(containerLimit, budget int64) (int64, bool) {
	if containerLimit <= 0 || budget <= 0 || budget >= containerLimit {
		return 0, false
	}
	return containerLimit - budget, true
}

// limitRuntimeMemory sets the Go runtime's soft memory limit to its share of the container's
// memory limit beside the volume budget (runtimeMemoryLimit), before any volume is recovered.
// A GOMEMLIMIT in the environment is the admin's choice, and wins.
func limitRuntimeMemory(budget int64) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		klog.InfoS("Go runtime memory limit from the environment", "GOMEMLIMIT", v)
		return
	}
	containerLimit, err := cgroupMemoryLimit()
	if err != nil {
		klog.InfoS("No Go runtime memory limit: the container's memory limit is unknown", "reason", err.Error())
		return
	}
	n, ok := runtimeMemoryLimit(containerLimit, budget)
	if !ok {
		klog.InfoS("No Go runtime memory limit: the volume budget leaves no share of the container's memory limit to divide",
			"containerLimit", containerLimit, "volumeBudget", budget)
		return
	}
	debug.SetMemoryLimit(n)
	klog.InfoS("Go runtime memory limit: the container's memory limit less the volume budget",
		"bytes", n, "containerLimit", containerLimit, "volumeBudget", budget)
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
