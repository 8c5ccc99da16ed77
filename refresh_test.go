package main

// Specification of the relist's timing (refresh.go): the first cycle starts anywhere within one
// interval, later ones an interval ±10% apart start to start, so drivers started together drift
// apart, but never at once after a cycle that overran its window; a cycle's requests are spaced
// evenly over its window; the estimate of a cycle's requests counts each review and each GET once.

import (
	"context"
	"testing"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
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

// The revocation bound docs/security.md and docs/scale.md state: a volume is checked again within the
// interval ±10% when its position in the cycle stays (the node's volumes did not change), and at
// most 1.1 + spread intervals later when volumes published since come before it, taking it from
// the start of one cycle's window to the end of the next's. Computed from the schedule and the
// pacer's even spacing for every jitter, without sleeping.
func TestRelistChecksAVolumeAgainWithinTheStatedBound(t *testing.T) {
	const interval, spread, requests = time.Minute, 0.5, 100
	offset := func(s relistSchedule, position int) time.Duration { // when the pacer lets request position go
		return s.window() * time.Duration(position) / requests
	}
	var typicalMax, worst time.Duration
	for _, r := range []float64{0, 0.25, 0.5, 0.75, 0.999999} {
		s := relistSchedule{interval: interval, spread: spread, rand: func() float64 { return r }}
		took := offset(s, requests-1) // the cycle's last request
		startToStart := took + s.after(took)
		for _, pos := range []struct{ before, after int }{{0, 0}, {50, 50}, {99, 99}, {0, 99}} {
			gap := startToStart + offset(s, pos.after) - offset(s, pos.before)
			if pos.before == pos.after {
				typicalMax = max(typicalMax, gap)
				if gap < interval*9/10 || gap > interval*11/10 {
					t.Errorf("jitter %v, same position %d: checked again after %v, want the interval ±10%%", r, pos.before, gap)
				}
			}
			worst = max(worst, gap)
		}
	}
	if bound := time.Duration((1 + relistJitter + spread) * float64(interval)); worst > bound {
		t.Errorf("worst gap %v, more than the stated bound %v", worst, bound)
	}
	t.Logf("interval %v, spread %v: checked again within %v with the same position, %v at worst", interval, spread, typicalMax, worst)
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
			if err := p.wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if took := time.Since(start); took > 10*time.Millisecond {
			t.Errorf("a pacer with no window or one request waited %v", took)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	p = newCyclePacer(2, time.Hour)
	if err := p.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(cancelled); err == nil {
		t.Error("waiting with a cancelled context did not fail")
	}
}

func TestCycleRequestsCountsEachReviewAndGETOnce(t *testing.T) {
	share := func(name, srcNS, src string) volume.ShareState {
		return volume.ShareState{Ref: share.Ref{Kind: share.KindSecret, Name: name}, SourceNamespace: srcNS, SourceName: src}
	}
	recs := []volume.Record{
		// Two volumes of one service account on one share: one review, one GET.
		{PodNamespace: "a", ServiceAccount: "sa", Refresh: true, Shares: []volume.ShareState{share("ca", "p", "ca")}},
		{PodNamespace: "a", ServiceAccount: "sa", Refresh: true, Shares: []volume.ShareState{share("ca", "p", "ca")}},
		// Another service account: one more review; the same source.
		{PodNamespace: "b", ServiceAccount: "sa", Refresh: true, Shares: []volume.ShareState{share("ca", "p", "ca")}},
		// refreshResource=false: a review, no GET.
		{PodNamespace: "c", ServiceAccount: "sa", Refresh: false, Shares: []volume.ShareState{share("key", "p", "key")}},
	}
	if got := cycleRequests(recs); got != 3+1 {
		t.Errorf("cycleRequests = %d, want 3 reviews + 1 GET", got)
	}
}
