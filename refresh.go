package main

// The relist: when volumes are checked again, and how fast the driver asks. Each cycle reconciles
// every volume (reconcile.go: revocation, restoration, refresh); a share changed by an admin, as
// the CRD watch reports it, has its volumes reconciled within the spread window (shareevents.go).
//
// One cycle asks one SubjectAccessReview per distinct (namespace, service account, kind, share)
// and GETs each distinct source once, however many volumes share them. Any API error leaves the
// volume exactly as it is: an outage must never revoke access, and the next cycle retries.
//
// Every node runs a driver. Were every driver to start its cycles at start-up and then every
// interval on the dot, a DaemonSet rollout or a fleet restarting after an outage would line all
// the nodes up, and each node would then send its requests as fast as its rate limiter allows:
// the API server would see the whole fleet's load in a spike every interval. So:
//   - the first cycle starts at a random offset within the interval, and each later one the
//     interval varied by ±relistJitter after the previous one started (at least 1 - spread of
//     it after the previous one ended): nodes started together drift apart;
//   - a cycle's requests are spread evenly over a part of the interval (--relist-spread): a node
//     never bursts at its full rate limit, and the fleet's load is as flat as its nodes' phases.
// Reactions to share events are paced the same way (shareevents.go): every node reacts to one
// admin's edit at a random point within the same part of the interval, so the fleet's requests
// for it spread as a cycle's do. The shares a driver lists at start-up are not such events
// (internal/share/index.go): a restarted fleet would react to all of them together.
//
// So a volume is checked again an interval (±10%) after its last check while the node's volumes
// stay the same, and at most 1.1 + spread intervals after it when volumes published since come
// before it in the cycle's order: the bound on how long a revoked pod keeps its files
// (TestRelistChecksAVolumeAgainWithinTheStatedBound).

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
	"golang.org/x/time/rate"
	"k8s.io/klog/v2"
)

// runRelist runs a cycle at a random offset within the first interval, then each an interval
// (jittered) after the previous one started, until ctx ends; each cycle's requests are spread
// over spread of the interval (relistSchedule says when, cyclePacer how fast).
func (d *driver) runRelist(ctx context.Context, interval time.Duration, spread float64) {
	d.metrics.relistStarted(interval)
	sched := newRelistSchedule(interval, spread)
	timer := time.NewTimer(sched.first())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		n := d.relistCycle(ctx, sched.window())
		took := time.Since(start)
		d.metrics.relistCycleDone(took)
		klog.V(3).InfoS("Relist cycle done", "volumes", n, "duration", took)
		timer.Reset(sched.after(took))
	}
}

// relistCycle reconciles every volume once, its API requests spread over window, and returns
// how many volumes it looked at.
func (d *driver) relistCycle(ctx context.Context, window time.Duration) int {
	recs := d.store.List()
	memo := d.newCycleMemo()
	pacer := newCyclePacer(cycleRequests(recs), window)
	asked := cycleKeys{}
	for _, rec := range recs {
		// The wait for this volume's requests comes before its lock is taken: a publish or
		// unpublish of the volume must not be answered Aborted while the cycle waits.
		for range asked.add(rec) {
			if pacer.wait(ctx) != nil {
				return len(recs)
			}
		}
		d.reconcileIfIdle(ctx, rec.VolumeID, memo)
	}
	return len(recs)
}

// relistJitter varies each interval by up to ±10%.
const relistJitter = 0.1

// relistSchedule says when each cycle starts and over how long it spreads its requests.
type relistSchedule struct {
	interval time.Duration
	spread   float64        // the part of the interval a cycle's requests are spread over
	rand     func() float64 // in [0, 1)
}

func newRelistSchedule(interval time.Duration, spread float64) relistSchedule {
	return relistSchedule{interval: interval, spread: spread, rand: rand.Float64}
}

// eventDelay is how long the reaction to a share event waits on this node: anywhere within the
// window a cycle spreads its requests over (none with no spread).
func (s relistSchedule) eventDelay() time.Duration {
	return time.Duration(s.rand() * float64(s.window()))
}

// window is how long a cycle spreads its requests over.
func (s relistSchedule) window() time.Duration {
	return time.Duration(s.spread * float64(s.interval))
}

// after is the wait after a cycle that took took: the next starts an interval (jittered) after
// this one started, so that spreading a cycle does not stretch the time between two checks of
// a volume; but a cycle that overran its part of the interval (more requests than the rate
// limit lets through in it) is followed by the rest of an interval of quiet, never at once by
// the next: a node never asks at its rate limit back to back.
func (s relistSchedule) after(took time.Duration) time.Duration {
	next := s.next()
	return max(next-took, time.Duration((1-s.spread)*float64(next)))
}

// first is the wait before the first cycle: anywhere within one interval.
func (s relistSchedule) first() time.Duration {
	return time.Duration(s.rand() * float64(s.interval))
}

// next is the time from the start of one cycle to the start of the next.
func (s relistSchedule) next() time.Duration {
	return time.Duration(float64(s.interval) * (1 + relistJitter*(2*s.rand()-1)))
}

// cyclePacer spaces a cycle's API requests evenly over a window.
type cyclePacer struct{ limiter *rate.Limiter }

// newCyclePacer spreads requests requests over window; with no window or no request it never
// waits. The first request goes at once; the last one window*(n-1)/n later.
func newCyclePacer(requests int, window time.Duration) cyclePacer {
	if requests <= 1 || window <= 0 {
		return cyclePacer{}
	}
	return cyclePacer{limiter: rate.NewLimiter(rate.Every(window/time.Duration(requests)), 1)}
}

// wait blocks until the next request may go, or ctx ends.
func (p cyclePacer) wait(ctx context.Context) error {
	if p.limiter == nil {
		return nil
	}
	return p.limiter.Wait(ctx)
}

// cycleKeys are the reviews and GETs a cycle has asked for so far.
type cycleKeys struct {
	access  map[accessKey]bool
	sources map[share.SourceKey]bool
}

// add records rec's requests and returns how many of them are new to the cycle: one review per
// access key, and one GET per source of a volume that refreshes.
func (k *cycleKeys) add(rec volume.Record) int {
	if k.access == nil {
		k.access, k.sources = map[accessKey]bool{}, map[share.SourceKey]bool{}
	}
	n := 0
	for j, s := range rec.Shares {
		if key := accessKeyOf(rec, j); !k.access[key] {
			k.access[key] = true
			n++
		}
		if src := (share.SourceKey{Kind: s.Kind, Namespace: s.SourceNamespace, Name: s.SourceName}); rec.Refresh && !k.sources[src] {
			k.sources[src] = true
			n++
		}
	}
	return n
}

// cycleRequests estimates the requests a cycle over recs sends.
func cycleRequests(recs []volume.Record) int {
	var k cycleKeys
	n := 0
	for _, rec := range recs {
		n += k.add(rec)
	}
	return n
}
