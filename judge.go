package main

// Judging one share of a volume (step (1) of a reconcile, reconcile.go): what it should show now,
// from the share, the pod's access and the source. Nothing here writes anything.
//
// Each share of a volume is in one state (volume.ShareState.Told): what the pod was last told of it,
// and with it whether the pod sees the share's files: the first four states show files (shown),
// the other five keep the share's files away (away).
//
//	state                    the pod sees       the pod was told
//	current                  the share's files  nothing outstanding (published, refreshed, restored)
//	readForbidden            its last files     the driver may not read the source
//	sourceReplaced           its last files     the source is another object than the one pinned
//	overBudget               its last files     the new files do not fit (on the node, or in the volume)
//	revoked                  none               it may not use the share, or the share was deleted
//	shareReplaced            none               the share's name holds another object now
//	regrantedReadForbidden   none               it may use the share again, but the driver may not read the source
//	regrantedSourceReplaced  none               it may use the share again, but the source is another object
//	regrantedOverBudget      none               it may use the share again, but its files do not fit
//
// A reconcile judges each share, from what the API server says now, to an outcome (the first row
// that applies); the outcome moves the share to its next state (toldAfter). The pod is told (an
// event) when the outcome leads to a state the share is not in, and not again while it stays
// there; the exceptions say so.
//
//	     what the API server says                     outcome          from          to
//	(1)  any API error (share, review or source)      (an error)       any           as it is; retried next cycle
//	(2)  the share deleted, or the pod's access       denied           shown         revoked: its files leave the view
//	     denied                                                        away          revoked, untold: its files are away already
//	(3)  another object under the share's name, over  shareReplaced    shown         shareReplaced: its files leave the view
//	     another source object, or one that cannot                     away          shareReplaced
//	     be read (the volume's object is gone all the
//	     same), or listing a key the volume's did not
//	     (shareidentity.go)
//	(4)  another object under its name over the same  adopted          any           judged by (2), (5)-(11); a share
//	     source object, listing no key the volume's                                  still shareReplaced then is revoked, untold
//	     did not: the volume's object now
//	(5)  access granted; the volume does not refresh  granted          away          current: the copy kept comes back (restored)
//	                                                                   shown         as it is
//	(6)  access granted; the source not found         (as it is)       any           as it is: the last files stay, as kubelet
//	                                                                                 secret volumes do
//	(7)  access granted; the driver may not read the  readForbidden    shown         readForbidden: the last files stay
//	     source                                                        away          regrantedReadForbidden
//	(8)  access granted; the source is another object sourceReplaced   shown         sourceReplaced: the last files stay
//	     (re-created) than the pin                                     away          regrantedSourceReplaced
//	     (internal/share/pin.go; while the share has
//	     no pin, the volume's recorded source is its
//	     pin)
//	(9)  access granted; the source at the version    current          shown         current; told (refreshResumed) from
//	     and through the list the volume shows                                       readForbidden only
//	(10) access granted; anything else: a new copy    refreshed        any           current; always told (refreshed,
//	                                                                                 keysChanged, or restored from away)
//	(11) as (10), but the new copy does not fit in    overBudget       shown         overBudget: the last files stay
//	     the node's volume budget (internal/volume)                 away          regrantedOverBudget
//	     or in the volume (maxVolumeEntries); known
//	     only when it is written (reconcile.go's
//	     writeNewCopy)
//
// When the share's list of keys (spec.items, internal/share/exposure.go) is not the one the volume shows, the
// share is refreshed from the source ((10), keysChanged: it gains and loses keys in one swap).
// Where it cannot be (refreshResource=false, the source lacks a listed key, the pod's items
// select a key no longer shared, the source cannot be read or was re-created and the pin refuses
// it, the review of the pod's access failed, the new copy does not fit), the verdict goes
// through the one narrowing step (narrowed): the share's copy keeps only the files the new list
// still shares, and gains none, whatever the row says of its state (judge_narrow_test.go). Keys
// that stopped being shared never stay: no error or setting keeps them. (Only a share that
// cannot be read itself has no list to narrow to; it stays as it was until it can be.)
//
// An outage must never revoke access: only an answer does.

import (
	"cmp"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// shareVerdict is what a reconcile decided for one share.
type shareVerdict struct {
	state  volume.ShareState            // the share's next state, saved with the record
	files  map[string]atomicwriter.File // its new copy; nil: the copy stays as it is
	change *shareChange                 // what to report; nil: the share is as it was
	err    error                        // the share could not be judged: it stays as it was
}

// outcome is what the judge of a share found (the second table at the top of this file).
type outcome string

const (
	outcomeDenied         outcome = "denied"         // (2)
	outcomeShareReplaced  outcome = "shareReplaced"  // (3)
	outcomeAdopted        outcome = "adopted"        // (4)
	outcomeGranted        outcome = "granted"        // (5)
	outcomeReadForbidden  outcome = "readForbidden"  // (7)
	outcomeSourceReplaced outcome = "sourceReplaced" // (8)
	outcomeCurrent        outcome = "current"        // (9)
	outcomeRefreshed      outcome = "refreshed"      // (10)
	outcomeOverBudget     outcome = "overBudget"     // (11)
)

// toldAfter is the state a share in state t moves to on outcome o, and whether the pod is told.
func toldAfter(t volume.Told, o outcome) (next volume.Told, tell bool) {
	switch o {
	case outcomeDenied:
		return volume.ToldRevoked, !t.Hidden()
	case outcomeShareReplaced:
		next = volume.ToldShareReplaced
	case outcomeAdopted:
		if t == volume.ToldShareReplaced {
			return volume.ToldRevoked, false
		}
		return t, false
	case outcomeGranted:
		next = t
		if t.Hidden() {
			next = volume.ToldCurrent
		}
	case outcomeReadForbidden:
		next = keeping(t, volume.ToldReadForbidden, volume.ToldRegrantedReadForbidden)
	case outcomeSourceReplaced:
		next = keeping(t, volume.ToldSourceReplaced, volume.ToldRegrantedSourceReplaced)
	case outcomeOverBudget:
		next = keeping(t, volume.ToldOverBudget, volume.ToldRegrantedOverBudget)
	case outcomeCurrent:
		return volume.ToldCurrent, t == volume.ToldReadForbidden
	case outcomeRefreshed:
		return volume.ToldCurrent, true
	default:
		return t, false
	}
	return next, next != t
}

// keeping is the state a share in t moves to when its last files stay for a reason: shown, the
// reason's state; away, its regranted form (the files stay away).
func keeping(t volume.Told, shown, away volume.Told) volume.Told {
	if t.Hidden() {
		return away
	}
	return shown
}

// judgeShare decides what share i of rec shows now (the tables at the top of this file). It
// changes nothing, on disk or in rec.
func (d *driver) judgeShare(ctx context.Context, rec volume.Record, i int, memo *cycleMemo) shareVerdict {
	st := rec.Shares[i]
	if sh, err := memo.share(ctx, st.Ref); err == nil {
		if !shareIdentity(ctx, st, sh, memo) {
			return replacedShare(rec, st, sh)
		}
		v := d.judgeShareObject(ctx, rec, i, memo)
		if v.err == nil && sh.UID != "" && v.state.ShareUID != sh.UID {
			// This object (or one standing in for it over the same source) is the volume's now (4).
			v.state.ShareUID = sh.UID
			v.state.Told, _ = toldAfter(v.state.Told, outcomeAdopted)
		}
		return v
	}
	return d.judgeShareObject(ctx, rec, i, memo)
}

// judgeShareObject is judgeShare's verdict on a share that is the object the volume was
// published from, or is gone.
func (d *driver) judgeShareObject(ctx context.Context, rec volume.Record, i int, memo *cycleMemo) shareVerdict {
	st := rec.Shares[i] // a copy: the next state is built on it
	sh, denied, err := d.judgeAccess(ctx, rec, i, memo)
	switch {
	case err != nil && shareRead(ctx, memo, st.Ref):
		// The share was read, the review failed: access is judged next cycle, but the share's
		// list is known now, and what it no longer shares goes now.
		return d.narrowed(rec, i, sh.Exposed, shareVerdict{state: st, err: err})
	case err != nil:
		return shareVerdict{state: st, err: err}
	case denied != "":
		v := revokeShare(st, denied)
		if !rec.Refresh && sh.Name != "" {
			// A revoked refreshResource=false share keeps its copy for when access comes back;
			// what the share no longer exposes leaves it now. (A deleted share has no list.)
			return d.narrowed(rec, i, sh.Exposed, v)
		}
		return v
	case !rec.Refresh:
		// refreshResource=false: the files published are the files shown, on every path; only
		// access decides whether they are visible, and the share's list which of them may stay.
		return d.narrowed(rec, i, sh.Exposed, restoreShare(st))
	}
	return d.judgeSource(ctx, rec, i, sh, memo)
}

// judgeAccess says whether the pod may still see share i of rec: denied is why not ("" when it
// may), and sh is the share as it is now.
func (d *driver) judgeAccess(ctx context.Context, rec volume.Record, i int, memo *cycleMemo) (sh share.Spec, denied string, err error) {
	ref := rec.Shares[i].Ref
	sh, err = memo.share(ctx, ref)
	if apierrors.IsNotFound(err) {
		return sh, ref.Kind.TypeName() + " " + quote(ref.Name) + " was deleted", nil
	}
	if err != nil {
		return sh, "", err
	}
	key := accessKeyOf(rec, i)
	dec, err := memo.decision(ctx, key)
	if err != nil || dec.Allowed {
		return sh, "", err
	}
	return sh, deniedMessage(key, dec.Reason), nil
}

// judgeSource is the verdict on share i of a refreshing volume the pod may see, from its source.
func (d *driver) judgeSource(ctx context.Context, rec volume.Record, i int, sh share.Spec, memo *cycleMemo) shareVerdict {
	st := rec.Shares[i]
	src, err := memo.source(ctx, sh)
	switch {
	case apierrors.IsNotFound(err):
		// (6) The source was deleted (or the share now points at a missing object). The share keeps
		// its last good files, as the kubelet's own secret volumes do: deleting and re-creating a
		// Secret during a rotation must not blank every consumer. Revocation is RBAC's job.
		klog.V(2).InfoS("Source of a share not found; keeping its last files", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		return d.narrowed(rec, i, sh.Exposed, shareVerdict{state: st})
	case apierrors.IsForbidden(err):
		// (7) The driver itself lost read on the source (an admin removed its RoleBinding). That
		// is not the pod's access, which was just granted: the share keeps its last files, as
		// on any API error, and the pod is warned once with what the admin must run.
		klog.V(2).InfoS("The driver may not read the source of a share; keeping its last files", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		return d.narrowed(rec, i, sh.Exposed, d.readForbidden(st, sh))
	case err != nil:
		// The list is the share's, not the source's: what it no longer shares goes now.
		return d.narrowed(rec, i, sh.Exposed, shareVerdict{state: st, err: err})
	}

	sameSource := st.SourceNamespace == sh.SourceNamespace && st.SourceName == sh.SourceName
	if sameSource {
		// The object the volume's files came from pins it while the share has no pin.
		sh.Pin = sh.Pin.OrRecorded(st.SourceUID)
	}
	if sh.Pin.Refuses(src.UID) {
		// (8) The new object is not shown; the keys the share stopped listing go all the same.
		return d.narrowed(rec, i, sh.Exposed, sourceReplaced(st, sh, src.UID))
	}
	st.SourceUID = cmp.Or(st.SourceUID, src.UID) // a record from before UIDs were kept adopts it
	sameKeys := st.Exposed.Same(sh.Exposed)
	if !st.Told.Hidden() && sameSource && st.ResourceVersion == src.ResourceVersion && sameKeys {
		return currentShare(st, sh) // (9)
	}
	// (10) A new copy, through the share's list now.
	files, err := sharedFiles(rec, i, sh, src)
	if err != nil {
		// Not refreshed; the keys that stopped being shared still go.
		err = fmt.Errorf("%s %s/%s: %w", st.Kind, sh.SourceNamespace, sh.SourceName, err)
		return d.narrowed(rec, i, sh.Exposed, shareVerdict{state: rec.Shares[i], err: err})
	}
	change := refreshedChange(st, sh, src.ResourceVersion, sameKeys)
	st.Told, _ = toldAfter(st.Told, outcomeRefreshed)
	st.SourceNamespace, st.SourceName, st.ResourceVersion = sh.SourceNamespace, sh.SourceName, src.ResourceVersion
	st.SourceUID = cmp.Or(src.UID, st.SourceUID)
	st.Exposed = sh.Exposed
	return shareVerdict{state: st, files: files, change: change}
}

// currentShare is the verdict on a share whose files are the source's now (9): the pod is told
// when it comes back from readForbidden.
func currentShare(st volume.ShareState, sh share.Spec) shareVerdict {
	var tell bool
	if st.Told, tell = toldAfter(st.Told, outcomeCurrent); tell {
		return shareVerdict{state: st, change: &shareChange{share: st.Ref, kind: changeRefreshResumed, why: sh.SourceKey().String()}}
	}
	return shareVerdict{state: st}
}

// refreshedChange is what a new copy of a share in state st, from the source at version rv,
// reports (10): restored when its files were away, keysChanged when the share's list changed,
// refreshed otherwise.
func refreshedChange(st volume.ShareState, sh share.Spec, rv string, sameKeys bool) *shareChange {
	change := &shareChange{share: st.Ref, kind: changeRefreshed,
		why: fmt.Sprintf("%s %s/%s (resourceVersion %s)", st.Kind, sh.SourceNamespace, sh.SourceName, rv)}
	switch {
	case st.Told.Hidden():
		change.kind = changeRestored
	case !sameKeys:
		change.kind, change.why = changeKeys, exposureSummary(sh.Exposed)+", from "+change.why
	}
	return change
}

// narrowed is verdict v on share i of rec narrowed to the share's list of keys now (exposed:
// spec.items, internal/share/exposure.go), the one narrowing step. Every verdict that brings no copy made
// through the share's list now goes through it, so keys that stopped being shared never stay,
// whatever else the verdict says. When exposed is the list the share's copy was made through,
// v is as it is. Otherwise the copy keeps only the files the new list still shares (under the
// same name, from the same key) and gains none, and the state notes the new list: the next
// refresh of the source (or of the list) brings the rest. A change v reports (revoked,
// restored, refreshFailed) is kept; a verdict that reported none reports keysChanged when files
// leave. An error in v (the share was read, what came after failed) is logged and dropped: the
// share is narrowed, and the rest judged again next cycle.
func (d *driver) narrowed(rec volume.Record, i int, exposed share.Exposure, v shareVerdict) shareVerdict {
	if v.state.Exposed.Same(exposed) {
		return v
	}
	if v.err != nil {
		klog.ErrorS(v.err, "Checking a share failed; keeping only what its new list still shares", "volumeID", rec.VolumeID, "share", v.state.String())
		v.err = nil
	}
	held, err := atomicwriter.ReadFiles(d.store.DirOf(rec).CopyPath(i))
	if err != nil {
		err = fmt.Errorf("reading the copy of %s to drop keys no longer shared: %w", v.state.Ref, err)
		if v.state.Told.Hidden() {
			// A revocation stands: the share leaves the view now. Its copy, kept for when access
			// comes back, still notes the list it was made through, so it is narrowed before it
			// can be shown again.
			klog.ErrorS(err, "Narrowing the copy of a revoked share failed; it is revoked all the same", "volumeID", rec.VolumeID, "share", v.state.String())
			return v
		}
		return shareVerdict{state: rec.Shares[i], err: err}
	}
	kept := keepShared(held, rec.Items, i, v.state.Exposed, exposed)
	v.state.Exposed = exposed
	if len(kept) == len(held) {
		return v // nothing the pod sees changes; the record notes the new list
	}
	v.files = kept
	if v.change == nil {
		v.change = &shareChange{share: v.state.Ref, kind: changeKeys, why: exposureSummary(exposed) + "; files no longer shared were removed"}
	}
	return v
}

// shareRead says whether the share was read, and read whole, this cycle (memoized): its list is
// then known, whatever failed after.
func shareRead(ctx context.Context, memo *cycleMemo, ref share.Ref) bool {
	_, err := memo.share(ctx, ref)
	return err == nil
}

// exposureSummary says what a share's list exposes, for an event: the names it shares, never
// others.
func exposureSummary(e share.Exposure) string {
	if e.All() {
		return "it shares every key of its source"
	}
	return "it shares only " + share.QuoteAll(e.Names())
}

// revokeShare is the verdict on a share the pod may no longer see: revoked (2).
func revokeShare(st volume.ShareState, why string) shareVerdict {
	var tell bool
	if st.Told, tell = toldAfter(st.Told, outcomeDenied); !tell {
		return shareVerdict{state: st}
	}
	return shareVerdict{state: st, change: &shareChange{share: st.Ref, kind: changeRevoked, why: why}}
}

// replacedShare is the verdict on a share whose object was replaced by another under the same
// name (3): revoked (its files leave the view, if the deletion did not already take them), and the
// pod told once, with what accepts the new object.
func replacedShare(rec volume.Record, st volume.ShareState, sh share.Spec) shareVerdict {
	kind := changeRevoked
	if st.Told.Hidden() {
		kind = changeShareReplaced // no file changes: they are away already
	}
	var tell bool
	if st.Told, tell = toldAfter(st.Told, outcomeShareReplaced); !tell {
		return shareVerdict{state: st}
	}
	why := replacedShareMessage(rec, st, sh)
	return shareVerdict{state: st, change: &shareChange{share: st.Ref, kind: kind, why: why, reason: reasonShareReplaced}}
}

// restoreShare is the verdict on a share of a volume that does not refresh, which the pod may
// see (5): its copy, kept while it was away, is exactly what comes back.
func restoreShare(st volume.ShareState) shareVerdict {
	var tell bool
	if st.Told, tell = toldAfter(st.Told, outcomeGranted); !tell {
		return shareVerdict{state: st}
	}
	return shareVerdict{state: st, change: &shareChange{share: st.Ref, kind: changeRestored}}
}

// sourceReplaced is the verdict on a share whose source is another object than the one it was
// made for (8): its files stay, and the pod is told, with what an admin runs to accept it.
func sourceReplaced(st volume.ShareState, sh share.Spec, uid string) shareVerdict {
	var tell bool
	if st.Told, tell = toldAfter(st.Told, outcomeSourceReplaced); !tell {
		return shareVerdict{state: st}
	}
	return shareVerdict{state: st, change: &shareChange{share: st.Ref, kind: changeRefreshFailed, why: share.ReplacedMessage(sh, uid)}}
}

// readForbidden is the verdict on a share whose source the driver may no longer read (7): its
// files stay, and the pod is told, with what an admin must run.
func (d *driver) readForbidden(st volume.ShareState, sh share.Spec) shareVerdict {
	var tell bool
	if st.Told, tell = toldAfter(st.Told, outcomeReadForbidden); !tell {
		return shareVerdict{state: st}
	}
	// A share whose files are away has none to keep: its access is back, but its files are not.
	what := "keeps its last files and is not refreshed"
	if st.Told.Hidden() {
		what = "may be used again, but its files stay away until the driver may read its source"
	}
	return shareVerdict{state: st, change: &shareChange{share: st.Ref, kind: changeRefreshFailed,
		why: fmt.Sprintf("%s: the driver may not read %s; %s", what, sh.SourceKey(), d.account.GrantReadHint(sh.SourceKey()))}}
}

func quote(s string) string { return "\"" + s + "\"" }
