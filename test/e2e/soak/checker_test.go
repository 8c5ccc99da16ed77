package soak

// The checker on synthetic histories: each kind of violation is detected, and what a correct
// driver does (a swap in the middle of a read, a revocation emptying a volume, a refresh delayed
// by a fault) is not one. No cluster: `go -C test test -run TestChecker ./e2e/soak`.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func ts(s float64) string {
	t := at(s)
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}

// entry is the logged content of key k of share's version n ("-": missing).
func entry(share string, n int, k string) string {
	if n < 0 {
		return "-"
	}
	return strings.TrimSuffix(string(VersionData(share, n)[k]), "\n")
}

// read is the logged read of k1, k2, k1 at versions a, b, c (-1: missing).
func read(share string, a, b, c int) string {
	return entry(share, a, "k1") + "|" + entry(share, b, "k2") + "|" + entry(share, c, "k1")
}

const share = "s1"

// baseHistory: share s1 at version 1 from 0 s, 2 from 20 s, 3 from 40 s; namespace ns may use it
// from -100 s on.
func baseHistory() *History {
	return &History{
		Start: at(-100), End: at(100),
		Versions: map[string][]SourceVersion{share: {{N: 1, At: at(-100)}, {N: 2, At: at(20)}, {N: 3, At: at(40)}}},
		Access:   map[string][]AccessChange{AccessKey("ns", share): {{At: at(-100), Allowed: true}}},
	}
}

var bounds = Bounds{Refresh: 8 * time.Second, Revoke: 8 * time.Second, Recovery: 8 * time.Second}

// podLog is a reader log of pod p on node n1 reading share s1 (refresh: refresh) with lines.
func podLog(t *testing.T, refresh string, lines ...string) *PodLog {
	t.Helper()
	text := "H " + ts(0) + " ns p n1 a=" + share + ":" + refresh + "\n" + strings.Join(lines, "\n") + "\n"
	p, err := ParseLog(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func kinds(r *Report) map[string]int {
	out := map[string]int{}
	for k, n := range r.ByKind() {
		if n > 0 {
			out[k] = n
		}
	}
	return out
}

func wantOnly(t *testing.T, r *Report, want map[string]int) {
	t.Helper()
	got := kinds(r)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("violations %v, want %v:\n%v", got, want, r.Violations)
	}
}

// A correct history: the pod reads 1, then 2 a second after the source changed (the swap falls
// between k1 and k2 of one read), then 3, heartbeats in between.
func correctLines() []string {
	return []string{
		"C " + ts(1) + " a 1 " + read(share, 1, 1, 1),
		"B " + ts(10) + " 5000",
		"C " + ts(21) + " a 10000 " + read(share, 1, 2, 2),
		"C " + ts(21) + " a 10001 " + read(share, 2, 2, 2),
		"B " + ts(30) + " 15000",
		"C " + ts(42) + " a 20000 " + read(share, 2, 2, 3),
		"C " + ts(42) + " a 20001 " + read(share, 3, 3, 3),
		"B " + ts(60) + " 30000",
	}
}

func TestCheckerPassesACorrectHistory(t *testing.T) {
	r := Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", correctLines()...)})
	wantOnly(t, r, map[string]int{})
	if r.Reads != 30000 || r.Segments != 5 {
		t.Errorf("reads %d segments %d, want 30000 and 5", r.Reads, r.Segments)
	}
}

func TestCheckerFindsATornRead(t *testing.T) {
	lines := correctLines()
	// k1 of version 2 with k2 of version 1, and k1 still 2: two versions side by side.
	lines[2] = "C " + ts(21) + " a 10000 " + read(share, 2, 1, 2)
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Torn: 1})

	// k1 and k2 of different versions while k1 read again is still the old one.
	lines = correctLines()
	lines[2] = "C " + ts(21) + " a 10000 " + read(share, 1, 2, 1)
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Torn: 1})

	// A key whose checksum is not its version's.
	lines = correctLines()
	bad := strings.Replace(entry(share, 2, "k2"), VersionSum(share, 2), VersionSum(share, 1), 1)
	lines[3] = "C " + ts(21) + " a 10001 " + entry(share, 2, "k1") + "|" + bad + "|" + entry(share, 2, "k1")
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Torn: 1})
}

func TestCheckerFindsAMissingKey(t *testing.T) {
	lines := correctLines()
	// k1=old, k2=<no file>, k1=new: the old payload gone before the read reached it.
	lines[2] = "C " + ts(21) + " a 10000 " + read(share, 1, -1, 2)
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{MissingKey: 1})
}

func TestCheckerFindsARegression(t *testing.T) {
	lines := correctLines()
	lines = append(lines[:7], "C "+ts(50)+" a 25000 "+read(share, 2, 2, 2), "B "+ts(51)+" 26000")
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Regression: 1})
}

func TestCheckerFindsAStaleVersionUnlessAFaultExcusesIt(t *testing.T) {
	// Version 1 still read 15 s after the source moved to 2.
	lines := []string{
		"C " + ts(1) + " a 1 " + read(share, 1, 1, 1),
		"B " + ts(35) + " 5000",
		"C " + ts(36) + " a 5001 " + read(share, 2, 2, 2),
		"B " + ts(39) + " 6000",
	}
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Stale: 1})

	// The driver on the pod's node was down from 18 s to 25 s: 25 + 8 (recovery) = 33, and 33 to
	// 35 plus 18 to 20 is not beyond the bound.
	h := baseHistory()
	h.Faults = []Fault{{Kind: "driver-sigkill", Node: "n1", Start: at(18), Recovered: at(25)}}
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{})
	// A fault on another node excuses nothing.
	h.Faults[0].Node = "n2"
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Stale: 1})
	// The API server down excuses every node.
	h.Faults[0].Node = ""
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{})

	// refreshResource "false": keeping version 1 is the point; changing is the violation.
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "false", lines[:2]...)}), map[string]int{})
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "false", lines...)}), map[string]int{RefreshedAnyway: 1})
}

func TestCheckerFindsDataPastTheRevocation(t *testing.T) {
	h := baseHistory()
	h.Access[AccessKey("ns", share)] = append(h.Access[AccessKey("ns", share)], AccessChange{At: at(10), Allowed: false}, AccessChange{At: at(30), Allowed: true})
	// Emptied 3 s after the revocation, back 2 s after the grant: correct.
	good := []string{
		"C " + ts(1) + " a 1 " + read(share, 1, 1, 1),
		"C " + ts(13) + " a 5000 " + read(share, 1, -1, -1),
		"C " + ts(13) + " a 5001 " + read(share, -1, -1, -1),
		"C " + ts(32) + " a 9000 " + read(share, -1, 2, 2),
		"C " + ts(32) + " a 9001 " + read(share, 2, 2, 2),
		"B " + ts(38) + " 12000",
	}
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", good...)}), map[string]int{})
	// Still reading version 1 at 25 s, 15 s after the revocation.
	bad := []string{
		"C " + ts(1) + " a 1 " + read(share, 1, 1, 1),
		"B " + ts(25) + " 5000",
		"C " + ts(26) + " a 5001 " + read(share, -1, -1, -1),
		"C " + ts(32) + " a 9000 " + read(share, 2, 2, 2),
		"B " + ts(38) + " 12000",
	}
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", bad...)}), map[string]int{Unauthorized: 1})
	// With the driver down meanwhile (recovered at 20 s) it is not a violation: the driver was
	// not there to revoke.
	h.Faults = []Fault{{Kind: "driver-sigkill", Node: "n1", Start: at(11), Recovered: at(20)}}
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", bad...)}), map[string]int{})
}

func TestCheckerFindsABadStartAndLostData(t *testing.T) {
	lines := []string{
		"C " + ts(1) + " a 1 " + read(share, -1, 1, 1),
		"B " + ts(10) + " 5000",
	}
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{BadStart: 1})

	// Emptied while the API server was down, access held all along.
	h := baseHistory()
	h.Faults = []Fault{{Kind: "apiserver-restart", Start: at(5), Recovered: at(9)}}
	lines = []string{
		"C " + ts(1) + " a 1 " + read(share, 1, 1, 1),
		"C " + ts(6) + " a 3000 " + read(share, -1, -1, -1),
		"C " + ts(12) + " a 6000 " + read(share, 1, 1, 1),
		"B " + ts(15) + " 8000",
	}
	wantOnly(t, Check(h, bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Lost: 1})
	// Without a fault, nothing for that long is stale.
	lines[2] = "C " + ts(19) + " a 6000 " + read(share, 1, 1, 1)
	lines[3] = "B " + ts(19) + " 8000"
	wantOnly(t, Check(baseHistory(), bounds, []*PodLog{podLog(t, "true", lines...)}), map[string]int{Stale: 1})
}

func TestCheckerParsesHeartbeatsAndCountsReads(t *testing.T) {
	text := "H " + ts(0) + " ns p n1 a=s1:true b=s2:false\n" +
		"C " + ts(1) + " a 1 " + read("s1", 1, 1, 1) + "\n" +
		"C " + ts(1) + " b 1 " + read("s2", 1, 1, 1) + "\n" +
		"B " + ts(2) + " 100\n" +
		"C " + ts(3) + " a 150 " + read("s1", 2, 2, 2) + "\n" +
		"B " + ts(4) + " 200\n" +
		"C 18000" // cut short by the pod's end
	p, err := ParseLog(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if p.Reads != 400 || len(p.Volumes) != 2 || p.Volumes[1].Refresh || !p.Volumes[0].Refresh {
		t.Fatalf("parsed %+v", p)
	}
	a := p.Volumes[0].Segments
	if len(a) != 2 || a[0].Reads != 149 || a[1].Reads != 51 || !a[0].Last.Equal(at(2)) || !a[1].Last.Equal(at(4)) {
		t.Errorf("segments of a: %+v", a)
	}
	if b := p.Volumes[1].Segments; len(b) != 1 || b[0].Reads != 200 || !b[0].Last.Equal(at(4)) {
		t.Errorf("segments of b: %+v", b)
	}
}

func TestCheckerResources(t *testing.T) {
	m := Margins{RSSFactor: 1.5, RSSBytes: 16 << 20, Goroutines: 20, FDs: 10}
	warm := map[string]Sample{"n1": {RSS: 40 << 20, Goroutines: 50, FD: 20}}
	if v := CheckResources(warm, map[string]Sample{"n1": {RSS: 70 << 20, Goroutines: 60, FD: 25}}, m); len(v) != 0 {
		t.Errorf("within the margins: %v", v)
	}
	if v := CheckResources(warm, map[string]Sample{"n1": {RSS: 90 << 20, Goroutines: 200, FD: 100}}, m); len(v) != 3 {
		t.Errorf("beyond every margin: %v", v)
	}
}
