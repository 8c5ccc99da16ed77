package sharestatus

// Leader election over one coordination.k8s.io/v1 Lease, so that exactly one status controller
// replica (--role=status, the root's roles.go) in the cluster writes share status. It follows
// client-go's leaderelection protocol (the same Lease fields, the same timing rules, interoperable
// with it), written here because that package pulls in the generated clientset (see
// internal/kubeclient). Two differences, both on purpose: a term's work is waited for before the
// next campaign or the release, so no write of an old term can land after another driver took over;
// and it is one short file instead of a dependency.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// leaseElector campaigns for one Lease under one identity.
type leaseElector struct {
	leases   leaseClient
	name     string
	identity string
	// duration is how long a holder that stopped renewing blocks the others; renewDeadline
	// (shorter) is how long the holder keeps leading without a successful renewal; retry is the
	// interval between the holder's renewals and between attempts after an error.
	duration, renewDeadline, retry time.Duration
	// candidatePoll is how often a replica looks at a Lease another one holds, varied by ±10%
	// so that their reads do not line up. (When every node campaigned, at client-go's 2 s retry
	// 5,000 nodes would have read the Lease 2,500 times a second.) Polled this slowly, a dead holder is replaced within about
	// duration + 2 x candidatePoll; a holder that exits cleanly releases the Lease, and the next
	// candidate to look takes it. Zero: retry.
	candidatePoll time.Duration
	now           func() time.Time

	// The Lease as this driver last saw it, and when by its own clock: another holder's term
	// runs until a lease duration after its record last changed *as seen here*, never by the
	// holder's timestamps, so clock skew between nodes cannot cut a term short.
	observed   *coordinationv1.Lease
	observedAt time.Time
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

// acquire tries until it holds the Lease (true) or ctx ends (false): every candidatePoll while
// another driver holds it, every retry period after an error.
func (e *leaseElector) acquire(ctx context.Context) bool {
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
		t := time.NewTimer(e.nextAttempt())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// nextAttempt is the wait after a failed attempt: candidatePoll (±10%) when the Lease was read
// and another driver holds it, the retry period otherwise.
func (e *leaseElector) nextAttempt() time.Duration {
	heldByOther := e.observed != nil && ptr.Deref(e.observed.Spec.HolderIdentity, "") != "" &&
		ptr.Deref(e.observed.Spec.HolderIdentity, "") != e.identity
	if !heldByOther || e.candidatePoll <= e.retry {
		return e.retry
	}
	return time.Duration(float64(e.candidatePoll) * (0.9 + 0.2*rand.Float64()))
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
// this driver holds it now. Every write carries the resourceVersion it was based on, so of two
// drivers racing for an expired Lease exactly one wins.
func (e *leaseElector) tryAcquireOrRenew(ctx context.Context) bool {
	now := e.now()
	// The holder renews from the Lease it last wrote, without reading it first (as client-go
	// does): one request per renewal. Only if someone else wrote it meanwhile does the update
	// fail, and the Lease is read.
	if e.observed != nil && ptr.Deref(e.observed.Spec.HolderIdentity, "") == e.identity {
		if e.write(ctx, e.observed, now) {
			return true
		}
	}
	cur, err := e.leases.get(ctx, e.name)
	if apierrors.IsNotFound(err) {
		cur = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.name}}
		created, err := e.leases.create(ctx, e.claim(cur, now))
		if err != nil {
			klog.V(2).InfoS("Creating the Lease failed", "lease", e.leases.namespace+"/"+e.name, "err", err)
			return false
		}
		e.observed, e.observedAt = created, now
		return true
	}
	if err != nil {
		klog.V(2).InfoS("Reading the Lease failed", "lease", e.leases.namespace+"/"+e.name, "err", err)
		return false
	}
	if e.observed == nil || cur.ResourceVersion != e.observed.ResourceVersion {
		e.observed, e.observedAt = cur, now
	}
	holder := ptr.Deref(cur.Spec.HolderIdentity, "")
	if holder != "" && holder != e.identity {
		held := time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, 0)) * time.Second
		if now.Before(e.observedAt.Add(held)) {
			return false // another driver's term is running
		}
	}
	// Free (released), expired, or ours: write ourselves in.
	return e.write(ctx, cur, now)
}

// claim returns cur with this driver as the holder, renewed at now.
func (e *leaseElector) claim(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	next := cur.DeepCopy()
	spec := &next.Spec
	if ptr.Deref(spec.HolderIdentity, "") != e.identity {
		spec.HolderIdentity = ptr.To(e.identity)
		spec.AcquireTime = &metav1.MicroTime{Time: now}
		transitions := int32(0) // a new Lease
		if cur.ResourceVersion != "" {
			transitions = ptr.Deref(spec.LeaseTransitions, 0) + 1
		}
		spec.LeaseTransitions = ptr.To(transitions)
	}
	spec.RenewTime = &metav1.MicroTime{Time: now}
	spec.LeaseDurationSeconds = ptr.To(int32(e.duration / time.Second))
	return next
}

// write updates the Lease from cur to this driver's claim.
func (e *leaseElector) write(ctx context.Context, cur *coordinationv1.Lease, now time.Time) bool {
	updated, err := e.leases.update(ctx, e.claim(cur, now))
	if err != nil {
		klog.V(2).InfoS("Writing the Lease failed", "lease", e.leases.namespace+"/"+e.name, "err", err)
		return false
	}
	e.observed, e.observedAt = updated, now
	return true
}

// release gives the Lease up (holder cleared, duration 1 s, as client-go does) if this driver
// still holds it. It runs after the caller's context ended, so it has its own short deadline.
func (e *leaseElector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.renewDeadline)
	defer cancel()
	cur, err := e.leases.get(ctx, e.name)
	if err != nil || ptr.Deref(cur.Spec.HolderIdentity, "") != e.identity {
		return
	}
	now := metav1.MicroTime{Time: e.now()}
	next := cur.DeepCopy()
	next.Spec.HolderIdentity = ptr.To("")
	next.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	next.Spec.AcquireTime, next.Spec.RenewTime = &now, &now
	if _, err := e.leases.update(ctx, next); err != nil {
		klog.ErrorS(err, "Releasing the Lease failed; another driver takes over when it expires", "lease", e.leases.namespace+"/"+e.name)
		return
	}
	klog.InfoS("Released the Lease", "lease", e.leases.namespace+"/"+e.name, "identity", e.identity)
}

// leaseClient reads and writes Leases in one namespace.
type leaseClient struct {
	c         rest.Interface
	namespace string
}

func (l leaseClient) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, l.c.Get().Namespace(l.namespace).Resource("leases").Name(name).Do(ctx).Into(out)
}

func (l leaseClient) create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, l.c.Post().Namespace(l.namespace).Resource("leases").Body(lease).Do(ctx).Into(out)
}

// update writes lease if its resourceVersion is still current (a Conflict error otherwise).
func (l leaseClient) update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if lease.Name == "" {
		return nil, fmt.Errorf("lease without a name")
	}
	out := &coordinationv1.Lease{}
	return out, l.c.Put().Namespace(l.namespace).Resource("leases").Name(lease.Name).Body(lease).Do(ctx).Into(out)
}
