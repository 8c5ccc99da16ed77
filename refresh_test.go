package main

// Specification of the relist's timing (refresh.go): the first cycle starts anywhere within one
// interval, later ones an interval ±10% apart start to start, so drivers started together drift
// apart, but never at once after a cycle that overran its window; a cycle's requests are spaced
// evenly over its window; the estimate of a cycle's requests counts each review and each GET once.

import (
	"context"
	"testing"
	"time"
)

func TestRelistScheduleBounds(t *testing.T) {
	const interval = time.Minute
	for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
		s := relistSchedule{interval: interval, rand: func() float64 { return r }}
		if f := s.first(); f < 0 || f >= interval {
			t.Errorf("rand %v: first wait %v, want within [0, %v)", r, f, interval)
		}
		if n := s.next(); n < 54*time.Second || n > 66*time.Second {
			t.Errorf("rand %v: next wait %v, want within the interval ±10%%", r, n)
		}
	}
}

// A fleet of drivers started in the same second spreads its first cycles over the interval:
// every tenth of it gets about a tenth of the fleet, not all of it.
// Cycles start an interval apart, start to start; a cycle that took longer than its window is
// followed by the rest of an interval of quiet.
func TestRelistNextCycleStartsAnIntervalAfterTheLastStarted(t *testing.T) {
	s := relistSchedule{interval: time.Minute, spread: 0.5, rand: func() float64 { return 0.5 }} // no jitter
	for _, tc := range []struct{ took, want time.Duration }{
		{0, time.Minute},
		{10 * time.Second, 50 * time.Second},
		{30 * time.Second, 30 * time.Second},
		{50 * time.Second, 30 * time.Second}, // overran its 30 s window
	} {
		if got := s.after(tc.took); got != tc.want {
			t.Errorf("after a cycle of %v: wait %v, want %v", tc.took, got, tc.want)
		}
	}
	if w := s.window(); w != 30*time.Second {
		t.Errorf("window %v, want half the interval", w)
	}
}

func TestRelistFirstCyclesOfAFleetSpreadOverTheInterval(t *testing.T) {
	const nodes, interval = 5000, time.Minute
	var deciles [10]int
	for range nodes {
		f := newRelistSchedule(interval, 0.5).first()
		deciles[int(f*10/interval)]++
	}
	for i, n := range deciles {
		if n < nodes/10*7/10 || n > nodes/10*13/10 {
			t.Errorf("decile %d of the interval has %d of %d first cycles, want about %d: %v", i, n, nodes, nodes/10, deciles)
		}
	}
}

func TestCyclePacerSpacesRequestsOverItsWindow(t *testing.T) {
	ctx := context.Background()
	const n, window = 5, 200 * time.Millisecond
	p := newCyclePacer(n, window)
	start := time.Now()
	for range n {
		if err := p.wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The first goes at once, the others window/n apart: (n-1)/n of the window in all.
	if took := time.Since(start); took < window*(n-1)/n-10*time.Millisecond || took > 2*window {
		t.Errorf("%d requests took %v, want about %v", n, took, window*(n-1)/n)
	}
	for _, p := range []cyclePacer{newCyclePacer(100, 0), newCyclePacer(1, time.Hour), newCyclePacer(0, time.Hour)} {
		start := time.Now()
		for range 3 {
			p.wait(ctx)
		}
		if took := time.Since(start); took > 10*time.Millisecond {
			t.Errorf("a pacer with no window or one request waited %v", took)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	p = newCyclePacer(2, time.Hour)
	p.wait(ctx)
	if err := p.wait(cancelled); err == nil {
		t.Error("waiting with a cancelled context did not fail")
	}
}

func TestCycleRequestsCountsEachReviewAndGETOnce(t *testing.T) {
	share := func(name, srcNS, src string) shareState {
		return shareState{shareRef: shareRef{Kind: kindSecret, Name: name}, SourceNamespace: srcNS, SourceName: src}
	}
	recs := []volumeRecord{
		// Two volumes of one service account on one share: one review, one GET.
		{PodNamespace: "a", ServiceAccount: "sa", Refresh: true, Shares: []shareState{share("ca", "p", "ca")}},
		{PodNamespace: "a", ServiceAccount: "sa", Refresh: true, Shares: []shareState{share("ca", "p", "ca")}},
		// Another service account: one more review; the same source.
		{PodNamespace: "b", ServiceAccount: "sa", Refresh: true, Shares: []shareState{share("ca", "p", "ca")}},
		// refreshResource=false: a review, no GET.
		{PodNamespace: "c", ServiceAccount: "sa", Refresh: false, Shares: []shareState{share("key", "p", "key")}},
	}
	if got := cycleRequests(recs); got != 3+1 {
		t.Errorf("cycleRequests = %d, want 3 reviews + 1 GET", got)
	}
}
