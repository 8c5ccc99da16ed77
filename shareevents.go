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
// for the share add nothing (the delaying queue keeps the earliest deadline, the queue each share
// once); an event during the reaction runs it once more afterwards, so the last edit is always
// seen. A volume whose lock is held when the reaction comes (a publish, an unpublish, the
// relist's reconcile of it, which may have read the share before the event) is skipped, and the
// share's reaction runs again busyRetryDelay later, until no volume of it was busy: the event is
// never dropped for a volume. A share's change thus reaches its volumes within the spread window
// after the watch reports it (plus the reaction's own requests, and the operations holding their
// locks): within the relist's bound, which it shortens for the share that changed (docs/scale.md).

import (
	"context"
	"slices"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// shareEventQueue holds the shares whose events wait for their reaction.
type shareEventQueue struct {
	q     workqueue.TypedDelayingInterface[shareRef]
	delay func() time.Duration // how long an event waits on this node
}

func newShareEventQueue(sched relistSchedule) *shareEventQueue {
	return &shareEventQueue{
		q:     workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[shareRef]{Name: "share-events"}),
		delay: sched.eventDelay,
	}
}

// busyRetryDelay is how long a share's reaction waits to run again when one of its volumes was
// busy: a publish or unpublish takes about a second; the retry only tries the volumes' locks
// and reconciles those that are free, one review per service account and one read of the source.
const busyRetryDelay = time.Second

// add is the watch's report that share name of kind k changed.
func (e *shareEventQueue) add(k shareKind, name string) {
	e.q.AddAfter(shareRef{Kind: k, Name: name}, e.delay())
}

// retry runs ref's reaction again busyRetryDelay from now (or with an earlier event, whichever
// comes first).
func (e *shareEventQueue) retry(ref shareRef) {
	e.q.AddAfter(ref, busyRetryDelay)
}

// run calls react for each share whose delay has passed, one at a time, until ctx ends.
func (e *shareEventQueue) run(ctx context.Context, react func(context.Context, shareRef)) {
	go func() {
		<-ctx.Done()
		e.q.ShutDown()
	}()
	for {
		ref, quit := e.q.Get()
		if quit {
			return
		}
		react(ctx, ref)
		e.q.Done(ref)
	}
}

// runShareEvents reconciles the volumes of each changed share, paced (see the top of this file),
// and again shortly when one of them was busy.
func (d *driver) runShareEvents(ctx context.Context, events *shareEventQueue) {
	events.run(ctx, func(ctx context.Context, ref shareRef) {
		if d.reconcileShare(ctx, ref) {
			events.retry(ref)
		}
	})
}

// reconcileShare reconciles the volumes of one share, for an event on it. busy says whether it
// skipped one whose lock was held.
func (d *driver) reconcileShare(ctx context.Context, ref shareRef) (busy bool) {
	memo := d.newCycleMemo()
	for _, rec := range d.store.list() {
		if slices.Contains(rec.refs(), ref) && !d.reconcileIfIdle(ctx, rec.VolumeID, memo) {
			busy = true
		}
	}
	return busy
}
