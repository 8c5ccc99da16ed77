package main

// When the relist runs, and how fast it asks. Every node runs a driver, and each relist cycle
// sends a SubjectAccessReview per distinct (namespace, service account, share) and a GET per
// distinct source. Were every driver to start its cycles at start-up and then every interval on
// the dot, a DaemonSet rollout or a fleet restarting after an outage would line all the nodes up,
// and each node would then send its requests as fast as its rate limiter allows: the API server
// would see the whole fleet's load in a spike every interval. So:
//   - the first cycle starts at a random offset within the interval, and each later one the
//     interval varied by ±relistJitter after the previous one started (at least 1 - spread of
//     it after the previous one ended): nodes started together drift apart;
//   - a cycle's requests are spread evenly over a part of the interval (--relist-spread): a node
//     never bursts at its full rate limit, and the fleet's load is as flat as its nodes' phases.
// Reactions to share events are not paced: they answer one admin action, at once. The shares
// a driver lists at start-up are not such events (fetch.go): a restarted fleet would react to
// all of them together.

import (
	"context"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"
)

// relistJitter varies each interval by up to ±10%.
const relistJitter = 0.1

// relistSchedule says how long to wait before each cycle.
type relistSchedule struct {
	interval time.Duration
	rand     func() float64 // in [0, 1)
}

func newRelistSchedule(interval time.Duration) relistSchedule {
	return relistSchedule{interval: interval, rand: rand.Float64}
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
	sources map[sourceKey]bool
}

// add records rec's requests and returns how many of them are new to the cycle: one review per
// access key, and one GET per source of a volume that refreshes.
func (k *cycleKeys) add(rec volumeRecord) int {
	if k.access == nil {
		k.access, k.sources = map[accessKey]bool{}, map[sourceKey]bool{}
	}
	n := 0
	for j, s := range rec.Shares {
		if key := rec.accessKey(j); !k.access[key] {
			k.access[key] = true
			n++
		}
		if src := (sourceKey{Kind: s.Kind, Namespace: s.SourceNamespace, Name: s.SourceName}); rec.Refresh && !k.sources[src] {
			k.sources[src] = true
			n++
		}
	}
	return n
}

// cycleRequests estimates the requests a cycle over recs sends.
func cycleRequests(recs []volumeRecord) int {
	var k cycleKeys
	n := 0
	for _, rec := range recs {
		n += k.add(rec)
	}
	return n
}
