package main

// Reconciling one volume with what the cluster says now, for the relist (refresh.go) and for a
// share's change (shareevents.go): under the volume's lock, taken only if no other operation
// holds it (reconcileIfIdle), a volume whose pod is gone is taken off (volume.go's teardown), and
// any other is reconciled in three steps:
//
//	(1) judge: each share of the volume gets a verdict from the share, the pod's access and the
//	    source (judgeShare). Nothing is written, and a share whose check failed keeps its state.
//	(2) apply: the judged shares' new copies are written, the pod's view is rebuilt in one atomic
//	    swap when any share's files changed, the record is saved with the new states, the copies
//	    of revoked shares are dropped, and every change is reported to the pod (an event) and
//	    counted (a metric).
//	(3) charge: files a reader keeps open after a refresh removed them keep their pages in the
//	    tmpfs, and no record names them: whatever (2) did, the volume is charged them on top of
//	    its record, by the kernel's count (volume.Store.ChargeUnlinkedFiles), before the room (2)
//	    reserved is given back, so that no publish is admitted meanwhile into memory they hold.
//
// How each share is judged, and the states it moves through: judge.go's tables.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/shareapi"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// Event reasons recorded on consuming pods.
const (
	reasonRevoked   = shareapi.ReasonRevoked
	reasonRestored  = shareapi.ReasonRestored
	reasonRefreshed = shareapi.ReasonRefreshed
	reasonConflict  = "SharedResourceFileConflict"
	// The driver lost (and regained) read access to a source: the volume keeps its last data.
	reasonRefreshFailed  = "SharedResourceRefreshFailed"
	reasonRefreshResumed = "SharedResourceRefreshResumed"
	// The share's list of keys changed: the volume gained or lost files.
	reasonKeysChanged = "SharedResourceKeysChanged"
	// (reasonShareReplaced: shareidentity.go.)
)

// changeKind is what a reconcile changed about one share of a volume. Its value is the metric
// label (volume_changes_total{change}) of the kinds that change files.
type changeKind string

const (
	changeRevoked   changeKind = "revoked"
	changeRestored  changeKind = "restored"
	changeRefreshed changeKind = "refreshed"
	// The share's list of keys changed, and the volume with it.
	changeKeys changeKind = "keysChanged"
	// The driver lost, or regained, read on the source: the files stay as they are.
	changeRefreshFailed  changeKind = "refreshFailed"
	changeRefreshResumed changeKind = "refreshResumed"
	// The share's name holds another object than the volume's, whose files were already gone.
	changeShareReplaced changeKind = "shareReplaced"
)

// fileChangeKinds are the kinds that change the files a pod sees.
var fileChangeKinds = []changeKind{changeRevoked, changeRestored, changeRefreshed, changeKeys}

// changesFiles says whether the change alters the files the pod sees (so the view is rebuilt).
func (k changeKind) changesFiles() bool { return slices.Contains(fileChangeKinds, k) }

// shareChange is one share's change in a reconcile, for events and metrics.
type shareChange struct {
	share  share.Ref
	kind   changeKind
	why    string
	reason string // the event's reason, when not the kind's own (a share replaced: shareidentity.go)
}

// reconcileIfIdle reconciles the volume unless an operation holds its lock: such a volume is
// being published, unpublished or reconciled right now, and the next pass will see it (a share
// event's reaction retries it: shareevents.go). It takes the lock for the reconcile; idle says
// whether it could (false: the volume was busy, and skipped).
func (d *driver) reconcileIfIdle(ctx context.Context, volumeID string, memo *cycleMemo) (idle bool) {
	unlock, ok := d.locks.tryLock(volumeID)
	if !ok {
		return false
	}
	defer unlock()
	rec, ok := d.store.Get(volumeID) // re-read under the lock
	if !ok {
		return true
	}
	if err := d.reconcile(ctx, rec, memo); err != nil {
		d.metrics.reconcileFailed()
		klog.ErrorS(err, "Reconciling volume failed; it is left as it was and retried next cycle", "volumeID", volumeID)
	}
	return true
}

// reconcile brings one volume to what the cluster says it should be: judge, apply, charge (see
// the top of this file). The caller holds the volume's lock. It returns the first error met; the
// shares it concerns were left as they were.
func (d *driver) reconcile(ctx context.Context, rec volume.Record, memo *cycleMemo) error {
	if !d.podDirExists(rec.PodUID) {
		// The kubelet removes a pod's dir only after its volumes are unmounted; a record that
		// outlives it is one whose publish never completed. Nobody will unpublish it.
		klog.InfoS("Pod of volume is gone; cleaning the volume", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName))
		return d.teardown(rec)
	}
	verdicts := make([]shareVerdict, len(rec.Shares))
	for i := range rec.Shares {
		verdicts[i] = d.judgeShare(ctx, rec, i, memo) // (1)
	}
	return d.applyVerdicts(rec, verdicts) // (2), (3)
}

// applyVerdicts writes what the verdicts on rec's shares decided and reports it. It writes the
// new copies (a share whose copy cannot be written keeps its state), rebuilds the view if any
// share's files changed, and saves the record last, so a crash leaves the old record with a view
// the next reconcile rebuilds. A volume recovered at start has its view rebuilt once even when
// nothing changed: a crash between a swap of the view and the save of the record may have left
// a view its record does not describe (rebuilt from fresh verdicts, never at recovery from the
// record, which could show a pod files it lost just before the crash).
func (d *driver) applyVerdicts(rec volume.Record, verdicts []shareVerdict) error {
	vol := d.store.DirOf(rec)
	// What the reconcile writes holds room in the budget until the record naming it is saved:
	// then the store charges what the record says, and the room goes back (internal/volume's Rewrite).
	rw := volume.NewRewrite(d.budget, rec)
	defer rw.Release()
	defer d.store.ChargeUnlinkedFiles(rec) // (3), whatever happened, before the room goes back
	w := d.writeCopies(vol, rec, verdicts, rw)
	view := reconciledView(w, rw, func() bool { return d.store.ViewUnverified(rec.VolumeID) })
	// A state that changed without a reported change (a UID adopted, a list noted, a kept view
	// dropped) is saved too.
	if len(w.changes) == 0 && view == volume.ViewUnchanged && reflect.DeepEqual(w.next.Shares, rec.Shares) && w.next.KeptBytes == rec.KeptBytes {
		dropRevokedCopies(vol, rec)
		return errors.Join(w.errs...)
	}
	conflicts, err := d.store.Commit(w.next, view, rw, d.crash)
	if err != nil {
		return errors.Join(append(w.errs, err)...)
	}
	if len(w.changes) > 0 {
		crashpoint.Reached(d.crash, crashpoint.ReconcileRecord)
	}
	dropRevokedCopies(vol, w.next)
	d.reportChanges(w.next, w.changes, conflicts)
	return errors.Join(w.errs...)
}

// copiesWritten is what writeCopies did.
type copiesWritten struct {
	next    volume.Record // the record to save: rec with each share's new state
	changes []shareChange // to report
	errs    []error       // the shares' errors; each such share is left as it was
}

// reconciledView is what the reconcile that wrote w (rw: its bytes) does to the pod's view. A
// share's copy rewritten changes the view, linked from the copies, even when the change is not
// one reported as changing files (a list narrowed where the source could not be read). A view
// replaced by refreshes alone is kept for readers still on it, if it fits beside what is in use.
// unverified says whether the view is still to be rebuilt since the volume was recovered.
func reconciledView(w copiesWritten, rw *volume.Rewrite, unverified func() bool) volume.ViewChange {
	switch {
	case !rw.AnyRewritten() && !slices.ContainsFunc(w.changes, func(c shareChange) bool { return c.kind.changesFiles() }):
		if len(w.errs) == 0 && unverified() {
			return volume.ViewRebuilt
		}
		return volume.ViewUnchanged
	case keepsPreviousView(w.changes) && !unverified() && rw.KeepsView():
		// A view the record does not describe (rebuilt by a reconcile whose record could not be
		// saved, or left by a crash) is not kept: what it links is not what its record says.
		return volume.ViewReplacedKept
	}
	return volume.ViewReplaced
}

// writeCopies writes the new copies the verdicts on rec's shares bring, noting their bytes in rw.
func (d *driver) writeCopies(vol volume.Dir, rec volume.Record, verdicts []shareVerdict, rw *volume.Rewrite) (w copiesWritten) {
	w.next = rec.Clone()
	// A change drops the view the last refresh kept before writing anything, so that a volume
	// holds at most two sets of files (the tmpfs's size allows for two), and no longer counts it;
	// so does the volume's next reconcile without a change: the readers it was kept for were on
	// it for an instant, and the old version does not stay readable under a hidden name.
	if rec.KeptBytes > 0 || slices.ContainsFunc(verdicts, func(v shareVerdict) bool { return v.err == nil && v.files != nil }) {
		if err := vol.DropPreviousView(); err != nil {
			klog.ErrorS(err, "Dropping the view kept for readers failed", "volumeID", rec.VolumeID)
		} else if rec.KeptBytes > 0 {
			rw.KeptViewDropped()
			w.next.KeptBytes = 0
		}
	}
	for i, v := range verdicts {
		old := rec.Shares[i]
		if v.err != nil {
			klog.ErrorS(v.err, "Checking a share of a volume failed; it is left as it was", "volumeID", rec.VolumeID, "share", old.String())
			w.errs = append(w.errs, v.err)
			continue
		}
		wrote := false // a new copy through the share's list now, the list's growth reserved with it
		if v.files != nil {
			want := v
			var err error
			others := volume.EntryCount(w.next.Shares) - w.next.Shares[i].Entries
			if v, err = writeNewCopy(vol, old, i, v, rw, others, volume.ListGrowth(old.Exposed, v.state.Exposed)); err != nil {
				// Not written (a full tmpfs: ENOSPC, out of inodes): the share is as it was...
				w.errs = append(w.errs, fmt.Errorf("writing the copy of %s: %w", old, err))
				v = shareVerdict{state: old}
			}
			wrote = v.files != nil
			if want.state.Told.Hidden() && !v.state.Told.Hidden() {
				// ...but a revocation stands, whether or not the copy it keeps for when access
				// comes back could be narrowed: the share leaves the view now, its copy as it
				// was, noting the list it was made through (narrowed below, or next time).
				st := want.state
				st.Exposed, st.Bytes, st.Entries = old.Exposed, old.Bytes, old.Entries
				v = shareVerdict{state: st, change: want.change}
			}
			if v.files == nil && !old.Exposed.Same(want.state.Exposed) {
				v = d.narrowUnwritten(vol, rec, i, want, v) // keys no longer shared still go
			}
			if err != nil && v.files == nil && !v.state.Told.Hidden() {
				continue // ...and for the keys no longer shared, when there were some to drop
			}
		}
		if !wrote || v.files == nil {
			v = listWithinBudget(rec.VolumeID, old, v, rw)
		}
		if v.files != nil { // nil: no new copy, or it did not fit, and was not written
			rw.Rewritten(old, v.state)
		} else if !old.Told.Hidden() {
			rw.Shown(old)
		}
		w.next.Shares[i] = v.state
		if v.change != nil {
			w.changes = append(w.changes, *v.change)
		}
	}
	// The copies of revoked shares of a refreshing volume are emptied once the record is saved:
	// they stop counting.
	for i, st := range w.next.Shares {
		if w.next.Refresh && st.Told.Hidden() {
			w.next.Shares[i].Bytes, w.next.Shares[i].Entries = volume.ChargedBytes(nil), 0
		}
	}
	return w
}

// writeNewCopy writes the new copy of share i that verdict v brings, its bytes reserved in rw
// beside the old copy's (which stay charged until the record naming the new one is saved), and
// with them volume.ListGrowth, what the share's new list of keys adds to the record. A new
// copy that does not fit is not written: the share keeps its last files, and the pod is told once
// (overBudget, judge.go); so is one that would make the volume hold more files and directories than
// maxVolumeEntries, beside the others (the files and directories of the volume's other shares). On
// an error the share is as it was.
func writeNewCopy(vol volume.Dir, old volume.ShareState, i int, v shareVerdict, rw *volume.Rewrite, others int, listGrowth int64) (shareVerdict, error) {
	newBytes, newEntries := volume.ChargedBytes(v.files), volume.FilesEntries(v.files)
	var refused string
	if n := others + newEntries; n > maxVolumeEntries {
		refused = fmt.Sprintf("its new files do not fit in the volume: they would make %d files and directories in it, and a volume holds at most %d "+
			"(select fewer keys with the volumeAttribute %s)", n, maxVolumeEntries, attrItems)
	} else if err := rw.Fits(newBytes + listGrowth); err != nil {
		refused = fmt.Sprintf("its new files do not fit on this node: %v", err)
	}
	if refused != "" {
		var tell bool
		if old.Told, tell = toldAfter(old.Told, outcomeOverBudget); !tell {
			return shareVerdict{state: old}, nil
		}
		return shareVerdict{state: old, change: &shareChange{share: old.Ref, kind: changeRefreshFailed,
			why: "changed, but keeps its last files: " + refused}}, nil
	}
	// A file the old copy has and the new one lacks must leave the pod at once, also where
	// another share provides its path (a kept view would show it under its hidden name). The old
	// copy unreadable: assumed so.
	if held, err := atomicwriter.ReadFiles(vol.CopyPath(i)); err != nil || volume.DropsFile(held, v.files) {
		rw.PathDropped()
	}
	if err := vol.WriteCopy(i, v.files); err != nil {
		return v, err
	}
	v.state.Bytes, v.state.Entries = newBytes, newEntries
	return v, nil
}

// listWithinBudget is verdict v on a share, old before, that brings no new copy, with its new
// list of keys reserved in rw when the list grew. A list that does not fit beside what is in use
// is not recorded: the record notes the entries of the old list the new one still has (the old
// list itself when it had none, every key, or when none is left), which names every file the
// share's copy holds (v's narrowing kept only files both lists share) and is no larger, and the
// pod is told once, as for a new copy that does not fit (writeNewCopy). So an edit that lengthens
// a share's list never makes the node hold more than its budget.
func listWithinBudget(volumeID string, old volume.ShareState, v shareVerdict, rw *volume.Rewrite) shareVerdict {
	growth := volume.ListGrowth(old.Exposed, v.state.Exposed)
	if growth == 0 {
		return v
	}
	err := rw.Fits(growth)
	if err == nil {
		return v
	}
	klog.V(2).InfoS("A share's new list of keys does not fit in the volume budget; its volume keeps noting the old one", "volumeID", volumeID,
		"share", old.String(), "err", err)
	// An empty list would be saved as none (every key): the old list then.
	if both := old.Exposed.AlsoIn(v.state.Exposed); !old.Exposed.All() && len(both) > 0 {
		v.state.Exposed = both
	} else {
		v.state.Exposed = old.Exposed
	}
	if v.state.Told.Hidden() {
		return v // revoked: nothing shown, nothing to tell
	}
	why := "its new list of keys does not fit on this node: " + err.Error()
	var tell bool
	switch v.state.Told, tell = toldAfter(v.state.Told, outcomeOverBudget); {
	case v.change != nil:
		v.change.why += "; " + why
	case tell:
		v.change = &shareChange{share: old.Ref, kind: changeRefreshFailed, why: "changed, but keeps its last files: " + why}
	}
	return v
}

// narrowUnwritten is what share i of rec becomes when want, a verdict through the share's new
// list of keys, brought a new copy that was not written (got: it did not fit, or could not be
// written; the share keeps its last files): got narrowed to the new list (narrowed, judge.go),
// its smaller copy written at once. Narrowing only drops files, so it needs no reservation; the
// volume store charges the smaller copy when the record naming it is saved (internal/volume). Should
// even that fail, got stands (logged).
func (d *driver) narrowUnwritten(vol volume.Dir, rec volume.Record, i int, want, got shareVerdict) shareVerdict {
	v := d.narrowed(rec, i, want.state.Exposed, got)
	if v.err == nil && v.files == nil {
		return v // nothing to drop; the record notes the new list
	}
	if v.err == nil {
		v.err = vol.WriteCopy(i, v.files)
	}
	if v.err != nil {
		klog.ErrorS(v.err, "Dropping the keys a share no longer lists failed", "volumeID", rec.VolumeID, "share", rec.Shares[i].String())
		return got
	}
	v.state.Bytes, v.state.Entries = volume.ChargedBytes(v.files), volume.FilesEntries(v.files)
	why := exposureSummary(want.state.Exposed) + "; files no longer shared were removed"
	if got.change != nil {
		why += ", and its new files are not shown: " + got.change.why
	}
	v.change = &shareChange{share: rec.Shares[i].Ref, kind: changeKeys, why: why}
	return v
}

// keepsPreviousView says whether a reconcile that made these changes keeps the view it replaces
// for readers still on it (internal/volume): when it refreshed files, and took none away from the
// pod. A revocation, a share replaced or keys no longer shared must take the files away at
// once: a kept view would still show them under its hidden name.
func keepsPreviousView(changes []shareChange) bool {
	refreshed := false
	for _, c := range changes {
		switch c.kind {
		case changeRefreshed:
			refreshed = true
		case changeRestored, changeRefreshFailed, changeRefreshResumed:
		default:
			return false
		}
	}
	return refreshed
}

// reportChanges counts a reconcile's changes and tells the pod about them.
func (d *driver) reportChanges(rec volume.Record, changes []shareChange, conflicts []volume.Conflict) {
	for _, c := range changes {
		if c.kind.changesFiles() {
			d.metrics.volumeChanged(c.kind)
		}
		switch c.kind {
		case changeRevoked:
			d.event(rec, corev1.EventTypeWarning, cmp.Or(c.reason, reasonRevoked), "The files of %s were removed from the volume: %s", c.share, c.why)
		case changeShareReplaced:
			d.event(rec, corev1.EventTypeWarning, reasonShareReplaced, "%s: %s", c.share, c.why)
		case changeRestored:
			d.event(rec, corev1.EventTypeNormal, reasonRestored, "Access to %s is granted again; its files are back", c.share)
		case changeRefreshed:
			d.event(rec, corev1.EventTypeNormal, reasonRefreshed, "Updated %s from %s", c.share, c.why)
		case changeRefreshFailed:
			d.event(rec, corev1.EventTypeWarning, reasonRefreshFailed, "%s %s", c.share, c.why)
		case changeRefreshResumed:
			d.event(rec, corev1.EventTypeNormal, reasonRefreshResumed, "The driver may read %s again; its files are refreshed again", c.why)
		case changeKeys:
			d.event(rec, corev1.EventTypeNormal, reasonKeysChanged, "The keys %s shares changed: %s", c.share, c.why)
		}
		klog.InfoS("Volume changed", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName), "share", c.share.String(), "change", c.kind)
	}
	for _, c := range conflicts {
		kept, dropped := rec.Shares[c.Kept].Ref, rec.Shares[c.Dropped].Ref
		d.event(rec, corev1.EventTypeWarning, reasonConflict, "%s and %s both provide the file %q; %s keeps it (the first share listed wins)", kept, dropped, c.Path, kept)
	}
}

func (d *driver) event(rec volume.Record, eventType, reason, format string, args ...any) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: rec.PodNamespace, Name: rec.PodName, UID: types.UID(rec.PodUID)}
	d.events.Eventf(ref, eventType, reason, format, args...)
}
