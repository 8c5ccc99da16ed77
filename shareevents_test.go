package main

// Specification of the pacing of reactions to share events (shareevents.go): each node waits a
// random part of the relist's spread window, so a fleet's reactions to one edit spread over
// that window as its cycles' requests do, never all in its first moment; events for one share
// coalesce into one reaction while they wait; an event during a reaction is not lost, nor one
// for a volume that is busy when it comes; a node without spread reacts at once. (Before the pacing every node reacted at once: the whole
// fleet's reactions in the window's first 1%.)

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestShareEventReactionsOfAFleetSpreadOverTheWindow(t *testing.T) {
	const nodes, interval, spread = 5000, time.Minute, 0.5
	window := time.Duration(spread * float64(interval))
	var deciles [10]int
	first := 0 // reactions in the window's first 1%: a burst of the whole fleet lands there
	for range nodes {
		delay := newRelistSchedule(interval, spread).eventDelay()
		if delay < 0 || delay >= window {
			t.Fatalf("a reaction waits %v, outside the window [0, %v)", delay, window)
		}
		deciles[int(delay*10/window)]++
		if delay < window/100 {
			first++
		}
	}
	t.Logf("reactions of %d nodes to one edit, by tenth of the %v window: %v; in its first 1%%: %d", nodes, window, deciles, first)
	for i, n := range deciles {
		if n < nodes/10*7/10 || n > nodes/10*13/10 {
			t.Errorf("tenth %d of the window has %d of %d reactions, want about %d: %v", i, n, nodes, nodes/10, deciles)
		}
	}
	if first > nodes/100*2 {
		t.Errorf("%d of %d nodes react in the window's first 1%%, want about %d", first, nodes, nodes/100)
	}
	if d := newRelistSchedule(interval, 0).eventDelay(); d != 0 {
		t.Errorf("with no spread a reaction waits %v, want none", d)
	}
}

// pacedQueue is a shareEventQueue on a fake clock whose every event waits delay, and the
// reactions it made, in order.
type pacedQueue struct {
	*shareEventQueue
	clock *clocktesting.FakeClock
	mu    sync.Mutex
	done  []share.Ref
	gate  chan struct{} // when set, a reaction waits on it
	// atGate tells the test that a reaction has started and waits on the gate.
	atGate chan share.Ref
}

func newPacedQueue(t *testing.T, delay time.Duration) *pacedQueue {
	return newPacedQueueOf(t, func() time.Duration { return delay }, 0)
}

// newPacedQueueOf is a pacedQueue whose events wait delay(), a share's reactions at least window
// apart.
func newPacedQueueOf(t *testing.T, delay func() time.Duration, window time.Duration) *pacedQueue {
	clock := clocktesting.NewFakeClock(time.Now())
	p := &pacedQueue{clock: clock, atGate: make(chan share.Ref, 1), shareEventQueue: newShareEventQueueOn(clock, "", delay, window)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go p.run(ctx, func(_ context.Context, ref share.Ref) {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		if gate != nil {
			select {
			case p.atGate <- ref:
			default:
			}
			<-gate
		}
		p.mu.Lock()
		p.done = append(p.done, ref)
		p.mu.Unlock()
	})
	return p
}

func (p *pacedQueue) reactions() []share.Ref {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.done)
}

// settle waits until the reactions are want, or fails.
func (p *pacedQueue) settle(t *testing.T, what string, want ...share.Ref) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.reactions()
		if slices.Equal(got, want) {
			time.Sleep(50 * time.Millisecond) // and nothing more follows
			if got = p.reactions(); slices.Equal(got, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: reactions %v, want %v", what, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestShareEventsWaitTheirDelayAndCoalesce(t *testing.T) {
	p := newPacedQueue(t, 10*time.Second)
	a, b := share.Ref{Kind: share.KindSecret, Name: "a"}, share.Ref{Kind: share.KindConfigMap, Name: "b"}
	for range 3 {
		p.add(a.Kind, a.Name)
	}
	p.add(b.Kind, b.Name)
	p.clock.Step(9 * time.Second)
	p.settle(t, "before the delay")
	p.clock.Step(2 * time.Second)
	p.settle(t, "after the delay: each share once", a, b)

	// An event while the share's reaction runs: one more reaction after it, none lost.
	gate := make(chan struct{})
	p.mu.Lock()
	p.gate = gate
	p.mu.Unlock()
	p.add(a.Kind, a.Name)
	p.clock.Step(11 * time.Second)
	select { // the reaction has started and waits on the gate
	case <-p.atGate:
	case <-time.After(5 * time.Second):
		t.Fatal("the reaction to the event did not start")
	}
	p.add(a.Kind, a.Name)
	p.add(a.Kind, a.Name)
	p.clock.Step(11 * time.Second)
	close(gate)
	p.settle(t, "an edit during the reaction", a, b, a, a)
}

// A stream of edits of one share, 100 a second for 5 s, each event drawing its own delay within
// a 1 s window: at most one reaction per window (6 over 5 s: the first, then one a window
// after each), and the last edit is seen. (Before, each event drew a fresh delay and the queue
// kept the earliest: a reaction every few tenths of a second.)
func TestAStreamOfEditsMakesOneReactionPerWindow(t *testing.T) {
	const window, step, edits = time.Second, 10 * time.Millisecond, 500
	rnd := rand.New(rand.NewPCG(1, 2))
	p := newPacedQueueOf(t, func() time.Duration { return time.Duration(rnd.Int64N(int64(window))) }, window)
	a := share.Ref{Kind: share.KindSecret, Name: "a"}
	for range edits {
		p.add(a.Kind, a.Name)
		p.clock.Step(step)
		time.Sleep(100 * time.Microsecond) // let a reaction that is due start
	}
	edited := p.clock.Now()
	p.clock.Step(2 * window) // the reaction to the last edits
	deadline := time.Now().Add(5 * time.Second)
	for p.q.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	n := len(p.reactions())
	t.Logf("%d edits over %v: %d reactions", edits, edits*step, n)
	if most := int(edits*step/window) + 1; n > most || n < 2 {
		t.Errorf("%d edits over %v with a %v window made %d reactions, want at most %d (one per window), and more than one", edits, edits*step, window, n, most)
	}
	p.mu.Lock()
	last := p.started[a]
	p.mu.Unlock()
	if last.Before(edited.Add(-step)) {
		t.Errorf("the last reaction started at %v, before the last edit (%v): the last edit was not seen", last, edited.Add(-step))
	}
}

// What a volume uses of a share decides whether an edit makes a reaction, not its generation: a
// description, a label, the status's conditions change nothing a volume shows; the ref, the list
// of keys, following re-creations, the pin in the status and the object itself do. (Before, every
// new generation made one: a stream of description edits had every node react to each.)
func TestOnlyEditsOfWhatAVolumeUsesMakeAReaction(t *testing.T) {
	base := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "share", "uid": "share-1", "generation": int64(1)},
			"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}, "description": "CA"},
			"status":   map[string]any{share.PinField: "src-1"},
		}}
		return u
	}
	for _, tc := range []struct {
		name  string
		edit  func(u *unstructured.Unstructured)
		react bool
	}{
		{"description", func(u *unstructured.Unstructured) {
			mustSet(unstructured.SetNestedField(u.Object, "the corporate CA", "spec", "description"))
		}, false},
		{"a label", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "a"}) }, false},
		{"the status's conditions", func(u *unstructured.Unstructured) {
			mustSet(unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Ready", "status": "True"}}, "status", "conditions"))
		}, false},
		{"the ref", func(u *unstructured.Unstructured) {
			mustSet(unstructured.SetNestedField(u.Object, "other", "spec", "secretRef", "name"))
		}, true},
		{"the list of keys", func(u *unstructured.Unstructured) {
			mustSet(unstructured.SetNestedSlice(u.Object, []any{map[string]any{"key": "ca.crt"}}, "spec", share.ItemsField))
		}, true},
		{"following re-creations", func(u *unstructured.Unstructured) {
			mustSet(unstructured.SetNestedField(u.Object, share.RecreationFollow, "spec", share.RecreationField))
		}, true},
		{"the pin", func(u *unstructured.Unstructured) {
			mustSet(unstructured.SetNestedField(u.Object, "src-2", "status", share.PinField))
		}, true},
		{"the object", func(u *unstructured.Unstructured) { u.SetUID("share-2") }, true},
	} {
		was, now := base(), base()
		tc.edit(now)
		now.SetGeneration(2)
		if got := share.Changed(share.KindSecret, was, now); got != tc.react {
			t.Errorf("an edit of %s: reaction %v, want %v", tc.name, got, tc.react)
		}
	}
}

// A share's event while one of its volumes is busy (a publish, an unpublish, the relist's own
// reconcile of it, which may have read the share before the event, holds its lock): the
// reaction skips that volume, and comes back for it shortly after, so the event is not lost.
// (Before, the skipped volume waited for the next relist: the deleted share's files stayed.)
func TestShareEventOnABusyVolumeIsRetried(t *testing.T) {
	d, _ := identityWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	events := newShareEventQueue(newRelistSchedule(time.Minute, 0)) // reacts at once
	stopped := make(chan struct{})
	go func() {
		d.runShareEvents(ctx, events)
		close(stopped)
	}()
	defer func() {
		cancel()
		<-stopped // no reaction still writes when the test's directory goes
	}()
	unlock, ok := d.locks.tryLock("vol-1")
	if !ok {
		t.Fatal("vol-1 is locked")
	}
	deleteShareFromCache(t, d, "share")
	events.add(share.KindSecret, "share")
	for events.q.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the reaction ran, and found vol-1 busy
	unlock()
	deadline := time.Now().Add(5 * time.Second)
	for viewOf(t, d, "vol-1") != "" {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after its lock was released the pod still sees %q: the deleted share's event was lost", viewOf(t, d, "vol-1"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mustSet fails the test's setup when an edit of an object's field could not be made.
func mustSet(err error) {
	if err != nil {
		panic(err)
	}
}
