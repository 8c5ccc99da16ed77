package main

// Specification of what the admin's commands may conclude from the driver's events: every state
// of a share meets every outcome of the relist (judge.go's toldAfter), and the event the relist
// records for the change, built by the relist's own verdicts and reported by its own
// reportChanges, leads shareapi.FilesAfter, the table diagnose and who-uses judge by, to the
// state's own answer: the share's files shown or away. A state, outcome or change kind added to
// the driver without its place in that table fails here.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/record"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/shareapi"
	"github.com/shared-resource/csi-driver/internal/volume"
)

var allOutcomes = []outcome{outcomeDenied, outcomeShareReplaced, outcomeAdopted, outcomeGranted, outcomeReadForbidden,
	outcomeSourceReplaced, outcomeCurrent, outcomeRefreshed, outcomeOverBudget}

// relistChanges is what the relist reports when a share in state st meets outcome o, built by
// the verdicts the relist itself builds for o (one per way it reports o).
func relistChanges(t *testing.T, d *driver, st volume.ShareState, o outcome) []*shareChange {
	t.Helper()
	sh := share.Spec{Kind: st.Kind, Name: st.Name, UID: "new-share-uid", SourceNamespace: "p", SourceName: "src"}
	rec := volume.Record{VolumeID: "csi-0123456789abcdef", PodNamespace: "team", PodName: "web", PodUID: "pod-uid", Refresh: true, Shares: []volume.ShareState{st}}
	switch o {
	case outcomeDenied:
		return []*shareChange{revokeShare(st, "denied").change}
	case outcomeShareReplaced:
		return []*shareChange{replacedShare(rec, st, sh).change}
	case outcomeAdopted:
		return nil // judgeShare never reports an adoption: TestVerdictsAgreeWithTheRelist checks it tells nothing
	case outcomeGranted:
		return []*shareChange{restoreShare(st).change}
	case outcomeReadForbidden:
		return []*shareChange{d.readForbidden(st, sh).change}
	case outcomeSourceReplaced:
		return []*shareChange{sourceReplaced(st, sh, "new-source-uid").change}
	case outcomeCurrent:
		return []*shareChange{currentShare(st, sh).change}
	case outcomeRefreshed:
		return []*shareChange{refreshedChange(st, sh, "7", true), refreshedChange(st, sh, "7", false)}
	case outcomeOverBudget:
		// A copy with more files than a volume holds, beside the others, and one the node's budget
		// refuses: both refused before anything is written, so no volume dir is needed.
		files := map[string]atomicwriter.File{"k": {Data: []byte("v"), Mode: 0o644}}
		tooMany, err := writeNewCopy(volume.Dir{}, st, 0, shareVerdict{state: st, files: files}, nil, maxVolumeEntries, 0)
		if err != nil {
			t.Fatal(err)
		}
		full := volume.NewRewrite(&volume.Budget{Limit: 1}, rec)
		defer full.Release()
		tooLarge, err := writeNewCopy(volume.Dir{}, st, 0, shareVerdict{state: st, files: files}, full, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return []*shareChange{tooMany.change, tooLarge.change}
	}
	t.Fatalf("no verdict of the relist builds outcome %q: add it here", o)
	return nil
}

// recordedReason is the reason of the event the relist's reportChanges records for c.
func recordedReason(t *testing.T, d *driver, c shareChange) string {
	t.Helper()
	events := make(chan string, 4)
	d.events = &record.FakeRecorder{Events: events}
	d.reportChanges(volume.Record{PodNamespace: "team", PodName: "web", PodUID: "pod-uid"}, []shareChange{c}, nil)
	select {
	case e := <-events:
		// "TYPE REASON MESSAGE"
		if f := strings.Fields(e); len(f) >= 2 {
			return f[1]
		}
		t.Fatalf("event %q", e)
	default:
		t.Fatalf("change %s recorded no event", c.kind)
	}
	return ""
}

func TestVerdictsAgreeWithTheRelist(t *testing.T) {
	d := newTestDriver(t, nil, nil)
	for _, from := range allTold {
		for _, o := range allOutcomes {
			next, tell := toldAfter(from, o)
			st := volume.ShareState{Ref: share.Ref{Kind: share.KindSecret, Name: "ca"}, SourceNamespace: "p", SourceName: "src", Told: from}
			changes := relistChanges(t, d, st, o)
			if !tell {
				for _, c := range changes {
					if c != nil {
						t.Errorf("%q after %s: toldAfter tells nothing, the relist's verdict reports %s", from, o, c.kind)
					}
				}
				// Untold, the pod's view must not change: the admin's commands see no event.
				// (9) is taken only while the share's files are shown (judgeSource): a share whose
				// files are away gets a new copy, (10), and is told.
				if unreachable := o == outcomeCurrent && from.Hidden(); next.Hidden() != from.Hidden() && !unreachable {
					t.Errorf("%q after %s: %q untold, but the files are %s before and %s after", from, o, next, shownOrAway(from), shownOrAway(next))
				}
				continue
			}
			if len(changes) == 0 {
				t.Errorf("%q after %s: toldAfter tells, the relist's verdict reports nothing", from, o)
			}
			for _, c := range changes {
				if c == nil {
					t.Errorf("%q after %s: toldAfter tells, the relist's verdict reports nothing", from, o)
					continue
				}
				reason := recordedReason(t, d, *c)
				files, ok := shareapi.FilesAfter(reason)
				var away bool
				switch files {
				case shareapi.FilesAway:
					away = true
				case shareapi.FilesAsBefore:
					away = from.Hidden()
				}
				if !ok || away != next.Hidden() {
					t.Errorf("%q after %s: the relist records %s, which the admin's table reads as files %s (known %v); the share's files are %s in %q",
						from, o, reason, map[bool]string{false: "shown", true: "away"}[away], ok, shownOrAway(next), next)
				}
			}
		}
	}
}

func shownOrAway(s volume.Told) string {
	if s.Hidden() {
		return "away"
	}
	return "shown"
}

// Every kind of change the relist reports records an event whose reason is in the admin's table.
func TestEveryChangeRecordsAReasonOfTheTable(t *testing.T) {
	d := newTestDriver(t, nil, nil)
	for _, kind := range declaredConstants(t, ".", "changeKind") {
		reason := recordedReason(t, d, shareChange{share: share.Ref{Kind: share.KindSecret, Name: "ca"}, kind: changeKind(kind), why: "why"})
		if _, ok := shareapi.FilesAfter(reason); !ok || !slices.Contains(shareapi.ShareEventReasons(), reason) {
			t.Errorf("change %s records %s, which is not in shareapi's table of the driver's events on a share", kind, reason)
		}
	}
}

// The states and outcomes the walks above go through are every one the driver declares.
func TestTheWalksCoverEveryStateAndOutcome(t *testing.T) {
	for _, c := range []struct {
		dir, typ string
		walked   []string
	}{{"internal/volume", "Told", toStrings(allTold)}, {".", "outcome", toStrings(allOutcomes)}} {
		typ, walked := c.typ, c.walked
		declared := declaredConstants(t, c.dir, typ)
		slices.Sort(declared)
		slices.Sort(walked)
		if !slices.Equal(declared, walked) {
			t.Errorf("%s: the driver declares %q, the walks go through %q", typ, declared, walked)
		}
	}
}

func toStrings[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// declaredConstants is the values of the constants of type typ the production files of the
// package in dir declare.
func declaredConstants(t *testing.T, dir, typ string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out = append(out, strings.Trim(lit.Value, "\""))
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no constant of type %s in %s", typ, dir)
	}
	return out
}
