package main

// Leader election over one coordination.k8s.io/v1 Lease, so that exactly one driver in the
// cluster writes share status. It follows client-go's leaderelection protocol (the same Lease
// fields, the same timing rules, interoperable with it), written here because that package pulls
// in the generated clientset (see kube.go). Two differences, both on purpose: a term's work is
// waited for before the next campaign or the release, so no write of an old term can land after
// another driver took over; and it is about 150 lines instead of a dependency.

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// leaseElector campaigns for one Lease under one identity.
type leaseElector struct {
	leases   leaseClient
	name     string
	identity string
	// duration is how long a holder that stopped renewing blocks the others; renewDeadline
	// (shorter) is how long the holder keeps leading without a successful renewal; retry is the
	// interval between attempts.
	duration, renewDeadline, retry time.Duration
	now                            func() time.Time

	// What this driver last saw of the Lease and when, by its own clock: another holder's term
	// runs until a lease duration after its record last changed *as seen here*, never by the
	// holder's timestamps, so clock skew between nodes cannot cut a term short.
	observedVersion string
	observedAt      time.Time
}

// run campaigns until ctx ends. Each time the Lease is won, lead runs with a context that ends
// when the Lease is lost (no renewal for renewDeadline) or ctx ends; run waits for lead to
// return before it campaigns again. On ctx's end a held Lease is released, so another driver
// takes over at once instead of after a lease duration.
func (e *leaseElector) run(ctx context.Context, lead func(context.Context)) {
	for e.acquire(ctx) {
		term, endTerm := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(term)
		}()
		e.keep(term)
		endTerm()
		<-done
		if ctx.Err() != nil {
			e.release()
			return
		}
		klog.InfoS("Lost the Lease", "lease", e.leases.namespace+"/"+e.name, "identity", e.identity)
	}
}

// acquire tries every retry period until it holds the Lease (true) or ctx ends (false).
func (e *leaseElector) acquire(ctx context.Context) bool {
	t := time.NewTicker(e.retry)
	defer t.Stop()
	for {
		// Each attempt has a deadline: a request hanging on a dead connection must not stop
		// the campaign.
		actx, cancel := context.WithTimeout(ctx, e.renewDeadline)
		ok := e.tryAcquireOrRenew(actx)
		cancel()
		if ok {
			klog.InfoS("Acquired the Lease", "lease", e.leases.namespace+"/"+e.name, "identity", e.identity)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// keep renews the held Lease every retry period and returns when ctx ends or when no renewal
// succeeded for renewDeadline: from then on another driver may take it (after its own lease
// duration), and this one must already have stopped writing.
func (e *leaseElector) keep(ctx context.Context) {
	t := time.NewTicker(e.retry)
	defer t.Stop()
	deadline := e.now().Add(e.renewDeadline)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		actx, cancel := context.WithDeadline(ctx, deadline)
		ok := e.tryAcquireOrRenew(actx)
		cancel()
		if ok {
			deadline = e.now().Add(e.renewDeadline)
		} else if !e.now().Before(deadline) {
			return
		}
	}
}

// tryAcquireOrRenew takes the Lease if it is free, expired or already ours, and says whether
// this driver holds it now. The write carries the resourceVersion read, so of two drivers
// racing for an expired Lease exactly one wins.
func (e *leaseElector) tryAcquireOrRenew(ctx context.Context) bool {
	now := e.now()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       &e.identity,
		LeaseDurationSeconds: ptrTo(int32(e.duration / time.Second)),
		AcquireTime:          &metav1.MicroTime{Time: now},
		RenewTime:            &metav1.MicroTime{Time: now},
		LeaseTransitions:     ptrTo(int32(0)),
	}
	cur, err := e.leases.get(ctx, e.name)
	if apierrors.IsNotFound(err) {
		created, err := e.leases.create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.name}, Spec: spec})
		if err != nil {
			klog.V(2).InfoS("Creating the Lease failed", "lease", e.leases.namespace+"/"+e.name, "err", err)
			return false
		}
		e.observe(created, now)
		return true
	}
	if err != nil {
		klog.V(2).InfoS("Reading the Lease failed", "lease", e.leases.namespace+"/"+e.name, "err", err)
		return false
	}
	if cur.ResourceVersion != e.observedVersion {
		e.observe(cur, now)
	}
	holder := deref(cur.Spec.HolderIdentity)
	if holder != "" && holder != e.identity {
		held := time.Duration(deref(cur.Spec.LeaseDurationSeconds)) * time.Second
		if now.Before(e.observedAt.Add(held)) {
			return false // another driver's term is running
		}
	}
	// Free (released), expired, or ours: write ourselves in.
	next := cur.DeepCopy()
	transitions := deref(cur.Spec.LeaseTransitions)
	if holder == e.identity {
		spec.AcquireTime = cur.Spec.AcquireTime
	} else {
		transitions++
	}
	spec.LeaseTransitions = &transitions
	next.Spec = spec
	updated, err := e.leases.update(ctx, next)
	if err != nil {
		klog.V(2).InfoS("Writing the Lease failed", "lease", e.leases.namespace+"/"+e.name, "err", err)
		return false
	}
	e.observe(updated, now)
	return true
}

// release gives the Lease up (holder cleared, duration 1 s, as client-go does) if this driver
// still holds it. It runs after the caller's context ended, so it has its own short deadline.
func (e *leaseElector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.renewDeadline)
	defer cancel()
	cur, err := e.leases.get(ctx, e.name)
	if err != nil || deref(cur.Spec.HolderIdentity) != e.identity {
		return
	}
	now := metav1.MicroTime{Time: e.now()}
	next := cur.DeepCopy()
	next.Spec.HolderIdentity = ptrTo("")
	next.Spec.LeaseDurationSeconds = ptrTo(int32(1))
	next.Spec.AcquireTime, next.Spec.RenewTime = &now, &now
	if _, err := e.leases.update(ctx, next); err != nil {
		klog.ErrorS(err, "Releasing the Lease failed; another driver takes over when it expires", "lease", e.leases.namespace+"/"+e.name)
		return
	}
	klog.InfoS("Released the Lease", "lease", e.leases.namespace+"/"+e.name, "identity", e.identity)
}

func (e *leaseElector) observe(l *coordinationv1.Lease, at time.Time) {
	e.observedVersion, e.observedAt = l.ResourceVersion, at
}

func ptrTo[T any](v T) *T { return &v }

// deref is *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
