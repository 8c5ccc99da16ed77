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

	"golang.org/x/sync/singleflight"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// accessKey is what one decision is about: all volumes with the same key share it.
type accessKey struct {
	Namespace      string
	ServiceAccount string
	Kind           shareKind
	Share          string
}

func (k accessKey) String() string {
	return fmt.Sprintf("%s/%s/%s/%s", k.Namespace, k.ServiceAccount, k.Kind, k.Share)
}

// decision is an answer from the API server.
type decision struct {
	Allowed bool
	Reason  string // the authorizer's reason, shown to the admin on denial
}

// authorizer answers access questions, caching grants for a short TTL so that a burst of
// publishes by one service account costs one SubjectAccessReview. Denials are never cached: a
// newly granted pod must not wait for a TTL, and the kubelet's retry backoff bounds their cost.
// Errors are never cached and never mean "allowed".
//
// A denial is believed only from an API server whose RBAC caches are loaded. A kube-apiserver
// that has just started serves requests before they are (its readiness check informer-sync
// fails until then), and its authorizer then denies what RBAC grants: taken as an answer, that
// would revoke every volume the relist checks in those seconds. So a denial is followed by a look at
// that check (kubeClient.authorizerReady): failing (or no answer), the review counts as an error, which revokes
// nothing and is retried; ok, the review is asked once more and that answer stands (the first
// may have come just before the caches were loaded). A denial costs three requests, a grant
// one. Only that check is asked: an API server unready for another reason (its etcd, a
// shutdown) still authorizes from loaded caches, and its denials must not wait. (Behind a load
// balancer over several API servers, the check may be answered by another one than the review;
// a starting one is usually kept out of the balancer until it is ready.)
type authorizer struct {
	sar   sarCreator
	ready func(context.Context) error // nil once RBAC's caches are loaded (kubeClient.authorizerReady)
	ttl   time.Duration
	now   func() time.Time
	group singleflight.Group

	mu      sync.Mutex
	granted map[accessKey]time.Time // grant time
}

func newAuthorizer(sar sarCreator, ready func(context.Context) error, ttl time.Duration) *authorizer {
	return &authorizer{sar: sar, ready: ready, ttl: ttl, now: time.Now, granted: map[accessKey]time.Time{}}
}

// check answers a publish: from the grant cache when it can, else as recheck does.
func (a *authorizer) check(ctx context.Context, key accessKey) (decision, error) {
	if a.cachedGrant(key) {
		return decision{Allowed: true, Reason: "cached grant"}, nil
	}
	return a.recheck(ctx, key)
}

// recheck always asks the API server (the relist must see revocations), and refreshes the grant
// cache with the answer. Concurrent calls for one key share one request.
func (a *authorizer) recheck(ctx context.Context, key accessKey) (decision, error) {
	v, err, _ := a.group.Do(key.String(), func() (any, error) {
		d, err := a.review(ctx, key)
		if err != nil {
			return decision{}, err
		}
		a.mu.Lock()
		if d.Allowed {
			a.granted[key] = a.now()
		} else {
			delete(a.granted, key)
		}
		a.mu.Unlock()
		return d, nil
	})
	if err != nil {
		return decision{}, err
	}
	return v.(decision), nil
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

// review asks the API server, and believes a denial only from one that is ready (see authorizer).
func (a *authorizer) review(ctx context.Context, key accessKey) (decision, error) {
	d, err := a.ask(ctx, key)
	if err != nil || d.Allowed {
		return d, err
	}
	if err := a.ready(ctx); err != nil {
		return decision{}, fmt.Errorf("SubjectAccessReview for service account %s/%s on %s %q denied access, but the API server has not loaded "+
			"its RBAC caches (it is starting), so the denial is not trusted; will ask again: %w",
			key.Namespace, key.ServiceAccount, key.Kind.shareTypeName(), key.Share, err)
	}
	return a.ask(ctx, key)
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
				Group:     shareGroup,
				Resource:  key.Kind.shareResource(),
				Name:      key.Share,
			},
		},
	}
	res, err := a.sar.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("SubjectAccessReview for service account %s/%s on %s %q: %w", key.Namespace, key.ServiceAccount, key.Kind.shareTypeName(), key.Share, err)
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
		key.Namespace, key.ServiceAccount, key.Kind.shareTypeName(), key.Share, key.Namespace,
		shareGroup, key.Kind.shareResource(), key.Share, key.ServiceAccount, key.Namespace, key.Namespace)
	if reason != "" {
		msg += "; authorizer said: " + reason
	}
	return msg
}
