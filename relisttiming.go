package main

// When the relist runs, and how fast it asks. Every node runs a driver, and each relist cycle
// sends a SubjectAccessReview per distinct (namespace, service account, share) and a GET per
// distinct source. Were every driver to start its cycles at start-up and then every interval on
// the dot, a DaemonSet rollout or a fleet restarting after an outage would line all the nodes up,
// and each node would then send its requests as fast as its rate limiter allows: the API server
// would see the whole fleet's load in a spike every interval. So:
//   - the first cycle starts at a random offset within the interval, and each later one after
//     the interval varied by ±relistJitter: nodes started together drift apart;
//   - a cycle's requests are spread evenly over a part of the interval (--relist-spread): a node
//     never bursts at its full rate limit, and the fleet's load is as flat as its nodes' phases.
// Reactions to share events are not paced: they answer one admin action, at once.

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

// next is the wait between the end of one cycle and the start of the next.
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

// cycleRequests estimates the requests a cycle over recs sends: one review per distinct access
// key and one GET per distinct source of the volumes that refresh.
func cycleRequests(recs []volumeRecord) int {
	access := map[accessKey]bool{}
	sources := map[sourceKey]bool{}
	for i := range recs {
		for j, s := range recs[i].Shares {
			access[recs[i].accessKey(j)] = true
			if recs[i].Refresh {
				sources[sourceKey{Kind: s.Kind, Namespace: s.SourceNamespace, Name: s.SourceName}] = true
			}
		}
	}
	return len(access) + len(sources)
}
