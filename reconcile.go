package main

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Reconciling one volume with what the cluster says now.

// Event reasons recorded on consuming pods.
const (
	reasonRevoked   = "SharedResourceAccessRevoked"
	reasonRestored  = "SharedResourceAccessRestored"
	reasonRefreshed = "SharedResourceRefreshed"
	reasonConflict  = "SharedResourceFileConflict"
	// The driver lost (and regained) read access to a source: the volume keeps its last data.
	reasonRefreshFailed  = "SharedResourceRefreshFailed"
	reasonRefreshResumed = "SharedResourceRefreshResumed"
)

// cycleMemo remembers, for one pass over volumes, each access decision and each source fetched.
type cycleMemo struct {
	d       *driver
	access  map[accessKey]memoDecision
	sources map[sourceKey]memoSource
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
	return &cycleMemo{d: d, access: map[accessKey]memoDecision{}, sources: map[sourceKey]memoSource{}, shares: map[shareRef]memoShare{}}
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

func (m *cycleMemo) source(ctx context.Context, key sourceKey) (*sourceData, error) {
	if r, ok := m.sources[key]; ok {
		return r.data, r.err
	}
	data, err := m.d.sources.refresh(ctx, key)
	m.sources[key] = memoSource{data, err}
	return data, err
}

// reconcile brings one volume to what the cluster says it should be. Each share is judged on
// its own (judgeShare): granted and changed, its copy is updated; revoked (or deleted), it stops
// contributing files; an error leaves it as it is. Then, if any share's files changed, the pod's
// view is rebuilt from the granted shares' copies in one atomic swap, and the record with the
// shares' new states is saved: the one change a reconcile makes to a record.
func (d *driver) reconcile(ctx context.Context, rec volumeRecord, memo *cycleMemo) error {
	if !d.podDirExists(rec.PodUID) {
		// The kubelet removes a pod's dir only after its volumes are unmounted; a record that
		// outlives it is one whose publish never completed. Nobody will unpublish it.
		klog.InfoS("Pod of volume is gone; cleaning the volume", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName))
		return d.teardown(rec)
	}
	vol := d.store.dirOf(rec)
	vol.dropRevokedCopies(rec)
	next := rec.clone() // the record to save: rec with each share's judged state
	var changes []shareChange
	var firstErr error
	for i := range rec.Shares {
		verdict, err := d.judgeShare(ctx, rec, i, memo)
		if err == nil && verdict.files != nil {
			err = vol.writeCopy(i, verdict.files)
		}
		if err != nil {
			klog.ErrorS(err, "Checking a share of a volume failed; it is left as it was", "volumeID", rec.VolumeID, "share", rec.Shares[i].String())
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		next.Shares[i] = verdict.state
		if verdict.change != nil {
			changes = append(changes, *verdict.change)
		}
	}
	// A volume recovered at start has its view rebuilt once from these verdicts even when
	// nothing changed: a crash mid-reconcile may have left a view its record does not describe.
	// Rebuilding it here, not at recovery, never shows a pod files it lost before the crash.
	unverified := firstErr == nil && d.store.viewUnverified(rec.VolumeID)
	if len(changes) == 0 && !unverified {
		return firstErr
	}
	var conflicts []pathConflict
	if filesChanged := slices.ContainsFunc(changes, shareChange.changesFiles); filesChanged || unverified {
		// The crash points are a change's steps (crash_test.go); a rebuild that changes nothing
		// has none.
		if filesChanged {
			d.crash.reached(stepReconcileCopies)
		}
		var err error
		if conflicts, err = vol.rebuildView(next.Shares); err != nil {
			return err
		}
		if filesChanged {
			d.crash.reached(stepReconcileData)
		}
	}
	if err := d.store.save(next); err != nil {
		return err
	}
	d.store.viewVerified(rec.VolumeID)
	if len(changes) > 0 {
		d.crash.reached(stepReconcileRecord)
	}
	vol.dropRevokedCopies(next)
	d.reportChanges(next, changes, conflicts)
	return firstErr
}

// reportChanges counts a reconcile's changes and tells the pod about them.
func (d *driver) reportChanges(rec volumeRecord, changes []shareChange, conflicts []pathConflict) {
	for _, c := range changes {
		if c.changesFiles() {
			d.metrics.volumeChanged(c.kind)
		}
		switch c.kind {
		case "revoked":
			d.event(rec, corev1.EventTypeWarning, reasonRevoked, "The files of %s were removed from the volume: %s", c.share, c.why)
		case "restored":
			d.event(rec, corev1.EventTypeNormal, reasonRestored, "Access to %s is granted again; its files are back", c.share)
		case "refreshed":
			d.event(rec, corev1.EventTypeNormal, reasonRefreshed, "Updated %s from %s", c.share, c.why)
		case "refreshFailed":
			d.event(rec, corev1.EventTypeWarning, reasonRefreshFailed, "%s %s", c.share, c.why)
		case "refreshResumed":
			d.event(rec, corev1.EventTypeNormal, reasonRefreshResumed, "The driver may read %s again; its files are refreshed again", c.why)
		}
		klog.InfoS("Volume changed", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName), "share", c.share.String(), "change", c.kind)
	}
	for _, c := range conflicts {
		d.event(rec, corev1.EventTypeWarning, reasonConflict, "%s and %s both provide the file %q; %s keeps it (the first share listed wins)", c.Kept, c.Dropped, c.Path, c.Kept)
	}
}

// shareChange is one share's change in a reconcile, for events and metrics.
type shareChange struct {
	share shareRef
	kind  string // revoked, restored, refreshed; refreshFailed, refreshResumed (no file changes)
	why   string
}

// changesFiles says whether the change alters the files the pod sees (so the view is rebuilt).
func (c shareChange) changesFiles() bool {
	return c.kind != "refreshFailed" && c.kind != "refreshResumed"
}

// shareVerdict is what a reconcile decided for one share.
type shareVerdict struct {
	state  shareState                   // the share's next state, saved with the record
	files  map[string]atomicwriter.File // its new copy; nil: the copy stays as it is
	change *shareChange                 // what to report; nil: the share is as it was
}

// judgeShare decides what share i of rec shows now. It changes nothing, on disk or in rec: it
// returns the share's next state (with its new files, if any) and the change to report. On an
// error the caller leaves the share as it was.
func (d *driver) judgeShare(ctx context.Context, rec volumeRecord, i int, memo *cycleMemo) (shareVerdict, error) {
	st := rec.Shares[i] // a copy: the next state is built on it
	unchanged := shareVerdict{state: st}
	sh, err := memo.share(ctx, st.shareRef)
	if apierrors.IsNotFound(err) {
		return revokeShare(st, st.Kind.shareTypeName()+" "+quote(st.Name)+" was deleted"), nil
	}
	if err != nil {
		return unchanged, err
	}
	key := rec.accessKey(i)
	dec, err := memo.decision(ctx, key)
	if err != nil {
		return unchanged, err
	}
	if !dec.Allowed {
		return revokeShare(st, deniedMessage(key, dec.Reason)), nil
	}

	if !rec.Refresh {
		// refreshResource=false: the files published are the files shown, on every path; only
		// access decides whether they are visible.
		if !st.Revoked {
			return unchanged, nil
		}
		st.Revoked = false
		return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: "restored"}}, nil
	}
	src, err := memo.source(ctx, sh.sourceKey())
	switch {
	case apierrors.IsNotFound(err):
		// The source was deleted (or the share now points at a missing object). The share keeps
		// its last good files, as the kubelet's own secret volumes do: deleting and re-creating a
		// Secret during a rotation must not blank every consumer. Revocation is RBAC's job.
		klog.V(2).InfoS("Source of a share not found; keeping its last files", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		return unchanged, nil
	case apierrors.IsForbidden(err):
		// The driver itself lost read on the source (an admin removed its RoleBinding). That
		// is not the pod's access, which was just granted: the share keeps its last files, as
		// on any API error, and the pod is warned once with what the admin must run.
		klog.V(2).InfoS("The driver may not read the source of a share; keeping its last files", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		if st.ReadForbidden {
			return unchanged, nil
		}
		st.ReadForbidden = true
		// A revoked share has no files to keep: its access is back, but its files are not.
		what := "keeps its last files and is not refreshed"
		if st.Revoked {
			what = "may be used again, but its files stay away until the driver may read its source"
		}
		return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: "refreshFailed",
			why: fmt.Sprintf("%s: the driver may not read %s; %s", what, sh.sourceKey(), d.account.grantReadHint(sh.sourceKey()))}}, nil
	case err != nil:
		return unchanged, err
	}

	resumed := st.ReadForbidden
	st.ReadForbidden = false
	sameSource := st.SourceNamespace == sh.SourceNamespace && st.SourceName == sh.SourceName
	if !st.Revoked && sameSource && st.ResourceVersion == src.ResourceVersion {
		if resumed {
			return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: "refreshResumed", why: sh.sourceKey().String()}}, nil
		}
		return unchanged, nil
	}
	files, err := rec.project(i, src.Files)
	if err != nil {
		return unchanged, fmt.Errorf("%s %s/%s: %w", st.Kind, sh.SourceNamespace, sh.SourceName, err)
	}
	change := &shareChange{share: st.shareRef, kind: "refreshed",
		why: fmt.Sprintf("%s %s/%s (resourceVersion %s)", st.Kind, sh.SourceNamespace, sh.SourceName, src.ResourceVersion)}
	if st.Revoked {
		change.kind = "restored"
	}
	st.Revoked = false
	st.SourceNamespace, st.SourceName, st.ResourceVersion = sh.SourceNamespace, sh.SourceName, src.ResourceVersion
	return shareVerdict{state: st, files: files, change: change}, nil
}

// revokeShare is the verdict on a share the pod may no longer see: revoked, reported once.
func revokeShare(st shareState, why string) shareVerdict {
	if st.Revoked {
		return shareVerdict{state: st}
	}
	// Whether the driver may read the source is judged again, and told again, when access
	// comes back.
	st.Revoked, st.ReadForbidden = true, false
	return shareVerdict{state: st, change: &shareChange{share: st.shareRef, kind: "revoked", why: why}}
}

func (d *driver) event(rec volumeRecord, eventType, reason, format string, args ...any) {
	if d.events == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: rec.PodNamespace, Name: rec.PodName, UID: types.UID(rec.PodUID)}
	d.events.Eventf(ref, eventType, reason, format, args...)
}

func quote(s string) string { return "\"" + s + "\"" }
