// Package soak is the soak tier: a seeded workload of consumers, shares, grants and source updates
// on the three-node cluster, faults injected while it runs, and a checker that judges every read
// every consumer made against the history of sources, access and faults.
//
// This file is the checker: pure functions over a History (what the workload did, with times)
// and the readers' logs, specified by checker_test.go on synthetic histories. soak_test.go runs
// the workload and feeds it.
package soak

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Violation kinds, as the checker counts them.
const (
	// Torn: one read holds keys of two versions that no single swap explains (k1 and k2 of
	// different versions, k1 back to the older one), or a key whose checksum or name is not the
	// version's own.
	Torn = "torn"
	// MissingKey: a key missing between two reads of keys that were there (k1=old, k2=<no file>,
	// k1=new): the volume was briefly neither the old view nor the new one.
	MissingKey = "missing-key"
	// Regression: a version older than one the pod already read from that volume.
	Regression = "regression"
	// Stale: the pod still read a version older than the source's (or nothing while it had access),
	// longer than the bound after the source changed, fault windows not counted.
	Stale = "stale"
	// Unauthorized: the pod still read data of a share it may not use (grant removed or share
	// deleted), longer than the bound after, fault windows not counted.
	Unauthorized = "unauthorized"
	// BadStart: the pod's first read of a volume it had access to was empty or partial.
	BadStart = "bad-start"
	// Lost: a volume that had data showed none while access held all along and a fault was in
	// progress (the driver or the API server down must never empty a volume).
	Lost = "lost"
	// RefreshedAnyway: a volume with refreshResource "false" changed version without being
	// emptied in between (revocation and restore may bring the current version).
	RefreshedAnyway = "refreshed-despite-refresh-false"
	// Leftover: a mount, volume dir or record left on a node after every pod was gone.
	Leftover = "leftover"
	// Resources: a driver's RSS, goroutines or open fds beyond the margin over its warm-up value.
	Resources = "resources"
)

// Kinds lists every violation kind, in the order reports print them.
var Kinds = []string{Torn, MissingKey, Regression, Stale, Unauthorized, BadStart, Lost, RefreshedAnyway, Leftover, Resources}

// ReadKeys are the files a reader reads, in order, in every read: k1, k2, then k1 again, so a
// swap during the read shows as a clean step (old, old, new) and a hole as (old, missing, new).
var ReadKeys = []string{"k1", "k2", "k1"}

// SourceKeys are the keys every source holds; shares with spec.items expose k1 and k2 only.
var SourceKeys = []string{"k1", "k2", "k3"}

// VersionSum is the checksum of a whole version of a share's source: every key of the version
// carries it, so a reader can tell a torn set from a whole one.
func VersionSum(share string, n int) string {
	h := sha256.New()
	for _, k := range SourceKeys {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", share, k, versionBody(share, n, k))
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func versionBody(share string, n int, key string) string {
	return fmt.Sprintf("%s/%d/%s", share, n, key)
}

// VersionData is the source's data at version n: each key "v=N,s=SUM,k=KEY,b=BODY" and a newline
// (the reader's `read` wants one).
func VersionData(share string, n int) map[string][]byte {
	sum := VersionSum(share, n)
	out := map[string][]byte{}
	for _, k := range SourceKeys {
		out[k] = []byte(fmt.Sprintf("v=%d,s=%s,k=%s,b=%s\n", n, sum, k, versionBody(share, n, k)))
	}
	return out
}

// SourceVersion is one version of a share's source: written at At (when the update returned).
type SourceVersion struct {
	N  int
	At time.Time
}

// AccessChange is a change of a grant: from At on, pods of Namespace may (Allowed) or may not use Share: the grant in
// effect and the share existing.
type AccessChange struct {
	At      time.Time
	Allowed bool
}

// Fault is one injected fault: Node "" is the whole cluster (the API server and etcd). It lasts
// from Start until the cluster recovered from it (Recovered: the driver Ready again, the node
// Ready, the API server answering).
type Fault struct {
	Kind             string
	Node             string
	Start, Recovered time.Time
}

// History is what the workload did.
type History struct {
	Start, End time.Time
	Versions   map[string][]SourceVersion // share -> its source's versions, in order
	Access     map[string][]AccessChange  // "namespace/share" -> changes, in order
	Faults     []Fault
}

// AccessKey names a (namespace, share) pair in History.Access.
func AccessKey(ns, share string) string { return ns + "/" + share }

// Bounds are what the checker holds the driver to.
type Bounds struct {
	// Refresh: a source's new version (or data back after access returns) reaches every volume
	// within this, fault windows not counted.
	Refresh time.Duration
	// Revoke: a volume whose access ended is empty within this, fault windows not counted.
	Revoke time.Duration
	// Recovery: added after each fault's recovery before the clock runs again (the first relist
	// of a restarted driver).
	Recovery time.Duration
}

// Entry is one file as a reader saw it: missing, or a version's key.
type Entry struct {
	Missing bool
	N       int
	Sum     string
	Key     string
	Raw     string
}

// ParseEntry reads one logged file content ("-" is a missing file).
func ParseEntry(s string) Entry {
	if s == "-" || s == "" {
		return Entry{Missing: true, Raw: s}
	}
	e := Entry{Raw: s, N: -1}
	for _, f := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "v":
			if n, err := strconv.Atoi(v); err == nil {
				e.N = n
			}
		case "s":
			e.Sum = v
		case "k":
			e.Key = v
		}
	}
	return e
}

// Segment is a span of reads of one volume that all saw the same thing: from First (the read that
// first saw it) to Last (the last time the reader reported it still saw it), Reads of them.
type Segment struct {
	Entries     []Entry
	First, Last time.Time
	Reads       int
	startN      int // the reader's count at First
}

// Volume is one volume of one pod, as the pod's reader saw it.
type Volume struct {
	Name     string
	Share    string
	Refresh  bool
	Segments []Segment
}

// PodLog is one pod's reader log, parsed.
type PodLog struct {
	Namespace, Pod, Node string
	Volumes              []*Volume
	Reads                int // reads of all its volumes (each read: k1, k2, k1 of one volume)
	File                 string
}

// The reader's log (readerScript in soak_test.go writes it), one line each:
//
//	H <t> <namespace> <pod> <node> <vol>=<share>:<refresh> ...   the pod started reading
//	C <t> <vol> <n> <k1>|<k2>|<k1>                               what read n of vol saw, when it differs from read n-1
//	B <t> <n>                                                   heartbeat: n reads of each volume so far, all as last logged
//
// t is seconds since the epoch with microseconds (busybox sh's $EPOCHREALTIME). A line cut short
// by the pod's end is ignored.

// ParseLog reads one reader log.
func ParseLog(r io.Reader) (*PodLog, error) {
	p := &PodLog{}
	vols := map[string]*Volume{}
	var lastN int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		at, err := parseTime(f[1])
		if err != nil {
			continue // a torn last line
		}
		switch f[0] {
		case "H":
			if len(f) < 6 {
				return nil, fmt.Errorf("line %d: header %q: want namespace, pod, node and volumes", line, sc.Text())
			}
			p.Namespace, p.Pod, p.Node = f[2], f[3], f[4]
			for _, v := range f[5:] {
				name, spec, _ := strings.Cut(v, "=")
				share, refresh, _ := strings.Cut(spec, ":")
				vol := &Volume{Name: name, Share: share, Refresh: refresh != "false"}
				vols[name] = vol
				p.Volumes = append(p.Volumes, vol)
			}
		case "C":
			if len(f) != 5 {
				continue
			}
			vol := vols[f[2]]
			if vol == nil {
				return nil, fmt.Errorf("line %d: volume %q not in the header", line, f[2])
			}
			n, err := strconv.Atoi(f[3])
			if err != nil {
				continue
			}
			raw := strings.Split(f[4], "|")
			if len(raw) != len(ReadKeys) {
				continue
			}
			var es []Entry
			for _, s := range raw {
				es = append(es, ParseEntry(s))
			}
			if k := len(vol.Segments); k > 0 {
				prev := &vol.Segments[k-1]
				prev.Reads = n - prev.startN
			}
			vol.Segments = append(vol.Segments, Segment{Entries: es, First: at, Last: at, Reads: 1, startN: n})
			if n > lastN {
				lastN = n
			}
		case "B":
			n, err := strconv.Atoi(f[2])
			if err != nil {
				continue
			}
			for _, vol := range p.Volumes {
				if k := len(vol.Segments); k > 0 {
					vol.Segments[k-1].Last = at
				}
			}
			if n > lastN {
				lastN = n
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if p.Pod == "" {
		return nil, fmt.Errorf("no header line")
	}
	// Each volume's last segment lasts to the last read the reader reported.
	for _, vol := range p.Volumes {
		if k := len(vol.Segments); k > 0 {
			vol.Segments[k-1].Reads = lastN - vol.Segments[k-1].startN + 1
		}
		p.Reads += lastN
	}
	return p, nil
}

func parseTime(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	var us int64
	if frac != "" {
		for len(frac) < 6 {
			frac += "0"
		}
		if us, err = strconv.ParseInt(frac[:6], 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(secs, us*1000), nil
}

// Violation is one broken promise, with what shows it.
type Violation struct {
	Kind   string
	Pod    string // namespace/pod, or node for leftovers and resources
	Volume string
	At     time.Time
	Detail string
}

func (v Violation) String() string {
	at := ""
	if !v.At.IsZero() {
		at = v.At.UTC().Format("15:04:05.000000") + " "
	}
	return fmt.Sprintf("%s%s %s %s: %s", at, v.Kind, v.Pod, v.Volume, v.Detail)
}

// Report is what the checker found.
type Report struct {
	Pods, Volumes, Reads, Segments int
	Violations                     []Violation
}

// ByKind counts the violations of each kind (every kind present, zero or not).
func (r *Report) ByKind() map[string]int {
	out := map[string]int{}
	for _, k := range Kinds {
		out[k] = 0
	}
	for _, v := range r.Violations {
		out[v.Kind]++
	}
	return out
}

// Check judges every pod's reads against the history.
func Check(h *History, b Bounds, pods []*PodLog) *Report {
	r := &Report{}
	for _, p := range pods {
		r.Pods++
		r.Reads += p.Reads
		for _, v := range p.Volumes {
			r.Volumes++
			r.Segments += len(v.Segments)
			for _, viol := range checkVolume(h, b, p, v) {
				viol.Pod, viol.Volume = p.Namespace+"/"+p.Pod, v.Name+"("+v.Share+")"
				r.Violations = append(r.Violations, viol)
			}
		}
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At.Before(r.Violations[j].At) })
	return r
}

// readShape is what one read (k1, k2, k1) says.
type readShape struct {
	empty      bool // every file missing
	hole       bool // a missing file between two present ones
	torn       string
	latest     int // the version of the last present file (-1: none)
	allPresent bool
}

func shapeOf(h *History, share string, es []Entry) readShape {
	s := readShape{latest: -1, allPresent: true}
	present := 0
	seenPresent, seenMissingAfter := false, false
	prevN := -1
	for i, e := range es {
		if e.Missing {
			s.allPresent = false
			if seenPresent {
				seenMissingAfter = true
			}
			continue
		}
		present++
		if seenMissingAfter {
			s.hole = true
		}
		seenPresent = true
		if e.Key != ReadKeys[i] {
			s.torn = fmt.Sprintf("file %s holds key %q", ReadKeys[i], e.Key)
		} else if e.N < 0 || e.Sum != VersionSum(share, e.N) {
			s.torn = fmt.Sprintf("file %s: %q is no whole version of %s", ReadKeys[i], e.Raw, share)
		} else if !knownVersion(h, share, e.N) {
			s.torn = fmt.Sprintf("file %s: version %d was never written", ReadKeys[i], e.N)
		} else if prevN >= 0 && e.N < prevN {
			s.torn = fmt.Sprintf("versions %s in one read", versionsOf(es))
		}
		if e.N > prevN {
			prevN = e.N
		}
		s.latest = e.N
	}
	// k1 and k2 of different versions while k1 read again is still the older one: not one swap.
	if s.torn == "" && len(es) == 3 && !es[0].Missing && !es[1].Missing && !es[2].Missing && es[0].N == es[2].N && es[1].N != es[0].N {
		s.torn = fmt.Sprintf("versions %s in one read", versionsOf(es))
	}
	s.empty = present == 0
	return s
}

func versionsOf(es []Entry) string {
	var parts []string
	for _, e := range es {
		if e.Missing {
			parts = append(parts, "-")
		} else {
			parts = append(parts, strconv.Itoa(e.N))
		}
	}
	return strings.Join(parts, ",")
}

func knownVersion(h *History, share string, n int) bool {
	for _, v := range h.Versions[share] {
		if v.N == n {
			return true
		}
	}
	return false
}

// movedPast is when the share's source first got a version newer than n (zero: never).
func movedPast(h *History, share string, n int) time.Time {
	for _, v := range h.Versions[share] {
		if v.N > n {
			return v.At
		}
	}
	return time.Time{}
}

// accessAt says whether access held at t and since when it has been so (History.Start when it
// never changed).
func accessAt(h *History, key string, t time.Time) (allowed bool, since time.Time) {
	since = h.Start
	for _, c := range h.Access[key] {
		if c.At.After(t) {
			break
		}
		if c.Allowed != allowed || since.IsZero() {
			allowed, since = c.Allowed, c.At
		}
	}
	return allowed, since
}

// effective is how much of [from, to] lies outside every fault window that touches node (a
// window: the fault's start to its recovery plus b.Recovery).
func effective(h *History, b Bounds, node string, from, to time.Time) time.Duration {
	if !to.After(from) {
		return 0
	}
	type span struct{ a, z time.Time }
	var ws []span
	for _, f := range h.Faults {
		if f.Node != "" && f.Node != node {
			continue
		}
		a, z := f.Start, f.Recovered.Add(b.Recovery)
		if z.Before(from) || a.After(to) {
			continue
		}
		if a.Before(from) {
			a = from
		}
		if z.After(to) {
			z = to
		}
		ws = append(ws, span{a, z})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].a.Before(ws[j].a) })
	total := to.Sub(from)
	cur := from
	for _, w := range ws {
		if w.z.Before(cur) || w.z.Equal(cur) {
			continue
		}
		if w.a.Before(cur) {
			w.a = cur
		}
		total -= w.z.Sub(w.a)
		cur = w.z
	}
	return total
}

// inFault says whether a fault touching node was in progress (start to recovery) at some time in
// [from, to].
func inFault(h *History, node string, from, to time.Time) string {
	for _, f := range h.Faults {
		if (f.Node == "" || f.Node == node) && !f.Start.After(to) && !f.Recovered.Before(from) {
			return f.Kind
		}
	}
	return ""
}

func checkVolume(h *History, b Bounds, p *PodLog, v *Volume) []Violation {
	var out []Violation
	key := AccessKey(p.Namespace, v.Share)
	maxSeen := -1
	hadData := false
	lastRefreshFalse := -1 // refreshResource false: the version it holds, until emptied
	for i, seg := range v.Segments {
		s := shapeOf(h, v.Share, seg.Entries)
		add := func(kind, detail string, at time.Time) {
			out = append(out, Violation{Kind: kind, At: at, Detail: detail})
		}
		if s.torn != "" {
			add(Torn, s.torn, seg.First)
		}
		if s.hole {
			add(MissingKey, fmt.Sprintf("read %s: a file missing between present ones", versionsOf(seg.Entries)), seg.First)
		}
		if i == 0 && !s.allPresent {
			// A pod starts only after its volume was published whole; access revoked in the
			// moment before its first read would excuse an empty one.
			if allowed, since := accessAt(h, key, seg.First); allowed && seg.First.Sub(since) > b.Revoke {
				add(BadStart, fmt.Sprintf("first read %s", versionsOf(seg.Entries)), seg.First)
			}
		}
		if s.latest >= 0 {
			regressed := s.latest < maxSeen
			if regressed {
				add(Regression, fmt.Sprintf("version %d after %d", s.latest, maxSeen), seg.First)
			}
			if s.latest > maxSeen {
				maxSeen = s.latest
			}
			if !v.Refresh {
				if lastRefreshFalse >= 0 && s.latest != lastRefreshFalse {
					add(RefreshedAnyway, fmt.Sprintf("version %d after %d without being emptied", s.latest, lastRefreshFalse), seg.First)
				}
				lastRefreshFalse = s.latest
			}
			// Stale: the source moved past this version, and the segment lasted longer than the
			// bound after that (fault windows not counted). Only while access held: without
			// access the data should not be there at all (Unauthorized).
			// (A regression is counted once, as such.)
			if moved := movedPast(h, v.Share, s.latest); v.Refresh && !regressed && !moved.IsZero() {
				from := moved
				if allowed, since := accessAt(h, key, seg.Last); allowed {
					if since.After(from) {
						from = since // access came back after the change: the clock starts there
					}
					if d := effective(h, b, p.Node, from, seg.Last); d > b.Refresh {
						add(Stale, fmt.Sprintf("version %d read at %s, %v (fault windows not counted) after the source moved past it at %s",
							s.latest, seg.Last.UTC().Format("15:04:05.000"), d.Round(time.Millisecond), moved.UTC().Format("15:04:05.000")), seg.Last)
					}
				}
			}
			// Unauthorized: data read while access had ended longer than the bound ago.
			if allowed, since := accessAt(h, key, seg.Last); !allowed {
				if d := effective(h, b, p.Node, since, seg.Last); d > b.Revoke {
					add(Unauthorized, fmt.Sprintf("version %d read at %s, %v (fault windows not counted) after access ended at %s",
						s.latest, seg.Last.UTC().Format("15:04:05.000"), d.Round(time.Millisecond), since.UTC().Format("15:04:05.000")), seg.Last)
				}
			}
			hadData = true
		}
		if s.empty {
			lastRefreshFalse = -1
			if i > 0 && hadData {
				// Nothing read though access held: after a fault it is a loss, otherwise the
				// data did not come back in time.
				if allowed, since := accessAt(h, key, seg.First); allowed {
					if fk := inFault(h, p.Node, seg.First, seg.Last); fk != "" && seg.First.Sub(since) > b.Revoke {
						add(Lost, fmt.Sprintf("empty from %s to %s while access held since %s, during %s",
							seg.First.UTC().Format("15:04:05.000"), seg.Last.UTC().Format("15:04:05.000"), since.UTC().Format("15:04:05.000"), fk), seg.First)
					} else if d := effective(h, b, p.Node, since, seg.Last); d > b.Refresh {
						add(Stale, fmt.Sprintf("empty at %s, %v (fault windows not counted) after access held from %s",
							seg.Last.UTC().Format("15:04:05.000"), d.Round(time.Millisecond), since.UTC().Format("15:04:05.000")), seg.Last)
					}
				}
			}
		}
	}
	return out
}

// Sample is one scrape of a driver's process figures.
type Sample struct {
	At                  time.Time
	RSS, Goroutines, FD float64
}

// Margins are how far a driver's figures may end above their post-warm-up values.
type Margins struct {
	RSSFactor  float64 // end RSS <= warm * factor + RSSBytes
	RSSBytes   float64
	Goroutines float64 // end <= warm + this
	FDs        float64 // end <= warm + this
}

// CheckResources compares each node's last sample with its warm-up sample.
func CheckResources(warm, end map[string]Sample, m Margins) []Violation {
	var out []Violation
	var nodes []string
	for n := range warm {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		w, ok := warm[n]
		e, ok2 := end[n]
		if !ok || !ok2 {
			continue
		}
		if lim := w.RSS*m.RSSFactor + m.RSSBytes; e.RSS > lim {
			out = append(out, Violation{Kind: Resources, Pod: n, At: e.At, Detail: fmt.Sprintf("RSS %.1f MiB, after warm-up %.1f MiB (limit %.1f MiB)", e.RSS/(1<<20), w.RSS/(1<<20), lim/(1<<20))})
		}
		if e.Goroutines > w.Goroutines+m.Goroutines {
			out = append(out, Violation{Kind: Resources, Pod: n, At: e.At, Detail: fmt.Sprintf("%.0f goroutines, after warm-up %.0f (margin %.0f)", e.Goroutines, w.Goroutines, m.Goroutines)})
		}
		if e.FD > w.FD+m.FDs {
			out = append(out, Violation{Kind: Resources, Pod: n, At: e.At, Detail: fmt.Sprintf("%.0f open fds, after warm-up %.0f (margin %.0f)", e.FD, w.FD, m.FDs)})
		}
	}
	return out
}
