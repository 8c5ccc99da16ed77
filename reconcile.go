package main

// Reconciling one volume with what the cluster says now, for the relist and for a share's change
// (refresh.go), in two steps:
//
//	(1) judge: each share of the volume gets a verdict from the share, the pod's access and the
//	    source (judgeShare). Nothing is written, and a share whose check failed keeps its state.
//	(2) apply: the judged shares' new copies are written, the pod's view is rebuilt in one atomic
//	    swap when any share's files changed, the record is saved with the new states, the copies
//	    of revoked shares are dropped, and every change is reported to the pod (an event) and
//	    counted (a metric).
//
// A share's verdict, by what the API server says (refresh is the volume's refreshResource):
//
//	share     the pod's access  the source                     verdict
//	deleted   -                 -                              revoked (its files leave the view)
//	exists    denied            -                              revoked
//	exists    granted           - (refresh off)                restored if revoked (the copy kept is what comes back), else as it is
//	exists    granted           not found                      as it is: the last files stay, as kubelet secret volumes do
//	exists    granted           the driver may not read it     refreshFailed, once: the last files stay
//	exists    granted           another object (re-created)    refreshFailed, once: the last files stay (sourcepin.go)
//	exists    granted           the version the volume shows   as it is (refreshResumed if it was refreshFailed)
//	exists    granted           another version (or revoked)   refreshed (restored if revoked): a new copy
//	any API error                                              as it is; retried next cycle
//
// When the share's list of keys (spec.items, sharekeys.go) is not the one the volume shows, the
// share is refreshed from the source (keysChanged: it gains and loses keys in one swap); where it
// cannot be (refreshResource=false, the source lacks a listed key, the pod's items select a key
// no longer shared) its copy keeps only the files the new list still shares, and gains none.
// Keys that stopped being shared never stay: no error or setting keeps them.
//
// An outage must never revoke access: only an answer does.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// Event reasons recorded on consuming pods.
const (
	reasonRevoked   = "SharedResourceAccessRevoked"
	reasonRestored  = "SharedResourceAccessRestored"
	reasonRefreshed = "SharedResourceRefreshed"
	reasonConflict  = "SharedResourceFileConflict"
	// The driver lost (and regained) read access to a source: the volume keeps its last data.
	reasonRefreshFailed  = "SharedResourceRefreshFailed"
	reasonRefreshResumed = "SharedResourceRefreshResumed"
	// The share's list of keys changed: the volume gained or lost files.
	reasonKeysChanged = "SharedResourceKeysChanged"
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
)

// fileChangeKinds are the kinds that change the files a pod sees.
var fileChangeKinds = []changeKind{changeRevoked, changeRestored, changeRefreshed, changeKeys}

// changesFiles says whether the change alters the files the pod sees (so the view is rebuilt).
func (k changeKind) changesFiles() bool { return slices.Contains(fileChangeKinds, k) }

// shareChange is one share's change in a reconcile, for events and metrics.
type shareChange struct {
	share shareRef
	kind  changeKind
	why   string
}

// cycleMemo remembers, for one pass over volumes, each access decision and each source fetched.
type cycleMemo struct {
	d       *driver
	access  map[accessKey]memoDecision
	sources map[cacheKey]memoSource
	shares  map[shareRef]memoShare
}

type memoShare struct {
	sh  shareSpec
	err error
}

type memoDecision struct {
	d   decision
	err error
}

type memoSource struct {
	data *sourceData
	err  error
}

func (d *driver) newCycleMemo() *cycleMemo {
	return &cycleMemo{d: d, access: map[accessKey]memoDecision{}, sources: map[cacheKey]memoSource{}, shares: map[shareRef]memoShare{}}
}

// share reads the share from the informer, with a live GET when it is not cached, so that a
// share missing from the cache is confirmed deleted before any volume is revoked for it.
func (m *cycleMemo) share(ctx context.Context, ref shareRef) (shareSpec, error) {
	if r, ok := m.shares[ref]; ok {
		return r.sh, r.err
	}
	sh, err := m.d.shares.get(ctx, ref.Kind, ref.Name)
	m.shares[ref] = memoShare{sh, err}
	return sh, err
}

func (m *cycleMemo) decision(ctx context.Context, key accessKey) (decision, error) {
	if r, ok := m.access[key]; ok {
		return r.d, r.err
	}
	dec, err := m.d.authz.recheck(ctx, key)
	m.access[key] = memoDecision{dec, err}
	return dec, err
}

// source is sh's source as sh exposes it.
func (m *cycleMemo) source(ctx context.Context, sh shareSpec) (*sourceData, error) {
	key := cacheKey{sh.sourceKey(), sh.Items.fingerprint()}
	if r, ok := m.sources[key]; ok {
		return r.data, r.err
	}
	data, err := m.d.sources.refresh(ctx, sh.sourceKey(), sh.Items)
	m.sources[key] = memoSource{data, err}
	return data, err
}

// reconcile brings one volume to what the cluster says it should be: judge, then apply (see the
// top of this file). The caller holds the volume's lock. It returns the first error met; the
// shares it concerns were left as they were.
func (d *driver) reconcile(ctx context.Context, rec volumeRecord, memo *cycleMemo) error {
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
	return d.applyVerdicts(rec, verdicts) // (2)
}

// applyVerdicts writes what the verdicts on rec's shares decided and reports it. It writes the
// new copies (a share whose copy cannot be written keeps its state), rebuilds the view if any
// share's files changed, and saves the record last, so a crash leaves the old record with a view
// the next reconcile rebuilds. A volume recovered at start has its view rebuilt once even when
// nothing changed: a crash between a swap of the view and the save of the record may have left
// a view its record does not describe (rebuilt from fresh verdicts, never at recovery from the
// record, which could show a pod files it lost just before the crash).
func (d *driver) applyVerdicts(rec volumeRecord, verdicts []shareVerdict) error {
	vol := d.store.dirOf(rec)
	w := d.writeCopies(vol, rec, verdicts)
	next, changes, errs := w.next, w.changes, w.errs
	// A share's copy rewritten changes the view, linked from the copies, even when the change is
	// not one that is reported as changing files (a list narrowed where the source could not be read).
	filesChanged := w.copied || slices.ContainsFunc(changes, func(c shareChange) bool { return c.kind.changesFiles() })
	rebuild := filesChanged || len(errs) == 0 && d.store.viewUnverified(rec.VolumeID)
	if len(changes) == 0 && !rebuild {
		vol.dropRevokedCopies(rec)
		return errors.Join(errs...)
	}
	var conflicts []pathConflict
	if rebuild {
		// The crash points are a change's steps (crash_integration_test.go); a rebuild that changes
		// nothing has none.
		if filesChanged {
			d.crash.reached(stepReconcileCopies)
		}
		var err error
		if conflicts, err = vol.rebuildView(next.Shares); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if filesChanged {
			d.crash.reached(stepReconcileData)
		}
	}
	if err := d.store.save(next); err != nil {
		return errors.Join(append(errs, err)...)
	}
	d.store.viewVerified(rec.VolumeID)
	if len(changes) > 0 {
		d.crash.reached(stepReconcileRecord)
	}
	vol.dropRevokedCopies(next)
	d.budget.give(w.dropped)
	d.reportChanges(next, changes, conflicts)
	return errors.Join(errs...)
}

// copiesWritten is what writeCopies did.
type copiesWritten struct {
	next    volumeRecord  // the record to save: rec with each share's new state
	changes []shareChange // to report
	copied  bool          // a share's copy was rewritten
	dropped int64         // the bytes of revoked shares' copies, which go once the record is saved
	errs    []error       // the shares' errors; each such share is left as it was
}

// writeCopies writes the new copies the verdicts on rec's shares bring.
func (d *driver) writeCopies(vol volumeDir, rec volumeRecord, verdicts []shareVerdict) (w copiesWritten) {
	w.next = rec.clone()
	for i, v := range verdicts {
		if v.err != nil {
			klog.ErrorS(v.err, "Checking a share of a volume failed; it is left as it was", "volumeID", rec.VolumeID, "share", rec.Shares[i].String())
			w.errs = append(w.errs, v.err)
			continue
		}
		if v.files != nil {
			var err error
			if v, err = d.writeNewCopy(vol, rec.Shares[i], i, v); err != nil {
				w.errs = append(w.errs, fmt.Errorf("writing the copy of %s: %w", rec.Shares[i], err))
				continue
			}
			w.copied = w.copied || v.files != nil // nil: it did not fit, and was not written
		}
		w.next.Shares[i] = v.state
		if v.change != nil {
			w.changes = append(w.changes, *v.change)
		}
	}
	// The copies of revoked shares of a refreshing volume are emptied once the record is saved:
	// they stop counting.
	for i, st := range w.next.Shares {
		if w.next.Refresh && st.Revoked {
			w.dropped += st.Bytes
			w.next.Shares[i].Bytes = 0
		}
	}
	return w
}

// writeNewCopy writes the new copy of share i that verdict v brings, charged to the node's
// budget while both copies exist; the old copy's bytes are returned once it is replaced. A new
// copy that does not fit is not written: the share keeps its last files, and the pod is told
// once (OverBudget). On an error the share is as it was.
func (d *driver) writeNewCopy(vol volumeDir, old shareState, i int, v shareVerdict) (shareVerdict, error) {
	newBytes := chargedBytes(v.files)
	if err := d.budget.take(newBytes); err != nil {
		if old.OverBudget {
			return shareVerdict{state: old}, nil
		}
		old.OverBudget = true
		return shareVerdict{state: old, change: &shareChange{share: old.shareRef, kind: changeRefreshFailed,
			why: fmt.Sprintf("changed, but keeps its last files: its new files do not fit on this node: %v", err)}}, nil
	}
	if err := vol.writeCopy(i, v.files); err != nil {
		d.budget.give(newBytes)
		return v, err
	}
	d.budget.give(old.Bytes)
	v.state.Bytes, v.state.OverBudget = newBytes, false
	return v, nil
}

// reportChanges counts a reconcile's changes and tells the pod about them.
func (d *driver) reportChanges(rec volumeRecord, changes []shareChange, conflicts []pathConflict) {
	for _, c := range changes {
		if c.kind.changesFiles() {
			d.metrics.volumeChanged(c.kind)
		}
		switch c.kind {
		case changeRevoked:
			d.event(rec, corev1.EventTypeWarning, reasonRevoked, "The files of %s were removed from the volume: %s", c.share, c.why)
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
		d.event(rec, corev1.EventTypeWarning, reasonConflict, "%s and %s both provide the file %q; %s keeps it (the first share listed wins)", c.Kept, c.Dropped, c.Path, c.Kept)
	}
}

// shareVerdict is what a reconcile decided for one share.
type shareVerdict struct {
	state  shareState                   // the share's next state, saved with the record
	files  map[string]atomicwriter.File // its new copy; nil: the copy stays as it is
	change *shareChange                 // what to report; nil: the share is as it was
	err    error                        // the share could not be judged: it stays as it was
}

// judgeShare decides what share i of rec shows now (the table at the top of this file). It
// changes nothing, on disk or in rec.
func (d *driver) judgeShare(ctx context.Context, rec volumeRecord, i int, memo *cycleMemo) shareVerdict {
	st := rec.Shares[i] // a copy: the next state is built on it
	sh, denied, err := d.judgeAccess(ctx, rec, i, memo)
	switch {
	case err != nil:
		return shareVerdict{state: st, err: err}
	case denied != "":
		v := revokeShare(st, denied)
		if !rec.Refresh && sh.Name != "" && !st.Exposed.same(sh.Items) {
			// A revoked refreshResource=false share keeps its copy for when access comes back;
			// what the share no longer exposes leaves it now.
			return d.narrowShare(rec, i, sh, v)
		}
		return v
	case !rec.Refresh:
		// refreshResource=false: the files published are the files shown, on every path; only
		// access decides whether they are visible, and the share's list which of them may stay.
		v := restoreShare(st)
		return d.narrowIfListChanged(rec, i, sh, v)
	}
	return d.judgeSource(ctx, rec, i, sh, memo)
}

// judgeAccess says whether the pod may still see share i of rec: denied is why not ("" when it
// may), and sh is the share as it is now.
func (d *driver) judgeAccess(ctx context.Context, rec volumeRecord, i int, memo *cycleMemo) (sh shareSpec, denied string, err error) {
	ref := rec.Shares[i].shareRef
	sh, err = memo.share(ctx, ref)
	if apierrors.IsNotFound(err) {
		return sh, ref.Kind.shareTypeName() + " " + quote(ref.Name) + " was deleted", nil
	}
	if err != nil {
		return sh, "", err
	}
	key := rec.accessKey(i)
	dec, err := memo.decision(ctx, key)
	if err != nil || dec.Allowed {
		return sh, "", err
	}
	return sh, deniedMessage(key, dec.Reason), nil
}

// judgeSource is the verdict on share i of a refreshing volume the pod may see, from its source.
func (d *driver) judgeSource(ctx context.Context, rec volumeRecord, i int, sh shareSpec, memo *cycleMemo) shareVerdict {
	st := rec.Shares[i]
	src, err := memo.source(ctx, sh)
	switch {
	case apierrors.IsNotFound(err):
		// The source was deleted (or the share now points at a missing object). The share keeps
		// its last good files, as the kubelet's own secret volumes do: deleting and re-creating a
		// Secret during a rotation must not blank every consumer. Revocation is RBAC's job.
		klog.V(2).InfoS("Source of a share not found; keeping its last files", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		return d.narrowIfListChanged(rec, i, sh, shareVerdict{state: st})
	case apierrors.IsForbidden(err):
		// The driver itself lost read on the source (an admin removed its RoleBinding). That
		// is not the pod's access, which was just granted: the share keeps its last files, as
		// on any API error, and the pod is warned once with what the admin must run.
		klog.V(2).InfoS("The driver may not read the source of a share; keeping its last files", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		return d.narrowIfListChanged(rec, i, sh, d.readForbidden(st, sh))
	case err != nil:
		if !st.Exposed.same(sh.Items) {
			// The list is the share's, not the source's: what it no longer shares goes now.
			klog.ErrorS(err, "Reading the source of a share failed; keeping only what its new list still shares", "volumeID", rec.VolumeID, "share", st.String())
			return d.narrowShare(rec, i, sh, shareVerdict{state: st})
		}
		return shareVerdict{state: st, err: err}
	}

	if sh.Pin.refuses(src.UID) {
		return sourceReplaced(st, sh, src.UID)
	}
	resumed := st.ReadForbidden
	st.ReadForbidden, st.SourceReplaced = false, false
	sameSource := st.SourceNamespace == sh.SourceNamespace && st.SourceName == sh.SourceName
	sameKeys := st.Exposed.same(sh.Items)
	if !st.Revoked && sameSource && st.ResourceVersion == src.ResourceVersion && sameKeys {
		if resumed {
			return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: changeRefreshResumed, why: sh.sourceKey().String()}}
		}
		return shareVerdict{state: st}
	}
	files, err := sharedFiles(rec, i, sh, src)
	if err != nil {
		err = fmt.Errorf("%s %s/%s: %w", st.Kind, sh.SourceNamespace, sh.SourceName, err)
		if !sameKeys {
			// Not refreshed; the keys that stopped being shared still go.
			klog.ErrorS(err, "A share's list of keys changed but its source cannot be shown through it; keeping only what it still shares", "volumeID", rec.VolumeID, "share", st.String())
			return d.narrowShare(rec, i, sh, shareVerdict{state: rec.Shares[i]})
		}
		return shareVerdict{state: rec.Shares[i], err: err}
	}
	change := &shareChange{share: st.shareRef, kind: changeRefreshed,
		why: fmt.Sprintf("%s %s/%s (resourceVersion %s)", st.Kind, sh.SourceNamespace, sh.SourceName, src.ResourceVersion)}
	switch {
	case st.Revoked:
		change.kind = changeRestored
	case !sameKeys:
		change.kind, change.why = changeKeys, exposureSummary(sh)+", from "+change.why
	}
	st.Revoked = false
	st.SourceNamespace, st.SourceName, st.ResourceVersion = sh.SourceNamespace, sh.SourceName, src.ResourceVersion
	st.Exposed = sh.Items
	return shareVerdict{state: st, files: files, change: change}
}

// sharedFiles is the files share i of rec gets from src, the source as sh exposes it: an error
// when the source lacks a listed key, or the pod's items select a key the share does not expose.
func sharedFiles(rec volumeRecord, i int, sh shareSpec, src *sourceData) (map[string]atomicwriter.File, error) {
	if len(src.Missing) > 0 {
		return nil, &missingSharedKeysError{share: sh, keys: src.Missing}
	}
	return rec.project(i, src.Files, sh.Items)
}

// narrowShare is the verdict base becomes when the share's list changed and its source is not
// shown through the new list: the copy keeps only the files the new list still shares (under
// the same name, from the same key) and gains none. The volume then shows the new list, so the
// next refresh of the source (or of the list) brings the rest. A change base already reports
// (revoked, restored, refreshFailed) is kept; the rewritten copy alone makes applyVerdicts
// rebuild the view.
func (d *driver) narrowShare(rec volumeRecord, i int, sh shareSpec, base shareVerdict) shareVerdict {
	st := base.state
	held, err := atomicwriter.ReadFiles(d.store.dirOf(rec).shareDir(i))
	if err != nil {
		return shareVerdict{state: rec.Shares[i], err: fmt.Errorf("reading the copy of %s to drop keys no longer shared: %w", st.shareRef, err)}
	}
	kept := keepShared(held, rec.Items, i, st.Exposed, sh.Items)
	st.Exposed = sh.Items
	base.state = st
	if len(kept) == len(held) {
		return base // nothing the pod sees changes; the record notes the new list
	}
	base.files = kept
	if base.change == nil {
		base.change = &shareChange{share: st.shareRef, kind: changeKeys, why: exposureSummary(sh) + "; files no longer shared were removed"}
	}
	return base
}

// narrowIfListChanged is base, narrowed (narrowShare) when the share's list is not the one
// share i of rec was made through.
func (d *driver) narrowIfListChanged(rec volumeRecord, i int, sh shareSpec, base shareVerdict) shareVerdict {
	if rec.Shares[i].Exposed.same(sh.Items) {
		return base
	}
	return d.narrowShare(rec, i, sh, base)
}

// exposureSummary says what sh exposes, for an event: the names it shares, never others.
func exposureSummary(sh shareSpec) string {
	if sh.Items.all() {
		return "it shares every key of its source"
	}
	return "it shares only " + quoteAll(sh.Items.names())
}

// revokeShare is the verdict on a share the pod may no longer see: revoked, reported once.
func revokeShare(st shareState, why string) shareVerdict {
	if st.Revoked {
		return shareVerdict{state: st}
	}
	// Whether the driver may read the source is judged again, and told again, when access
	// comes back.
	st.Revoked, st.ReadForbidden = true, false
	return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: changeRevoked, why: why}}
}

// restoreShare is the verdict on a share of a volume that does not refresh, which the pod may
// see: its copy, kept while it was revoked, is exactly what comes back.
func restoreShare(st shareState) shareVerdict {
	if !st.Revoked {
		return shareVerdict{state: st}
	}
	st.Revoked = false
	return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: changeRestored}}
}

// sourceReplaced is the verdict on a share whose source is another object than the one it was
// made for: its files stay, and the pod is told once, with what an admin runs to accept it.
func sourceReplaced(st shareState, sh shareSpec, uid string) shareVerdict {
	if st.SourceReplaced {
		return shareVerdict{state: st}
	}
	st.SourceReplaced = true
	return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: changeRefreshFailed, why: replacedMessage(sh, uid)}}
}

// readForbidden is the verdict on a share whose source the driver may no longer read: its
// files stay, and the pod is told once, with what an admin must run.
func (d *driver) readForbidden(st shareState, sh shareSpec) shareVerdict {
	if st.ReadForbidden {
		return shareVerdict{state: st}
	}
	st.ReadForbidden = true
	// A revoked share has no files to keep: its access is back, but its files are not.
	what := "keeps its last files and is not refreshed"
	if st.Revoked {
		what = "may be used again, but its files stay away until the driver may read its source"
	}
	return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: changeRefreshFailed,
		why: fmt.Sprintf("%s: the driver may not read %s; %s", what, sh.sourceKey(), d.account.grantReadHint(sh.sourceKey()))}}
}

func (d *driver) event(rec volumeRecord, eventType, reason, format string, args ...any) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: rec.PodNamespace, Name: rec.PodName, UID: types.UID(rec.PodUID)}
	d.events.Eventf(ref, eventType, reason, format, args...)
}

func quote(s string) string { return "\"" + s + "\"" }
