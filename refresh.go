package main

// Keeping published volumes right after publish: the periodic relist (revocation, restoration,
// refresh) and the immediate reaction to share changes seen by the CRD watch.
//
// One cycle asks one SubjectAccessReview per distinct (namespace, service account, kind, share)
// and GETs each distinct source once, however many volumes share them. Any API error leaves the
// volume exactly as it is: an outage must never revoke access, and the next cycle retries.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Event reasons recorded on consuming pods.
const (
	reasonRevoked   = "SharedResourceAccessRevoked"
	reasonRestored  = "SharedResourceAccessRestored"
	reasonRefreshed = "SharedResourceRefreshed"
)

// cycleMemo remembers, for one pass over volumes, each access decision and each source fetched.
type cycleMemo struct {
	d       *driver
	access  map[accessKey]memoDecision
	sources map[sourceKey]memoSource
	shares  map[shareRef]memoShare
}

type memoShare struct {
	sh  share
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
func (m *cycleMemo) share(ctx context.Context, ref shareRef) (share, error) {
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
	dec, err := m.d.authz.check(ctx, key, true)
	m.access[key] = memoDecision{dec, err}
	return dec, err
}

func (m *cycleMemo) source(ctx context.Context, key sourceKey) (*sourceData, error) {
	if r, ok := m.sources[key]; ok {
		return r.data, r.err
	}
	data, err := m.d.sources.fetch(ctx, key, true)
	m.sources[key] = memoSource{data, err}
	return data, err
}

// runRelist runs a cycle every interval until ctx ends.
func (d *driver) runRelist(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		start := time.Now()
		n := d.relistCycle(ctx)
		if d.metrics != nil {
			d.metrics.relist.Observe(time.Since(start).Seconds())
		}
		klog.V(3).InfoS("Relist cycle done", "volumes", n, "duration", time.Since(start))
	}, interval)
}

// relistCycle reconciles every volume once and returns how many it looked at.
func (d *driver) relistCycle(ctx context.Context) int {
	memo := d.newCycleMemo()
	recs := d.store.list()
	for _, rec := range recs {
		d.reconcileLocked(ctx, rec.VolumeID, memo)
	}
	return len(recs)
}

// shareRef names a share; the share-event queue holds them.
type shareRef struct {
	Kind shareKind
	Name string
}

// runShareEvents reconciles the volumes of each changed share as the CRD watch reports it.
func (d *driver) runShareEvents(ctx context.Context, q workqueue.TypedInterface[shareRef]) {
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for {
		ref, quit := q.Get()
		if quit {
			return
		}
		memo := d.newCycleMemo()
		for _, rec := range d.store.list() {
			if rec.Kind == ref.Kind && rec.Share == ref.Name {
				d.reconcileLocked(ctx, rec.VolumeID, memo)
			}
		}
		q.Done(ref)
	}
}

// reconcileLocked takes the volume's lock and reconciles it. A volume whose lock is held is
// being published or unpublished right now; the next pass will see it.
func (d *driver) reconcileLocked(ctx context.Context, volumeID string, memo *cycleMemo) {
	if !d.locks.tryLock(volumeID) {
		return
	}
	defer d.locks.unlock(volumeID)
	rec, ok := d.store.get(volumeID) // re-read under the lock
	if !ok {
		return
	}
	if err := d.reconcile(ctx, rec, memo); err != nil {
		klog.ErrorS(err, "Reconciling volume failed; it is left as it was and retried next cycle", "volumeID", volumeID)
	}
}

// reconcile brings one volume to what the cluster says it should be.
func (d *driver) reconcile(ctx context.Context, rec volumeRecord, memo *cycleMemo) error {
	if !d.podDirExists(rec.PodUID) {
		// The kubelet removes a pod's dir only after its volumes are unmounted; a record that
		// outlives it is one whose publish never completed. Nobody will unpublish it.
		klog.InfoS("Pod of volume is gone; cleaning the volume", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName))
		return d.teardown(rec)
	}

	sh, err := memo.share(ctx, shareRef{Kind: rec.Kind, Name: rec.Share})
	if apierrors.IsNotFound(err) {
		return d.revoke(rec, rec.Kind.shareTypeName()+" "+quote(rec.Share)+" was deleted")
	}
	if err != nil {
		return err
	}
	dec, err := memo.decision(ctx, rec.accessKey())
	if err != nil {
		return err
	}
	if !dec.Allowed {
		return d.revoke(rec, deniedMessage(rec.accessKey(), dec.Reason))
	}

	if !rec.Refresh {
		// refreshResource=false: the data published is the data shown, on every path; only
		// access decides whether it is visible.
		if rec.Revoked {
			return d.restoreHeld(rec)
		}
		return nil
	}

	src, err := memo.source(ctx, sourceKey{Kind: rec.Kind, Namespace: sh.SourceNamespace, Name: sh.SourceName})
	if apierrors.IsNotFound(err) {
		// The source was deleted (or the share now points at a missing object). The volume keeps
		// its last good data, as the kubelet's own secret volumes do: deleting and re-creating a
		// Secret during a rotation must not blank every consumer. Revocation is RBAC's job.
		klog.V(2).InfoS("Source of volume not found; keeping its last data", "volumeID", rec.VolumeID,
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName))
		return nil
	}
	if err != nil {
		return err
	}
	sameSource := rec.SourceNamespace == sh.SourceNamespace && rec.SourceName == sh.SourceName
	if !rec.Revoked && sameSource && rec.ResourceVersion == src.ResourceVersion {
		return nil
	}
	files, err := rec.project(src.Files)
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", rec.Kind, sh.SourceNamespace, sh.SourceName, err)
	}
	if err := writeVolume(d.store.dataDir(rec.VolumeID), files, rec.GID); err != nil {
		return err
	}
	wasRevoked := rec.Revoked
	rec.Revoked = false
	rec.SourceNamespace, rec.SourceName, rec.ResourceVersion = sh.SourceNamespace, sh.SourceName, src.ResourceVersion
	if err := d.store.save(rec); err != nil {
		return err
	}
	if wasRevoked {
		d.metrics.volumeChanged("restored")
		d.event(rec, corev1.EventTypeNormal, reasonRestored, "Access to %s %q is granted again; its data is back", rec.Kind.shareTypeName(), rec.Share)
	} else {
		d.metrics.volumeChanged("refreshed")
		d.event(rec, corev1.EventTypeNormal, reasonRefreshed, "Updated from %s %s/%s (resourceVersion %s)", rec.Kind, sh.SourceNamespace, sh.SourceName, src.ResourceVersion)
	}
	klog.V(2).InfoS("Volume updated", "volumeID", rec.VolumeID, "restored", wasRevoked, "resourceVersion", src.ResourceVersion)
	return nil
}

// revoke empties the volume atomically; the mount stays (a running pod's mount cannot be taken
// away), but no file of the share is reachable through it. A refreshResource=false volume's data
// is first moved out of the pod's view so it can come back unchanged.
func (d *driver) revoke(rec volumeRecord, why string) error {
	if rec.Revoked {
		return nil
	}
	data := d.store.dataDir(rec.VolumeID)
	if !rec.Refresh {
		// A held copy from an interrupted revoke is the original: never overwrite it.
		if _, err := os.Lstat(d.store.heldDir(rec.VolumeID)); errors.Is(err, os.ErrNotExist) {
			files, err := readVolumeFiles(data)
			if err != nil {
				return err
			}
			if err := writeVolume(d.store.heldDir(rec.VolumeID), files, rec.GID); err != nil {
				return err
			}
		}
	}
	d.crash.reached("revoke:held")
	if err := writeVolume(data, nil, rec.GID); err != nil {
		return err
	}
	d.crash.reached("revoke:emptied")
	rec.Revoked = true
	if err := d.store.save(rec); err != nil {
		return err
	}
	d.crash.reached("revoke:record")
	d.metrics.volumeChanged("revoked")
	d.event(rec, corev1.EventTypeWarning, reasonRevoked, "The volume's files were removed: %s", why)
	klog.InfoS("Volume revoked", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName), "share", rec.Share)
	return nil
}

// restoreHeld brings back a refreshResource=false volume's original data.
func (d *driver) restoreHeld(rec volumeRecord) error {
	held := d.store.heldDir(rec.VolumeID)
	files, err := readVolumeFiles(held)
	if err != nil {
		return err
	}
	if err := writeVolume(d.store.dataDir(rec.VolumeID), files, rec.GID); err != nil {
		return err
	}
	d.crash.reached("restore:data")
	rec.Revoked = false
	if err := d.store.save(rec); err != nil {
		return err
	}
	d.crash.reached("restore:record")
	// The held dir lives inside the volume's own tmpfs, under a name the driver chose.
	if err := os.RemoveAll(held); err != nil {
		klog.ErrorS(err, "Removing held data failed", "volumeID", rec.VolumeID)
	}
	d.metrics.volumeChanged("restored")
	d.event(rec, corev1.EventTypeNormal, reasonRestored, "Access to %s %q is granted again; its data is back", rec.Kind.shareTypeName(), rec.Share)
	klog.InfoS("Volume restored", "volumeID", rec.VolumeID, "pod", klog.KRef(rec.PodNamespace, rec.PodName))
	return nil
}

func (d *driver) event(rec volumeRecord, eventType, reason, format string, args ...any) {
	if d.events == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: rec.PodNamespace, Name: rec.PodName, UID: types.UID(rec.PodUID)}
	d.events.Eventf(ref, eventType, reason, format, args...)
}

func quote(s string) string { return "\"" + s + "\"" }
