package main

// Reactions to share events: a share added, changed or deleted, as the CRD watch reports it, has
// its volumes reconciled (reconcile.go) without waiting for the relist.
//
// Every node runs a driver and every driver watches every share, so one admin's edit of a share
// (a description changed passes the admission policy as well as a re-pointed ref) reaches the
// whole fleet in the same moment. Were each node to react at once, the API server would get one
// review per (namespace, service account) using the share and one GET of its source from every
// node together; all drivers share one flow in API Priority and Fairness, so the burst queues
// there, behind it the relist's reviews, and under saturation a revoked pod keeps its files past
// the relist's bound. So each node waits a random part of the relist's spread window
// (--relist-spread of --relist-interval, relistSchedule.eventDelay) before it reacts, as a
// cycle spreads its requests over that window: the fleet's reaction to one edit is as flat as a
// cycle. Events for one share coalesce: while the reaction waits, or waits to run, more events
// for the share add nothing; an event during the reaction runs it once more afterwards, so the
// last edit is always seen. And a share's reactions on a node start at least a window apart: a
// stream of edits (a controller rewriting a share in a loop, a tenant's script) makes one
// reaction per window per node, not one per random delay that happens to fall short. Edits that
// change nothing a volume uses (a description, labels, the status's conditions) make none
// (internal/share/index.go, share.Changed). A volume whose lock is held when the reaction comes (a publish, an unpublish, the
// relist's reconcile of it, which may have read the share before the event) is skipped, and the
// share's reaction runs again busyRetryDelay later, until no volume of it was busy: the event is
// never dropped for a volume. A share's change thus reaches its volumes within the spread window
// after the watch reports it (plus the reaction's own requests, and the operations holding their
// locks): within the relist's bound, which it shortens for the share that changed (docs/scale.md).

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// shareEventQueue holds the shares whose events wait for their reaction.
type shareEventQueue struct {
	q      workqueue.TypedDelayingInterface[share.Ref]
	clock  clock.Clock
	delay  func() time.Duration // how long an event waits on this node
	window time.Duration        // a share's reactions start at least this far apart

	mu      sync.Mutex
	pending map[share.Ref]bool      // a reaction waits (or waits to run): events add nothing
	started map[share.Ref]time.Time // when each share's last reaction started, within a window
}

func newShareEventQueue(sched relistSchedule) *shareEventQueue {
	return newShareEventQueueOn(clock.RealClock{}, "share-events", sched.eventDelay, sched.window())
}

// newShareEventQueueOn is a queue on clk whose events wait delay(), and whose reactions to one
// share start at least window apart.
func newShareEventQueueOn(clk clock.WithTicker, name string, delay func() time.Duration, window time.Duration) *shareEventQueue {
	return &shareEventQueue{
		q:     workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[share.Ref]{Name: name, Clock: clk}),
		clock: clk, delay: delay, window: window,
		pending: map[share.Ref]bool{}, started: map[share.Ref]time.Time{},
	}
}

// busyRetryDelay is how long a share's reaction waits to run again when one of its volumes was
// busy: a publish or unpublish takes about a second; the retry only tries the volumes' locks
// and reconciles those that are free, one review per service account and one read of the source.
const busyRetryDelay = time.Second

// add is the watch's report that share name of kind k changed: its reaction waits the node's
// delay, and at least until a window after its last reaction started; an event while one waits
// adds nothing.
func (e *shareEventQueue) add(k share.Kind, name string) {
	ref := share.Ref{Kind: k, Name: name}
	e.mu.Lock()
	if e.pending[ref] {
		e.mu.Unlock()
		return
	}
	now := e.clock.Now()
	wait := e.delay()
	if last, ok := e.started[ref]; ok {
		wait = max(wait, last.Add(e.window).Sub(now))
	}
	e.pending[ref] = true
	e.mu.Unlock()
	e.q.AddAfter(ref, wait)
}

// retry runs ref's reaction again busyRetryDelay from now (or with an earlier event, whichever
// comes first): the same reaction, finishing what it could not do, so not held to the window.
func (e *shareEventQueue) retry(ref share.Ref) {
	e.mu.Lock()
	e.pending[ref] = true
	e.mu.Unlock()
	e.q.AddAfter(ref, busyRetryDelay)
}

// starting notes that ref's reaction starts now: events from now on wait for the next one, a
// window later. Shares whose last reaction is more than a window ago are forgotten.
func (e *shareEventQueue) starting(ref share.Ref) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	delete(e.pending, ref)
	for r, t := range e.started {
		if now.Sub(t) >= e.window {
			delete(e.started, r)
		}
	}
	if e.window > 0 {
		e.started[ref] = now
	}
}

// run calls react for each share whose delay has passed, one at a time, until ctx ends.
func (e *shareEventQueue) run(ctx context.Context, react func(context.Context, share.Ref)) {
	go func() {
		<-ctx.Done()
		e.q.ShutDown()
	}()
	for {
		ref, quit := e.q.Get()
		if quit {
			return
		}
		e.starting(ref)
		react(ctx, ref)
		e.q.Done(ref)
	}
}

// runShareEvents reconciles the volumes of each changed share, paced (see the top of this file),
// and again shortly when one of them was busy.
func (d *driver) runShareEvents(ctx context.Context, events *shareEventQueue) {
	events.run(ctx, func(ctx context.Context, ref share.Ref) {
		if d.reconcileShare(ctx, ref) {
			events.retry(ref)
		}
	})
}

// reconcileShare reconciles the volumes of one share, for an event on it. busy says whether it
// skipped one whose lock was held.
func (d *driver) reconcileShare(ctx context.Context, ref share.Ref) (busy bool) {
	memo := d.newCycleMemo()
	for _, rec := range d.store.List() {
		if slices.Contains(rec.Refs(), ref) && !d.reconcileIfIdle(ctx, rec.VolumeID, memo) {
			busy = true
		}
	}
	return busy
}
