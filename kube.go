package main

// The driver's clients of the API server (internal/kubeclient builds them). Besides the share
// CRDs (dynamic client) and the status writer's metadata GETs, it reads Secrets and ConfigMaps,
// creates SubjectAccessReviews and Events, and (internal/sharestatus) keeps one Lease: three
// built-in API groups.

import (
	"context"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/shared-resource/csi-driver/internal/kubeclient"
)

// kubeClient is the driver's clients (kubeclient.Clients: one REST client per API group it uses,
// all over one HTTP client, one connection pool, and one rate limiter, so --kube-api-qps bounds the
// whole driver), with the driver's requests through them as methods. Its Decoder decodes what
// getInto reads.
type kubeClient struct{ *kubeclient.Clients }

// newKubeClient builds the clients from cfg; cfg's QPS and Burst become one shared rate limiter.
func newKubeClient(cfg *rest.Config) (*kubeClient, error) {
	c, err := kubeclient.New(cfg)
	if err != nil {
		return nil, err
	}
	return &kubeClient{c}, nil
}

// sarCreator creates SubjectAccessReviews. Its method is the generated client's, so a test can
// hand the authorizer a fake clientset's SubjectAccessReviews().
type sarCreator interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// sarClient creates SubjectAccessReviews over the authorization.k8s.io/v1 REST client.
type sarClient = kubeclient.SARClient

var _ sarCreator = sarClient{}

// rbacLoading says whether the API server says it is still loading the informers its authorizer
// reads RBAC from: its readiness check informer-sync listed as failing, in GET /readyz?verbose,
// which lists each check and which every user may read (system:public-info-viewer; a check's own
// path, /readyz/informer-sync, is not granted). A starting kube-apiserver serves requests before
// they have synced. Anything else (the check passing or not listed, no answer) is not "loading".
func (k *kubeClient) rbacLoading(ctx context.Context) bool {
	// DoRaw returns the body of an unready answer (500) too, with its error.
	body, _ := k.Core.Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "[-]informer-sync ") {
			return true
		}
	}
	return false
}

// eventSink is where client-go's event broadcaster writes: core/v1 Events in the involved
// object's namespace.
type eventSink struct{ c rest.Interface }

var _ record.EventSink = eventSink{}

// The broadcaster's interface has no context; its own retry and rate limiting bound the calls.

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(context.Background()).Into(out)
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(context.Background()).Into(out)
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).
		Body(data).Do(context.Background()).Into(out)
}
