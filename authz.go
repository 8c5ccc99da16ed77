package main

// Authorization: may the pod's service account `use` the share? Asked of the API server with a
// SubjectAccessReview that carries the identity a real service-account token would have, so a
// grant to the user, to the group system:serviceaccounts:<ns> or to every service account works
// exactly as RBAC would decide for the pod itself.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
	"golang.org/x/sync/singleflight"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// accessKey is what one decision is about: all volumes with the same key share it.
type accessKey struct {
	Namespace      string
	ServiceAccount string
	Kind           share.Kind
	Share          string
}

func (k accessKey) String() string {
	return fmt.Sprintf("%s/%s/%s/%s", k.Namespace, k.ServiceAccount, k.Kind, k.Share)
}

// accessKeyOf is the decision share i of volume r needs: its pod's service account using the share.
func accessKeyOf(r volume.Record, i int) accessKey {
	s := r.Shares[i]
	return accessKey{Namespace: r.PodNamespace, ServiceAccount: r.ServiceAccount, Kind: s.Kind, Share: s.Name}
}

// decision is an answer from the API server.
type decision struct {
	Allowed bool
	Reason  string // the authorizer's reason, shown to the admin on denial
}

// authorizer answers access questions, caching grants for a short TTL so that a burst of
// publishes by one service account costs one SubjectAccessReview. Denials are never cached: a
// newly granted pod must not wait for a TTL, and the kubelet's retry backoff bounds their cost.
// Errors are never cached and never mean "allowed". Any denial drops the key's cached grant, and
// a grant asked before a denial (by any key) came is not cached.
//
// The relist (recheck) believes a denial only from an API server whose RBAC caches are loaded.
// A kube-apiserver that has just started serves requests before they are, and its authorizer
// then denies what RBAC grants: taken as an answer, that would revoke every volume the relist
// checks in those seconds. So a denial the relist gets is followed by a look at the API
// server's readiness check informer-sync (kubeClient.rbacLoading). Listed as failing, the denial
// is held back: the review counts as an error, which revokes nothing, and is asked again next
// cycle; but only for the grace (loadingGrace, or two relist intervals if longer) from the
// first look that held that key's denial back, after which it stands, and so do the key's later
// denials while the API server still says so: an informer can stay unsynced on a running API
// server, and revocations must not wait for good. A hold ends when the key gets a grant, or an
// answer asked while the API server did not say it was loading, and one whose last look is
// older than holdForgotten graces is forgotten (its volume gone, or an API server that loaded
// long ago); a driver restarted starts its holds anew. Not listed as failing (ok, or the GET
// failed, or the check is not there to read), the review is asked once more and that answer
// stands: the first may have come just before the caches were loaded. So a relist's denial
// costs three requests at most. A publish's denial is answered as it comes (one review): it
// revokes nothing, and the kubelet retries it. (Behind a load balancer over several API
// servers, the check and the second review may be answered by another one than the first
// review; a starting one is usually kept out of the balancer until it is ready.)
type authorizer struct {
	sar         sarCreator
	rbacLoading func(context.Context) bool // whether the API server says it is loading its RBAC caches (kubeClient.rbacLoading)
	ttl         time.Duration
	grace       time.Duration // how long the relist holds a key's denials back while the API server loads RBAC
	now         func() time.Time
	group       singleflight.Group

	mu      sync.Mutex
	granted map[accessKey]time.Time // grant time
	denials uint64                  // how many denials came: a grant asked before one is not cached
	held    map[accessKey]hold      // the keys whose denial the relist holds back
}

// hold is a key's denials held back: since the first look that held one, and the last.
type hold struct{ since, seen time.Time }

// loadingGrace is the least time the relist holds a key's denials back while the API server
// says its RBAC caches are loading: they load in seconds when it starts.
const loadingGrace = 2 * time.Minute

// holdForgotten is how many graces after its last look a hold is forgotten.
const holdForgotten = 5

// newAuthorizer answers with sar, caching grants for ttl; the relist's denials are held back as
// the authorizer's doc says, for loadingGrace or two relist intervals, whichever is longer.
func newAuthorizer(sar sarCreator, rbacLoading func(context.Context) bool, ttl, relistInterval time.Duration) *authorizer {
	return &authorizer{sar: sar, rbacLoading: rbacLoading, ttl: ttl, grace: max(loadingGrace, 2*relistInterval), now: time.Now,
		granted: map[accessKey]time.Time{}, held: map[accessKey]hold{}}
}

// check answers a publish: from the grant cache when it can, else from one review. Concurrent
// calls for one key share one request.
func (a *authorizer) check(ctx context.Context, key accessKey) (decision, error) {
	if a.cachedGrant(key) {
		return decision{Allowed: true, Reason: "cached grant"}, nil
	}
	v, err, _ := a.group.Do("check/"+key.String(), func() (any, error) {
		before := a.denialCount()
		d, err := a.ask(ctx, key)
		if err == nil {
			a.noteAnswer(key, d.Allowed, before)
		}
		return d, err
	})
	if err != nil {
		return decision{}, err
	}
	return v.(decision), nil
}

// recheck answers the relist: it always asks the API server (the relist must see revocations),
// believes a denial only as the authorizer's doc says, and refreshes the grant cache with the
// answer. Concurrent calls for one key share one request.
func (a *authorizer) recheck(ctx context.Context, key accessKey) (decision, error) {
	v, err, _ := a.group.Do("recheck/"+key.String(), func() (any, error) {
		before := a.denialCount()
		d, err := a.ask(ctx, key)
		if err != nil {
			return decision{}, err
		}
		if d.Allowed {
			a.endHold(key)
		} else {
			a.noteAnswer(key, false, before)
			before = a.denialCount()
			if d, err = a.confirmDenial(ctx, key, d); err != nil {
				return decision{}, err
			}
		}
		a.noteAnswer(key, d.Allowed, before)
		return d, nil
	})
	if err != nil {
		return decision{}, err
	}
	return v.(decision), nil
}

// confirmDenial is what the relist makes of denied, a review's denial of key: an error while the
// API server says its RBAC caches are loading, until the key's hold is a grace old; else the
// answer of the review asked again.
func (a *authorizer) confirmDenial(ctx context.Context, key accessKey, denied decision) (decision, error) {
	if !a.rbacLoading(ctx) {
		d, err := a.ask(ctx, key)
		if err == nil {
			a.endHold(key) // an answer believed; a failed review keeps the hold
		}
		return d, err
	}
	now := a.now()
	a.mu.Lock()
	for k, h := range a.held {
		if now.Sub(h.seen) > holdForgotten*a.grace {
			delete(a.held, k)
		}
	}
	h, ok := a.held[key]
	if !ok {
		h.since = now
	}
	h.seen = now
	a.held[key] = h
	a.mu.Unlock()
	if now.Sub(h.since) >= a.grace {
		// The grace is spent: the denial stands, and so do the next ones while the API server
		// still says it is loading (the hold stays, looked at each cycle).
		return denied, nil
	}
	return decision{}, fmt.Errorf("SubjectAccessReview for service account %s/%s on %s %q denied access, but the API server says it is still loading "+
		"its RBAC caches (its readiness check informer-sync fails, as while it starts), so the denial is held back, until %v after the first one held; "+
		"will ask again", key.Namespace, key.ServiceAccount, key.Kind.TypeName(), key.Share, a.grace)
}

// endHold ends key's hold, if it has one.
func (a *authorizer) endHold(key accessKey) {
	a.mu.Lock()
	delete(a.held, key)
	a.mu.Unlock()
}

func (a *authorizer) denialCount() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.denials
}

// noteAnswer notes an answer about key: a grant is cached, unless a denial came since before
// (denialCount when it was asked); a denial drops the cached grant.
func (a *authorizer) noteAnswer(key accessKey, allowed bool, before uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !allowed:
		a.denials++
		delete(a.granted, key)
	case a.denials == before:
		a.granted[key] = a.now()
	}
}

func (a *authorizer) cachedGrant(key accessKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.granted[key]
	if !ok {
		return false
	}
	if a.now().Sub(t) >= a.ttl {
		delete(a.granted, key)
		return false
	}
	return true
}

// ask sends one SubjectAccessReview as the pod's service account.
func (a *authorizer) ask(ctx context.Context, key accessKey) (decision, error) {
	sar := &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + key.Namespace + ":" + key.ServiceAccount,
			// The groups a service-account token authenticates with; without them a grant to
			// system:serviceaccounts:<ns> would be invisible to the review.
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + key.Namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: key.Namespace,
				Verb:      "use",
				Group:     share.Group,
				Resource:  key.Kind.Resource(),
				Name:      key.Share,
			},
		},
	}
	res, err := a.sar.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("SubjectAccessReview for service account %s/%s on %s %q: %w", key.Namespace, key.ServiceAccount, key.Kind.TypeName(), key.Share, err)
	}
	reason := res.Status.Reason
	if res.Status.EvaluationError != "" {
		reason += " (evaluation error: " + res.Status.EvaluationError + ")"
	}
	return decision{Allowed: res.Status.Allowed && !res.Status.Denied, Reason: reason}, nil
}

// deniedMessage tells a cluster admin exactly which RBAC rule would let the pod in.
func deniedMessage(key accessKey, reason string) string {
	msg := fmt.Sprintf("service account %s/%s may not use %s %q: grant the verb \"use\" with a Role in namespace %s (or a ClusterRole) "+
		"with the rule {apiGroups: [%s], resources: [%s], resourceNames: [%s], verbs: [use]}, bound to ServiceAccount %s in namespace %s "+
		"(or to the group system:serviceaccounts:%s)",
		key.Namespace, key.ServiceAccount, key.Kind.TypeName(), key.Share, key.Namespace,
		share.Group, key.Kind.Resource(), key.Share, key.ServiceAccount, key.Namespace, key.Namespace)
	if reason != "" {
		msg += "; authorizer said: " + reason
	}
	return msg
}
