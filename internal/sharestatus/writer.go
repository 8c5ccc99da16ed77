package sharestatus

// Share status: every SharedSecret and SharedConfigMap gets a Ready condition saying whether its
// source Secret/ConfigMap exists and the driver can read it, so an admin sees a broken share in
// `kubectl get sharedsecrets` (the CRDs' Ready column) before a pod fails to mount it.
//
// Status is written by the status controller (--role=status, the root's roles.go: a Deployment with
// a service account of its own), never by the node plugins, whose service account may not write it.
// Of its replicas only one writes at a time: the holder of a Lease. N writers would send N times
// the traffic for the same answer and race each other's writes. The others only campaign for the
// Lease; when the holder dies, one of them takes over within the lease duration.
//
// The check of a share without a list of keys is a GET of the source's metadata only (the
// metadata client): the status writer receives no Secret data for it. A share with a list
// (spec.items, internal/share/exposure.go) is Ready only if its source has every listed key, and key names
// come only with the data: its check GETs the whole source, keeps only which listed keys are
// missing, and drops the rest at once (nothing is cached, logged or written). Neither goes
// through the source cache, so shares that no volume on this node uses cannot evict the sources
// that volumes here do use. The status also says what a share exposes (status.exposedKeys: the
// names its list shares; absent, with no list, and the condition's message says every key).
//
// The status writer and the relist both read a share through the same filter, so a key the
// share does not list reaches no status either.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/sourceaccess"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// statusLeaseName is the Lease the drivers of one cluster compete for.
const statusLeaseName = "shared-resource-csi-status"

// statusFieldManager names the driver in the shares' managedFields.
const statusFieldManager = "shared-resource-csi"

// SourceGetter GETs a whole source object (the root's getSource): what it returns is the
// source's files, every key of it.
type SourceGetter func(ctx context.Context, key share.SourceKey, opts metav1.GetOptions) (*share.SourceData, error)

// Config is what the status writer needs; the root's roles.go wires it.
type Config struct {
	Leases rest.Interface     // coordination.k8s.io/v1; the Lease is in LeaseNamespace
	Dyn    dynamic.Interface  // status writes
	Meta   metadata.Interface // source checks of shares without a list (metadata only)
	// Sources GETs whole sources: the checks of shares with a list (which keys the source has).
	Sources SourceGetter
	Shares  *share.Index // the share informers; their caches must be synced or syncing
	// Holder prefixes the Lease holder identity, so `kubectl get lease` shows which replica
	// writes: the status controller's pod name.
	Holder         string
	LeaseNamespace string
	// LeaseDuration is how long a dead leader blocks the others; the renew deadline and retry
	// period are derived from it in client-go's usual proportions (15s/10s/2s).
	LeaseDuration time.Duration
	// Interval is how often every share's source is checked again (a source's creation or
	// deletion is not watched: the driver has no informer on Secrets or ConfigMaps).
	Interval time.Duration
	// Account is the driver's service account, named in the fix for SourceForbidden.
	Account sourceaccess.DriverAccount
}

// Run campaigns for the Lease until ctx ends and, while it holds it, keeps every
// share's Ready condition current. It returns after ctx ended and the Lease was released, so the
// next driver can take over at once after a clean shutdown.
func Run(ctx context.Context, cfg Config) error {
	if cfg.LeaseDuration < time.Second || cfg.Interval <= 0 {
		return fmt.Errorf("status writer: the lease duration (%v) must be at least 1s and the interval (%v) positive", cfg.LeaseDuration, cfg.Interval)
	}
	// Unique per process, not just per pod name: two processes under one name (a manual second
	// run) must never both believe they hold the Lease.
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	identity := cfg.Holder + "_" + hex.EncodeToString(suffix)
	w := &statusWriter{cfg: cfg, identity: identity}
	klog.InfoS("Share status writer campaigning", "lease", cfg.LeaseNamespace+"/"+statusLeaseName, "identity", identity)
	elector := &leaseElector{
		leases:   leaseClient{c: cfg.Leases, namespace: cfg.LeaseNamespace},
		name:     statusLeaseName,
		identity: identity,
		// client-go's usual proportions (15s/10s/2s); a candidate reads the Lease once per
		// relist interval, as often as it asks anything else (lease.go).
		duration:      cfg.LeaseDuration,
		renewDeadline: cfg.LeaseDuration * 2 / 3,
		retry:         cfg.LeaseDuration * 2 / 15,
		candidatePoll: cfg.Interval,
		now:           time.Now,
	}
	// run returns after ctx ended, the last term's worker returned and the Lease was released:
	// nothing is written after this returns.
	elector.run(ctx, w.lead)
	return nil
}

type statusWriter struct {
	cfg      Config
	identity string
}

// lead runs one leadership term: it checks every share now, on share events, and every
// interval, until ctx (the term) ends. The elector runs one term at a time and waits for it.
func (w *statusWriter) lead(ctx context.Context) {
	klog.InfoS("Leading the share status writer", "identity", w.identity)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[share.Ref]())
	defer q.ShutDown()
	for k, inf := range w.cfg.Shares.Informers() {
		enqueue := func(obj any) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				q.Add(share.Ref{Kind: k, Name: u.GetName()})
			}
		}
		// Registering replays every cached share as an add: the term starts with a full check.
		reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue,
			UpdateFunc: func(oldObj, newObj any) {
				if share.SpecChanged(oldObj, newObj) {
					enqueue(newObj)
				}
			},
			// A deleted share has no status to write.
		})
		if err != nil {
			klog.ErrorS(err, "Watching shares for status", "kind", k)
			continue
		}
		defer func() {
			if err := inf.RemoveEventHandler(reg); err != nil {
				klog.ErrorS(err, "Removing the share status handler", "kind", k)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	go wait.UntilWithContext(ctx, func(context.Context) {
		for k, inf := range w.cfg.Shares.Informers() {
			for _, name := range inf.GetStore().ListKeys() {
				q.Add(share.Ref{Kind: k, Name: name})
			}
		}
	}, w.cfg.Interval)

	for {
		ref, shutdown := q.Get()
		if shutdown {
			break
		}
		if err := w.sync(ctx, ref); err != nil && ctx.Err() == nil {
			// Typically a conflict with an informer a moment behind our own last write.
			klog.V(2).InfoS("Share status not written; retrying", "kind", ref.Kind.TypeName(), "share", ref.Name, "err", err)
			q.AddRateLimited(ref)
		} else {
			q.Forget(ref)
		}
		q.Done(ref)
	}
	klog.InfoS("Stopped leading the share status writer", "identity", w.identity)
}

// sync checks one share's source and writes its Ready condition if it changed.
func (w *statusWriter) sync(ctx context.Context, ref share.Ref) error {
	obj, exists, err := w.cfg.Shares.Informer(ref.Kind).GetStore().GetByKey(ref.Name)
	if err != nil || !exists {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object %T in share cache", obj)
	}
	cond, uid, seen := w.checkSource(ctx, ref.Kind, u)
	if ctx.Err() != nil {
		return ctx.Err() // the term ended: the check's error says nothing about the source
	}
	u, changed, err := statusAfterCheck(ref.Kind, u, cond, uid, seen)
	if err != nil || !changed {
		return err
	}
	// An update, not a patch: the resourceVersion makes a write based on a stale read fail
	// (and be retried) instead of undoing a newer one, and other condition types are kept.
	if _, err := w.cfg.Dyn.Resource(share.GVR(ref.Kind)).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: statusFieldManager}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile
		}
		return err
	}
	klog.V(2).InfoS("Share status updated", "kind", ref.Kind.TypeName(), "share", ref.Name,
		"ready", cond.Status, "reason", cond.Reason, "message", cond.Message)
	return nil
}

// checkSource GETs the share's source (metadata only, from the API server's watch cache) and
// returns the Ready condition that describes the answer, the UID to pin (the source's, or "" when
// it could not be read, or when a first pin may not take it: share.FirstPinRefusal), and the UID of the
// object read, pinned or not ("" when none was).
func (w *statusWriter) checkSource(ctx context.Context, k share.Kind, u *unstructured.Unstructured) (cond metav1.Condition, uid, seen string) {
	sh, err := share.FromObject(k, u)
	if err != nil {
		cond = metav1.Condition{Type: conditionReady, Status: metav1.ConditionFalse, Reason: reasonInvalidShare, Message: err.Error()}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var problem error
		var created time.Time
		uid, created, problem = w.sourceProblem(ctx, sh)
		seen = uid
		// Judged whatever else is wrong with the object (a key its list names missing): pinned
		// now, an object the pin may not take would feed running volumes once the key is added.
		if refusal := share.FirstPinRefusal(sh, u.GetCreationTimestamp().Time, sawNoSource(u), uid, created); refusal != nil {
			problem = refusal
		}
		cond = readyCondition(sh, uid, problem, w.cfg.Account)
		var refused *share.SourceNewerError
		if errors.As(problem, &refused) {
			uid = ""
		}
	}
	cond.ObservedGeneration = u.GetGeneration()
	return cond, uid, seen
}

// sourceProblem GETs the share's source, from the API server's watch cache, and says which
// object it is (its UID, "" when it could not be read, and when it was created) and what is
// wrong with it for the share: the GET's error, a *share.MissingSharedKeysError, or nil.
func (w *statusWriter) sourceProblem(ctx context.Context, sh share.Spec) (uid string, created time.Time, problem error) {
	opts := metav1.GetOptions{ResourceVersion: "0"}
	if sh.Exposed.All() {
		m, err := w.cfg.Meta.Resource(share.SourceGVR(sh.Kind)).Namespace(sh.SourceNamespace).Get(ctx, sh.SourceName, opts)
		if err != nil {
			return "", time.Time{}, err
		}
		return string(m.GetUID()), m.GetCreationTimestamp().Time, nil
	}
	d, err := w.cfg.Sources(ctx, sh.SourceKey(), opts)
	if err != nil {
		return "", time.Time{}, err
	}
	if _, missing := sh.Exposed.Filter(d.Files); len(missing) > 0 {
		return d.UID, d.Created, &share.MissingSharedKeysError{Share: sh, Keys: missing}
	}
	return d.UID, d.Created, nil
}
