package main

// Specification of NodePublishVolume (publish.go) and NodeUnpublishVolume (unpublish.go) on the
// node, called as the kubelet calls them, without root (a fake mounter, unitdriver_test.go):
//   - a publish makes the volume's tmpfs, writes the shares' files, saves the record, creates the
//     target and binds the view onto it read-only; a repeated publish changes nothing; unpublish
//     removes all of it, and only what the driver made;
//   - a publish that fails at any step leaves the node as it was;
//   - a cold publish's two API requests (admitShare): the review of the pod's access first, and
//     the GET of the source only for a pod the review allowed; the review decides alone what the
//     pod is told. Fakes stand in for the API server, each able to hold its request until the
//     test lets it go, or counting what it was asked.
// The same story against the real kernel, API server and kubelet: test/e2e/api/driver_test.go,
// test/e2e/api/crash_test.go, test/e2e/pods/pods_test.go.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
)

// gatedSAR answers a review with allowed (or err), but only after release is closed; started is
// closed when the first request arrives (the relist asks a denial twice: authz.go).
type gatedSAR struct {
	started, release chan struct{}
	allowed          bool
	err              error
	once             sync.Once
}

func (g *gatedSAR) Create(_ context.Context, _ *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	g.once.Do(func() { close(g.started) })
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

func (g *gatedSource) getSource(_ context.Context, _ share.SourceKey, _ metav1.GetOptions) (*share.SourceData, error) {
	close(g.started)
	<-g.release
	if g.err != nil {
		return nil, g.err
	}
	return &share.SourceData{Files: map[string][]byte{"k": []byte("v")}, ResourceVersion: "3"}, nil
}

func gated() (started, release chan struct{}) { return make(chan struct{}), make(chan struct{}) }

// newGatedDriver is a driver whose review and GET are the gated fakes, with the SharedSecret
// "share" over Secret p/src.
func newGatedDriver(t *testing.T, sar *gatedSAR, src *gatedSource) *driver {
	d := newTestDriver(t, sar, src)
	addSecretShare(t, d, "share", "p", "src")
	return d
}

// admitShareAsync runs admitShare for pod c/pod (service account app) on the share "share".
func admitShareAsync(d *driver) <-chan error {
	done := make(chan error, 1)
	go func() {
		v := &volumeRequest{VolumeID: "v", PodNamespace: "c", PodName: "pod", ServiceAccount: "app"}
		_, src, err := d.admitShare(context.Background(), v, share.Ref{Kind: share.KindSecret, Name: "share"})
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
		t.Fatalf("%s never started", what)
	}
}

// A pod that may not use a share costs no GET of its source: the review comes first, and a
// refusal (or a review that failed) ends the publish before the driver reads anything. Only an
// allowed pod's publish reads the source, once.
func TestColdPublishRefusesBeforeReadingTheSource(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed bool
		sarErr  error
		code    codes.Code
		gets    int64
	}{
		{name: "denied", code: codes.PermissionDenied, gets: 0},
		{name: "review failed", sarErr: errors.New("connection refused"), code: codes.Unavailable, gets: 0},
		{name: "allowed", allowed: true, code: codes.OK, gets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, _ := fakeSARClient(func() (bool, error) { return tc.allowed, tc.sarErr })
			if _, err := client.CoreV1().Secrets("p").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src"},
				Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			gets := countGets(client)
			d := newTestDriver(t, client.AuthorizationV1().SubjectAccessReviews(), fakeSources{client})
			addSecretShare(t, d, "share", "p", "src")
			err := <-admitShareAsync(d)
			if st, _ := status.FromError(err); st.Code() != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if n := gets.Load(); n != tc.gets {
				t.Fatalf("%d GETs of the source, want %d", n, tc.gets)
			}
		})
	}
}

// The review alone decides: a denial wins over whatever the GET would have answered, an error of
// the review never grants, and only an allowed pod learns how the GET went.
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
			close(src.release) // the GET, if it is made, answers at once
			before := runtime.NumGoroutine()
			done := admitShareAsync(newGatedDriver(t, sar, src))
			waitClosed(t, sar.started, "the review")
			close(sar.release)
			err := <-done
			select {
			case <-src.started:
				if !tc.allowed || tc.sarErr != nil {
					t.Fatalf("the source was read for a publish the review did not allow")
				}
			default:
			}
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

// nodeWorld is a driver on a fake node whose API server has the SharedSecret "share" over
// Secret p/src (ca.crt), which every service account may use.
func nodeWorld(t *testing.T) (*driver, *fakeMounter) {
	t.Helper()
	return nodeWorldWith(t, fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA")}}))
}

// nodeWorldWith is nodeWorld over the Secrets of client.
func nodeWorldWith(t *testing.T, client *fake.Clientset) (*driver, *fakeMounter) {
	t.Helper()
	client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}, nil
	})
	d := newTestDriver(t, client.AuthorizationV1().SubjectAccessReviews(), fakeSources{client})
	addSecretShare(t, d, "share", "p", "src")
	return d, d.mounter.(*fakeMounter)
}

const testPodUID = "0b6e2c3a-1f5e-4c8e-9a57-2b1d6f3e4a10"

// publishRequest is the kubelet's NodePublishVolume for pod c/pod's in-line volume "ca" on the
// share, with the target's parent made as the kubelet makes it.
func publishRequest(t *testing.T, d *driver, volumeID string) *csi.NodePublishVolumeRequest {
	t.Helper()
	target := filepath.Join(d.kubeletRoot, "pods", testPodUID, "volumes", "kubernetes.io~csi", "ca", "mount")
	mkdirParent(t, target)
	return &csi.NodePublishVolumeRequest{
		VolumeId:         volumeID,
		TargetPath:       target,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}},
		Readonly:         true,
		VolumeContext: map[string]string{
			attrSharedSecret: "share", ctxEphemeral: "true",
			ctxPodNamespace: "c", ctxPodName: "pod", ctxPodUID: testPodUID, ctxServiceAccount: "app",
		},
	}
}

func unpublishRequest(req *csi.NodePublishVolumeRequest) *csi.NodeUnpublishVolumeRequest {
	return &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: req.TargetPath}
}

func TestPublishBindsTheViewReadOnlyAndUnpublishRemovesAll(t *testing.T) {
	d, m := nodeWorld(t)
	ns := &nodeServer{d: d}
	ctx := context.Background()
	req := publishRequest(t, d, "vol-1")
	if _, err := ns.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	volDir := d.store.MountPoint("vol-1")
	if tm, ok := m.at(volDir); !ok || tm.entry.FSType != "tmpfs" || tm.size != d.tmpfsSize {
		t.Fatalf("no tmpfs of %d bytes at %s: %+v", d.tmpfsSize, volDir, tm)
	}
	bind, ok := m.at(req.TargetPath)
	if !ok || bind.source != filepath.Join(volDir, "data") || !hasOption(bind.entry.Options, "ro") {
		t.Fatalf("the target is not a read-only bind of the volume's view: %+v", bind)
	}
	files, err := atomicwriter.ReadFiles(filepath.Join(volDir, "data"))
	if err != nil || len(files) != 1 || string(files["ca.crt"].Data) != "CA" || files["ca.crt"].Mode != defaultFileMode {
		t.Fatalf("the view holds %v (%v), want ca.crt = CA, mode %v", files, err, defaultFileMode)
	}
	if rec, ok := d.store.Get("vol-1"); !ok || !rec.CreatedTarget || rec.Shares[0].ResourceVersion != "1" {
		t.Fatalf("record %+v, %v: want one that owns the target and names the source's version", rec, ok)
	}

	// The kubelet retries a publish it did not see answered: nothing more is mounted.
	if _, err := ns.NodePublishVolume(ctx, req); err != nil || m.count() != 2 {
		t.Fatalf("repeated publish: %v, %d mounts; want success and the same 2", err, m.count())
	}

	for range 2 { // unpublish, and its retry, which finds nothing to do
		if _, err := ns.NodeUnpublishVolume(ctx, unpublishRequest(req)); err != nil {
			t.Fatal(err)
		}
		if m.count() != 0 || exists(req.TargetPath) || exists(volDir) || d.store.Count() != 0 {
			t.Fatalf("after unpublish: %d mounts, target there %v, volume dir there %v, %d records; want nothing",
				m.count(), exists(req.TargetPath), exists(volDir), d.store.Count())
		}
	}
}

// A target the kubelet made is the kubelet's: unpublish unbinds it and leaves the directory.
func TestUnpublishLeavesATargetItDidNotCreate(t *testing.T) {
	d, m := nodeWorld(t)
	ns := &nodeServer{d: d}
	req := publishRequest(t, d, "vol-1")
	if err := os.Mkdir(req.TargetPath, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// Another path than the volume's is refused, and changes nothing.
	other := unpublishRequest(req)
	other.TargetPath = filepath.Join(filepath.Dir(filepath.Dir(req.TargetPath)), "other", "mount")
	if _, err := ns.NodeUnpublishVolume(context.Background(), other); status.Code(err) != codes.InvalidArgument || m.count() != 2 {
		t.Fatalf("unpublish at another path: %v, %d mounts; want InvalidArgument and the volume as it was", err, m.count())
	}
	if _, err := ns.NodeUnpublishVolume(context.Background(), unpublishRequest(req)); err != nil {
		t.Fatal(err)
	}
	if m.count() != 0 || !exists(req.TargetPath) {
		t.Fatalf("after unpublish: %d mounts, target there %v; want no mount and the kubelet's dir", m.count(), exists(req.TargetPath))
	}
}

// A publish that fails at a step undoes exactly the steps that ran: no mount, no volume dir, no
// record, and a target only if the kubelet had made it.
func TestPublishThatFailsLeavesTheNodeAsItWas(t *testing.T) {
	for _, tc := range []struct {
		name          string
		fail          func(*fakeMounter)
		kubeletTarget bool
	}{
		{"the tmpfs cannot be mounted", func(m *fakeMounter) { m.failTmpfs = errors.New("no memory") }, false},
		{"the bind fails", func(m *fakeMounter) { m.failBind = errors.New("busy") }, false},
		{"the bind fails on the kubelet's target", func(m *fakeMounter) { m.failBind = errors.New("busy") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, m := nodeWorld(t)
			req := publishRequest(t, d, "vol-1")
			if tc.kubeletTarget {
				if err := os.Mkdir(req.TargetPath, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			tc.fail(m)
			_, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), req)
			if status.Code(err) != codes.Internal {
				t.Fatalf("publish: %v, want Internal", err)
			}
			if m.count() != 0 || exists(d.store.MountPoint("vol-1")) || d.store.Count() != 0 || exists(req.TargetPath) != tc.kubeletTarget {
				t.Fatalf("after the failed publish: %d mounts, volume dir there %v, %d records, target there %v (want %v)",
					m.count(), exists(d.store.MountPoint("vol-1")), d.store.Count(), exists(req.TargetPath), tc.kubeletTarget)
			}
		})
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// mkdirParent makes a target's parent, as the kubelet does.
func mkdirParent(t *testing.T, target string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
}
