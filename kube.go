package main

// The driver's clients of the API server. Besides the share CRDs (dynamic client) and the status
// writer's metadata GETs, it reads Secrets and ConfigMaps, creates SubjectAccessReviews and
// Events, and keeps one Lease: three built-in API groups.
//
// Why not client-go's generated clientset: importing it registers every built-in API group (some
// 60 group versions, hundreds of types) in its scheme at start-up, and that alone cost about
// 14 MiB of the driver's resident memory (measured with 1000 volumes: 47.6 MiB before, 33.8 MiB
// after). REST clients over a scheme of the three groups used here send the very same requests
// (protobuf, same paths, same errors).

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
)

// kubeClient holds one REST client per API group the driver uses, all over one HTTP client (one
// connection pool) and one rate limiter (so --kube-api-qps bounds the whole driver).
type kubeClient struct {
	scheme *runtime.Scheme // core/v1, authorization/v1, coordination/v1 only
	core   rest.Interface  // /api/v1
	authz  rest.Interface  // /apis/authorization.k8s.io/v1
	coord  rest.Interface  // /apis/coordination.k8s.io/v1
	dyn    dynamic.Interface
	meta   metadata.Interface
	// decoder decodes what getInto reads: protobuf or JSON, into the object handed in.
	decoder runtime.Decoder
}

// newKubeClient builds the clients from cfg; cfg's QPS and Burst become one shared rate limiter.
func newKubeClient(cfg *rest.Config) (*kubeClient, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, authorizationv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme)
	restClient := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath = apiPath
		c.GroupVersion = &gv
		c.NegotiatedSerializer = codecs.WithoutConversion()
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	// The content types the REST clients accept (protobuf, JSON), recognised from the bytes.
	k := &kubeClient{scheme: scheme, decoder: codecs.UniversalDeserializer()}
	if k.core, err = restClient("/api", corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.authz, err = restClient("/apis", authorizationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.coord, err = restClient("/apis", coordinationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	// Both set their own content types: JSON for the share CRDs (custom resources have no
	// protobuf encoding), protobuf for metadata.
	if k.dyn, err = dynamic.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if k.meta, err = metadata.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	return k, nil
}

// sourceGetter reads the Secrets and ConfigMaps shares point at.
type sourceGetter interface {
	getSecret(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*corev1.Secret, error)
	getConfigMap(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
}

var _ sourceGetter = (*kubeClient)(nil)

func (k *kubeClient) getSecret(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := k.getInto(ctx, k.core.Get().Namespace(namespace).Resource("secrets").Name(name).
		VersionedParams(&opts, metav1.ParameterCodec), "Secret", s)
	return s, err
}

func (k *kubeClient) getConfigMap(ctx context.Context, namespace, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := k.getInto(ctx, k.core.Get().Namespace(namespace).Resource("configmaps").Name(name).
		VersionedParams(&opts, metav1.ParameterCodec), "ConfigMap", cm)
	return cm, err
}

// getInto runs req and decodes its answer, a core/v1 kind, into obj. Do(ctx).Into(obj) would
// read the body with io.ReadAll, whose doubling buffer is new memory on every call, and its
// protobuf decoder copies the object's bytes out of the envelope (runtime.Unknown.Raw) before
// decoding them, which copies the data again: for a 1 MiB Secret some 4 MiB allocated, zeroed
// and page-faulted in, most of a cold publish's CPU (perf, on a VM where page faults are dear).
// Here the body goes into a pooled buffer and the object is decoded straight from the
// envelope's bytes: one copy, the data's own (the decoded object never points into the
// buffer: generated protobuf and JSON decoders copy bytes and strings). Errors are Do's: Stream
// turns a non-2xx answer into the same API status error.
func (k *kubeClient) getInto(ctx context.Context, req *rest.Request, kind string, obj interface {
	runtime.Object
	protoUnmarshaler
}) error {
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyBuffers.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(body); err != nil {
		return fmt.Errorf("reading the answer to GET %s: %w", req.URL().Path, err)
	}
	if done, err := decodeProtobufDirect(buf.Bytes(), kind, obj); done {
		return err
	}
	_, _, err = k.decoder.Decode(buf.Bytes(), nil, obj)
	return err
}

// protoUnmarshaler is a generated API type's protobuf decoder.
type protoUnmarshaler interface{ Unmarshal([]byte) error }

// protobufMagic starts every protobuf-encoded answer of the API server, followed by a
// runtime.Unknown: typeMeta (1: apiVersion 1, kind 2), raw (2), contentEncoding (3), contentType (4).
var protobufMagic = []byte("k8s\x00")

// decodeProtobufDirect decodes the core/v1 object of kind in a protobuf answer into obj, from
// the envelope's raw bytes in place. done is false (and obj untouched) for anything else: JSON,
// another kind or version, a content encoding, a malformed envelope; the generic decoder then
// takes it, and reports what is wrong.
func decodeProtobufDirect(body []byte, kind string, obj protoUnmarshaler) (done bool, err error) {
	b, ok := bytes.CutPrefix(body, protobufMagic)
	if !ok {
		return false, nil
	}
	var apiVersion, gotKind string
	var raw []byte
	haveRaw := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, nil
		}
		b = b[n:]
		if typ != protowire.BytesType || num < 1 || num > 4 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false, nil
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false, nil
		}
		b = b[n:]
		switch num {
		case 1:
			if apiVersion, gotKind, ok = parseTypeMeta(v); !ok {
				return false, nil
			}
		case 2:
			raw, haveRaw = v, true
		case 3:
			if len(v) > 0 {
				return false, nil
			}
		}
	}
	if !haveRaw || apiVersion != "v1" || gotKind != kind {
		return false, nil
	}
	return true, obj.Unmarshal(raw)
}

// parseTypeMeta reads a runtime.TypeMeta: apiVersion (1) and kind (2).
func parseTypeMeta(b []byte) (apiVersion, kind string, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", "", false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		switch num {
		case 1:
			apiVersion = string(v)
		case 2:
			kind = string(v)
		}
	}
	return apiVersion, kind, true
}

// bodyBuffers are the response bodies' buffers (getInto); one larger than maxPooledBody (a
// Secret is at most 1 MiB, plus its metadata) is left to the garbage collector.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 4 << 20

// sarCreator creates SubjectAccessReviews. Its method is the generated client's, so a test can
// hand the authorizer a fake clientset's SubjectAccessReviews().
type sarCreator interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// sarClient creates SubjectAccessReviews over the authorization.k8s.io/v1 REST client.
type sarClient struct{ c rest.Interface }

var _ sarCreator = sarClient{}

func (s sarClient) Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	out := &authorizationv1.SubjectAccessReview{}
	err := s.c.Post().Resource("subjectaccessreviews").VersionedParams(&opts, metav1.ParameterCodec).
		Body(sar).Do(ctx).Into(out)
	return out, err
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

// leaseClient reads and writes Leases in one namespace.
type leaseClient struct {
	c         rest.Interface
	namespace string
}

func (l leaseClient) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, l.c.Get().Namespace(l.namespace).Resource("leases").Name(name).Do(ctx).Into(out)
}

func (l leaseClient) create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, l.c.Post().Namespace(l.namespace).Resource("leases").Body(lease).Do(ctx).Into(out)
}

// update writes lease if its resourceVersion is still current (a Conflict error otherwise).
func (l leaseClient) update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if lease.Name == "" {
		return nil, fmt.Errorf("lease without a name")
	}
	out := &coordinationv1.Lease{}
	return out, l.c.Put().Namespace(l.namespace).Resource("leases").Name(lease.Name).Body(lease).Do(ctx).Into(out)
}
