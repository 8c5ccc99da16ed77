package main

// Specification of a share's states and their transitions: the tables at the top of judge.go,
// row by row. Every state meets every outcome in exactly one row.

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

var (
	allTold = []volume.Told{volume.ToldCurrent, volume.ToldReadForbidden, volume.ToldSourceReplaced, volume.ToldOverBudget,
		volume.ToldRevoked, volume.ToldShareReplaced, volume.ToldRegrantedReadForbidden, volume.ToldRegrantedSourceReplaced, volume.ToldRegrantedOverBudget}
	shownTold = allTold[:4]
	awayTold  = allTold[4:]
	// except is states less the ones named.
	except = func(from []volume.Told, not ...volume.Told) []volume.Told {
		var out []volume.Told
		for _, t := range from {
			if !slices.Contains(not, t) {
				out = append(out, t)
			}
		}
		return out
	}
)

func TestToldTransitions(t *testing.T) {
	same := volume.Told("(the same)")
	rows := []struct {
		row     string
		outcome outcome
		from    []volume.Told
		to      volume.Told // same: the state it was in
		tell    bool
	}{
		{"(2) denied, files shown: revoked, they leave", outcomeDenied, shownTold, volume.ToldRevoked, true},
		{"(2) denied, files away: revoked, untold", outcomeDenied, awayTold, volume.ToldRevoked, false},
		{"(3) share replaced, not told yet", outcomeShareReplaced, except(allTold, volume.ToldShareReplaced), volume.ToldShareReplaced, true},
		{"(3) share replaced, told", outcomeShareReplaced, []volume.Told{volume.ToldShareReplaced}, volume.ToldShareReplaced, false},
		{"(4) adopted while replaced: revoked, untold", outcomeAdopted, []volume.Told{volume.ToldShareReplaced}, volume.ToldRevoked, false},
		{"(4) adopted otherwise: as it was", outcomeAdopted, except(allTold, volume.ToldShareReplaced), same, false},
		{"(5) granted, files away: restored", outcomeGranted, awayTold, volume.ToldCurrent, true},
		{"(5) granted, files shown: as it is", outcomeGranted, shownTold, same, false},
		{"(7) read forbidden, shown", outcomeReadForbidden, except(shownTold, volume.ToldReadForbidden), volume.ToldReadForbidden, true},
		{"(7) read forbidden, shown, told", outcomeReadForbidden, []volume.Told{volume.ToldReadForbidden}, volume.ToldReadForbidden, false},
		{"(7) read forbidden, away", outcomeReadForbidden, except(awayTold, volume.ToldRegrantedReadForbidden), volume.ToldRegrantedReadForbidden, true},
		{"(7) read forbidden, away, told", outcomeReadForbidden, []volume.Told{volume.ToldRegrantedReadForbidden}, volume.ToldRegrantedReadForbidden, false},
		{"(8) source replaced, shown", outcomeSourceReplaced, except(shownTold, volume.ToldSourceReplaced), volume.ToldSourceReplaced, true},
		{"(8) source replaced, shown, told", outcomeSourceReplaced, []volume.Told{volume.ToldSourceReplaced}, volume.ToldSourceReplaced, false},
		{"(8) source replaced, away", outcomeSourceReplaced, except(awayTold, volume.ToldRegrantedSourceReplaced), volume.ToldRegrantedSourceReplaced, true},
		{"(8) source replaced, away, told", outcomeSourceReplaced, []volume.Told{volume.ToldRegrantedSourceReplaced}, volume.ToldRegrantedSourceReplaced, false},
		{"(9) current after read forbidden: resumed", outcomeCurrent, []volume.Told{volume.ToldReadForbidden}, volume.ToldCurrent, true},
		{"(9) current otherwise: untold", outcomeCurrent, except(allTold, volume.ToldReadForbidden), volume.ToldCurrent, false},
		{"(10) refreshed: always told", outcomeRefreshed, allTold, volume.ToldCurrent, true},
		{"(11) over budget, shown", outcomeOverBudget, except(shownTold, volume.ToldOverBudget), volume.ToldOverBudget, true},
		{"(11) over budget, shown, told", outcomeOverBudget, []volume.Told{volume.ToldOverBudget}, volume.ToldOverBudget, false},
		{"(11) over budget, away", outcomeOverBudget, except(awayTold, volume.ToldRegrantedOverBudget), volume.ToldRegrantedOverBudget, true},
		{"(11) over budget, away, told", outcomeOverBudget, []volume.Told{volume.ToldRegrantedOverBudget}, volume.ToldRegrantedOverBudget, false},
	}
	covered := map[outcome]map[volume.Told]string{}
	for _, r := range rows {
		if covered[r.outcome] == nil {
			covered[r.outcome] = map[volume.Told]string{}
		}
		for _, from := range r.from {
			t.Run(r.row+"/from "+string(from), func(t *testing.T) {
				if prev, dup := covered[r.outcome][from]; dup {
					t.Fatalf("also in row %q", prev)
				}
				covered[r.outcome][from] = r.row
				want := r.to
				if want == same {
					want = from
				}
				if to, tell := toldAfter(from, r.outcome); to != want || tell != r.tell {
					t.Fatalf("%q after %s: %q, told %v; want %q, told %v", from, r.outcome, to, tell, want, r.tell)
				}
			})
		}
	}
	for _, o := range []outcome{outcomeDenied, outcomeShareReplaced, outcomeAdopted, outcomeGranted, outcomeReadForbidden,
		outcomeSourceReplaced, outcomeCurrent, outcomeRefreshed, outcomeOverBudget} {
		for _, from := range allTold {
			if _, ok := covered[o][from]; !ok {
				t.Errorf("no row says what %q becomes after %s", from, o)
			}
		}
	}
}

func TestToldShownAndAway(t *testing.T) {
	for _, s := range allTold {
		if !s.Known() || s.Hidden() != slices.Contains(awayTold, s) {
			t.Errorf("%q: known %v, hidden %v; want known, hidden %v", s, s.Known(), s.Hidden(), slices.Contains(awayTold, s))
		}
	}
	if volume.Told("someNewerState").Known() {
		t.Error("an unknown state is known")
	}
}

// testdata/record-told-flags.json is a record as the release before told wrote it: share
// flags-NN holds the flags of NN's bits (1 revoked, 2 readForbidden, 4 overBudget,
// 8 sourceReplaced, 16 shareReplaced), every combination. Each resumes in the state its flags
// say, and whether the pod sees its files is what revoked said.
func TestRecordsWithTheFlagsResume(t *testing.T) {
	b, err := os.ReadFile("testdata/record-told-flags.json")
	if err != nil {
		t.Fatal(err)
	}
	// Read as the driver reads a record at start, from the volume's dir.
	s := volume.NewStore(t.TempDir(), &volume.Budget{})
	const id = "csi-0123456789abcdef"
	if err := os.MkdirAll(s.MountPoint(id), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.RecordPath(id), b, 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := s.ReadRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Shares) != 32 {
		t.Fatalf("%d shares, want 32", len(rec.Shares))
	}
	for m, st := range rec.Shares {
		revoked, forbidden, overBudget, sourceReplaced, shareReplaced := m&1 != 0, m&2 != 0, m&4 != 0, m&8 != 0, m&16 != 0
		var want volume.Told
		switch {
		case revoked && shareReplaced:
			want = volume.ToldShareReplaced
		case revoked && forbidden:
			want = volume.ToldRegrantedReadForbidden
		case revoked && sourceReplaced:
			want = volume.ToldRegrantedSourceReplaced
		case revoked && overBudget:
			want = volume.ToldRegrantedOverBudget
		case revoked:
			want = volume.ToldRevoked
		case forbidden: // told after overBudget or sourceReplaced, which a read clears it to judge
			want = volume.ToldReadForbidden
		case overBudget:
			want = volume.ToldOverBudget
		case sourceReplaced:
			want = volume.ToldSourceReplaced
		}
		if st.Told != want || st.Told.Hidden() != revoked || st.ResourceVersion != "7" || st.Bytes != 8192 || st.ShareUID != "uid-share" {
			t.Errorf("%s: state %q, version %q, bytes %d, share UID %q; want state %q (files away: %v), the other fields as written", st.Name, st.Told, st.ResourceVersion, st.Bytes, st.ShareUID, want, revoked)
		}
	}
}

// A record the driver writes names the state, and still says revoked: a driver rolled back to a
// release that knows only the flags shows the pod what it saw. A state this driver does not know
// (a newer driver's) is read from the flags.
func TestRecordsKeepRevokedForTheReleaseBefore(t *testing.T) {
	type flags struct {
		Told    string `json:"told"`
		Revoked bool   `json:"revoked"`
	}
	for _, s := range allTold {
		b, err := json.Marshal(volume.ShareState{Ref: share.Ref{Kind: share.KindSecret, Name: "s"}, Told: s})
		if err != nil {
			t.Fatal(err)
		}
		var old flags
		var back volume.ShareState
		if err := json.Unmarshal(b, &old); err != nil || json.Unmarshal(b, &back) != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if old.Told != string(s) || old.Revoked != s.Hidden() || back.Told != s {
			t.Errorf("%q written as %s: read back as %q; want told %q, revoked %v", s, b, back.Told, s, s.Hidden())
		}
	}
	var st volume.ShareState
	if err := json.Unmarshal([]byte(`{"kind":"Secret","name":"s","told":"someNewerState","revoked":true}`), &st); err != nil || st.Told != volume.ToldRevoked {
		t.Fatalf("an unknown state with revoked: %q (%v), want revoked", st.Told, err)
	}
}

// A share recorded with the flags goes on from where the pod was told: an upgrade tells the pod
// nothing it was already told, and what the flags promised (a refresh resumed, files restored)
// still comes.
func TestSharesRecordedWithTheFlagsGoOnFromWhatThePodWasTold(t *testing.T) {
	for _, c := range []struct {
		name     string
		flags    string // the share's flags, as the release before wrote them
		mayRead  bool
		change   changeKind
		state    volume.Told
		newFiles bool
	}{
		{"read still forbidden: not told again", `"revoked":false,"readForbidden":true`, false, "", volume.ToldReadForbidden, false},
		{"read back: resumed", `"revoked":false,"readForbidden":true`, true, changeRefreshResumed, volume.ToldCurrent, false},
		{"regranted, read still forbidden: not told again", `"revoked":true,"readForbidden":true`, false, "", volume.ToldRegrantedReadForbidden, false},
		{"regranted, read back: restored", `"revoked":true,"readForbidden":true`, true, changeRestored, volume.ToldCurrent, true},
		{"revoked, regranted and readable: restored", `"revoked":true`, true, changeRestored, volume.ToldCurrent, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newJudgeWorld(t)
			w.mayReadFile = c.mayRead
			var st volume.ShareState
			if err := json.Unmarshal([]byte(`{"kind":"Secret","name":"ca","sourceNamespace":"p","sourceName":"ca","resourceVersion":"7",`+c.flags+`}`), &st); err != nil {
				t.Fatal(err)
			}
			rec := volume.Record{VolumeID: "v", PodNamespace: "team", ServiceAccount: "app", Refresh: true, GID: -1, Shares: []volume.ShareState{st}}
			v := w.d.judgeShare(context.Background(), rec, 0, w.d.newCycleMemo())
			got := changeKind("")
			if v.change != nil {
				got = v.change.kind
			}
			if v.err != nil || got != c.change || v.state.Told != c.state || (v.files != nil) != c.newFiles {
				t.Fatalf("from %s: change %q, state %q, new files %v (err %v); want %q, %q, %v",
					c.flags, got, v.state.Told, v.files != nil, v.err, c.change, c.state, c.newFiles)
			}
		})
	}
}

// A record that says revoked keeps the files away whatever its told says: no combination of
// fields, written by any release, shows the pod files the flags hid.
func TestARecordSayingRevokedIsReadAsAway(t *testing.T) {
	for _, told := range []string{"current", "overBudget", "readForbidden", "sourceReplaced"} {
		var st volume.ShareState
		if err := json.Unmarshal([]byte(`{"kind":"Secret","name":"s","told":"`+told+`","revoked":true}`), &st); err != nil {
			t.Fatal(err)
		}
		if !st.Told.Hidden() {
			t.Errorf("told %q with revoked: read as %q, which shows the files", told, st.Told)
		}
	}
}
