package main

// Specification of a cold publish's two API requests (fetchShare, publish.go): the review of the
// pod's access and the GET of the source go out together, so that a cold publish waits for the
// slower of the two, not their sum; the review decides alone what the pod is told. Fakes stand in
// for the API server, each able to hold its request until the test lets it go.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// gatedSAR answers a review with allowed (or err), but only after release is closed; started is
// closed when the request arrives.
type gatedSAR struct {
	started, release chan struct{}
	allowed          bool
	err              error
}

func (g *gatedSAR) Create(ctx context.Context, _ *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	close(g.started)
	<-g.release
	if g.err != nil {
		return nil, g.err
	}
	return &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: g.allowed, Reason: "test"}}, nil
}

// gatedSource answers the GET of Secret p/src with the Secret (or err), once release is closed.
type gatedSource struct {
	started, release chan struct{}
	err              error
}

func (g *gatedSource) getSource(ctx context.Context, key sourceKey, _ metav1.GetOptions) (*sourceData, error) {
	close(g.started)
	<-g.release
	if g.err != nil {
		return nil, g.err
	}
	return &sourceData{Files: map[string][]byte{"k": []byte("v")}, ResourceVersion: "3"}, nil
}

func newGatedDriver(t *testing.T, sar *gatedSAR, src *gatedSource) *driver {
	t.Helper()
	sources, err := newSourceCache(src, 10, 1<<20, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	shares := newShareIndex(dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme()), nil)
	if err := shares.informers[kindSecret].GetStore().Add(&unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "share"},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}},
	}}); err != nil {
		t.Fatal(err)
	}
	return &driver{shares: shares, sources: sources, authz: newAuthorizer(sar, time.Minute),
		account: "csi-sharedresource:shared-resource-csi-driver"}
}

func gated() (started, release chan struct{}) { return make(chan struct{}), make(chan struct{}) }

// fetchShareAsync runs fetchShare for pod c/pod (service account app) on the share "share".
func fetchShareAsync(d *driver) <-chan error {
	done := make(chan error, 1)
	go func() {
		v := &volumeRequest{VolumeID: "v", PodNamespace: "c", PodName: "pod", ServiceAccount: "app"}
		_, src, err := d.fetchShare(context.Background(), v, shareRef{Kind: kindSecret, Name: "share"})
		if err == nil && (src == nil || string(src.Files["k"]) != "v") {
			err = errors.New("allowed, but not the source's data")
		}
		done <- err
	}()
	return done
}

func waitClosed(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never started: the review and the GET are not made together", what)
	}
}

// Both requests are held until both have started: a publish that made them one after the other
// would never finish.
func TestColdPublishOverlapsReviewAndGet(t *testing.T) {
	for _, first := range []string{"review", "get"} {
		t.Run(first+" answers first", func(t *testing.T) {
			sar := &gatedSAR{allowed: true}
			sar.started, sar.release = gated()
			src := &gatedSource{}
			src.started, src.release = gated()
			done := fetchShareAsync(newGatedDriver(t, sar, src))
			waitClosed(t, sar.started, "the review")
			waitClosed(t, src.started, "the GET")
			if first == "review" {
				close(sar.release)
				time.Sleep(10 * time.Millisecond)
				close(src.release)
			} else {
				close(src.release)
				time.Sleep(10 * time.Millisecond)
				close(sar.release)
			}
			if err := <-done; err != nil {
				t.Fatalf("allowed publish: %v", err)
			}
		})
	}
}

// The review alone decides: a denial wins over whatever the GET answered, an error of the review
// never grants, and only an allowed pod learns how the GET went.
func TestColdPublishReviewDecides(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "src", nil)
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "src")
	for _, tc := range []struct {
		name           string
		allowed        bool
		sarErr, getErr error
		code           codes.Code
		msg            string
	}{
		{name: "denied, GET succeeded", code: codes.PermissionDenied, msg: `service account c/app may not use SharedSecret "share"`},
		{name: "denied, GET forbidden", getErr: forbidden, code: codes.PermissionDenied, msg: `service account c/app may not use SharedSecret "share"`},
		{name: "denied, source missing", getErr: notFound, code: codes.PermissionDenied, msg: `service account c/app may not use SharedSecret "share"`},
		{name: "review failed, GET succeeded", sarErr: errors.New("connection refused"), code: codes.Unavailable, msg: "cannot check access, will retry"},
		{name: "review forbidden, GET succeeded", sarErr: apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", nil),
			code: codes.Unavailable, msg: "cannot check access: the driver's service account may not create subjectaccessreviews"},
		{name: "allowed, GET forbidden", allowed: true, getErr: forbidden, code: codes.FailedPrecondition,
			msg: "the driver may not read Secret p/src (referenced by SharedSecret \"share\"); "},
		{name: "allowed, source missing", allowed: true, getErr: notFound, code: codes.FailedPrecondition, msg: "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sar := &gatedSAR{allowed: tc.allowed, err: tc.sarErr}
			sar.started, sar.release = gated()
			src := &gatedSource{err: tc.getErr}
			src.started, src.release = gated()
			before := runtime.NumGoroutine()
			done := fetchShareAsync(newGatedDriver(t, sar, src))
			waitClosed(t, sar.started, "the review")
			waitClosed(t, src.started, "the GET")
			// The GET answers first, the review last: its answer must still decide.
			close(src.release)
			time.Sleep(10 * time.Millisecond)
			close(sar.release)
			err := <-done
			st, _ := status.FromError(err)
			if err == nil || st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Fatalf("got %v, want %s containing %q", err, tc.code, tc.msg)
			}
			if tc.code == codes.PermissionDenied && (strings.Contains(st.Message(), "p/src") || strings.Contains(st.Message(), "does not exist")) {
				t.Fatalf("a denied pod learns about the source: %v", err)
			}
			// Nothing left running (the informer-less fakes start no goroutines of their own).
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > before {
				t.Fatalf("%d goroutines after the publish, %d before", n, before)
			}
		})
	}
}
