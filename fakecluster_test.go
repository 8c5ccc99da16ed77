package main

// The API server of the state machine's unit tests (reconcile_test.go, unpublish_test.go,
// recover_test.go, driver_test.go), as the driver sees it: the SharedSecret "share" over Secret
// p/src, a review that allows or denies the pod, and answers that can fail, all switched by the
// test between two steps. The node is newTestDriver's: a temp dir and the fake mounter.

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// errOutage is what an API server that cannot be reached answers.
var errOutage = errors.New("connection refused")

// fakeCluster is the API server: Secret p/src, and the answers the test sets.
type fakeCluster struct {
	t      *testing.T
	client *fake.Clientset
	// allowed: the review lets the pod use the share.
	allowed bool
	// reviewErr, sourceErr, shareErr: the review, the GET of p/src, the live GET of a share not in
	// the informer's cache fail with this error.
	reviewErr, sourceErr, shareErr error
	version                        int
}

// newFakeCluster is an API server where Secret p/src holds ca.crt = CA (resourceVersion 1) and
// every pod may use the share.
func newFakeCluster(t *testing.T) *fakeCluster {
	c := &fakeCluster{t: t, allowed: true, version: 1}
	c.client = fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA")}})
	c.client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if c.reviewErr != nil {
			return true, nil, c.reviewErr
		}
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: c.allowed, Reason: "test"}}, nil
	})
	c.client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return c.sourceErr != nil, nil, c.sourceErr
	})
	return c
}

// node is a driver on a fresh fake node of this cluster, with the share in its informer's cache
// and its events recorded in the returned channel.
func (c *fakeCluster) node() (*driver, chan string) {
	d := newTestDriver(c.t, c.client.AuthorizationV1().SubjectAccessReviews(), fakeSources{c.client})
	shares := dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme())
	shares.PrependReactor("get", "*", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		return c.shareErr != nil, nil, c.shareErr
	})
	d.shares = share.NewIndex(shares, func(share.Kind, string) {})
	putSecretShare(c.t, d, "share", "share-1", "p", "src")
	events := make(chan string, 100)
	d.events = &record.FakeRecorder{Events: events}
	return d, events
}

// setSource gives Secret p/src a new version holding data.
func (c *fakeCluster) setSource(data map[string]string) {
	c.version++
	b := map[string][]byte{}
	for k, v := range data {
		b[k] = []byte(v)
	}
	if _, err := c.client.CoreV1().Secrets("p").Update(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", UID: "src-1", ResourceVersion: strconv.Itoa(c.version)}, Data: b}, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// deleteSource deletes Secret p/src.
func (c *fakeCluster) deleteSource() {
	if err := c.client.CoreV1().Secrets("p").Delete(context.Background(), "src", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// podView is what the pod sees in volume id: each file of its view and its content; nil when
// the volume has no view.
func podView(t *testing.T, d *driver, id string) map[string]string {
	t.Helper()
	files, err := atomicwriter.ReadFiles(filepath.Join(d.store.MountPoint(id), volume.ViewDir))
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for p, f := range files {
		out[p] = string(f.Data)
	}
	return out
}

// sees says whether the pod sees exactly these files (name, content, name, content...).
func sees(view map[string]string, pairs ...string) bool {
	want := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		want[pairs[i]] = pairs[i+1]
	}
	return view != nil && maps.Equal(view, want)
}

// reasons are the reasons of the events recorded since the last call, in order (the fake
// recorder writes "<type> <reason> <message>").
func reasons(events chan string) []string {
	var out []string
	for {
		select {
		case e := <-events:
			if f := strings.Fields(e); len(f) > 1 {
				out = append(out, f[1])
			}
		default:
			return out
		}
	}
}

// publishVolume publishes volume id as the kubelet does, for pod c/pod (testPodUID) whose in-line
// volume is named id, with the volume attributes given (name, value...) besides the share.
func publishVolume(t *testing.T, d *driver, id string, attrs ...string) *csi.NodePublishVolumeRequest {
	t.Helper()
	req := publishRequest(t, d, id)
	req.TargetPath = filepath.Join(d.kubeletRoot, "pods", testPodUID, "volumes", "kubernetes.io~csi", id, "mount")
	mkdirParent(t, req.TargetPath)
	for i := 0; i+1 < len(attrs); i += 2 {
		req.VolumeContext[attrs[i]] = attrs[i+1]
	}
	if _, err := (&nodeServer{d: d}).NodePublishVolume(context.Background(), req); err != nil {
		t.Fatalf("publish of %s: %v", id, err)
	}
	return req
}

// reconcileVolume runs one reconcile of volume id, as a relist cycle does, and returns its error.
func reconcileVolume(t *testing.T, d *driver, id string) error {
	t.Helper()
	rec, ok := d.store.Get(id)
	if !ok {
		t.Fatalf("volume %s is not in the store", id)
	}
	return d.reconcile(context.Background(), rec, d.newCycleMemo())
}

// savedRecord is volume id's record as saved on disk.
func savedRecord(t *testing.T, d *driver, id string) volume.Record {
	t.Helper()
	rec, err := d.store.ReadRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// restart is a new driver process on d's node, recovering before it serves (recover.go) as main
// does: the same kubelet root and mount table (the kernel's, which outlive the process), and
// nothing in memory: no store, budget, lock or cache.
func (c *fakeCluster) restart(d *driver) (*driver, chan string) {
	c.t.Helper()
	n, events := c.node()
	n.kubeletRoot, n.mounter = d.kubeletRoot, d.mounter
	n.budget.Limit = d.budget.Limit
	n.store = volume.NewStore(filepath.Dir(d.store.Path()), n.budget)
	if err := n.recoverVolumes(); err != nil {
		c.t.Fatalf("recover: %v", err)
	}
	return n, events
}
