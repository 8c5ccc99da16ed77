package main

// A driver for unit tests: its API server is whatever fakes the test hands in (a review, the
// sources), its shares are put straight into the informers' caches, and its node is a temp
// dir with a fake mounter, so it needs neither root nor a cluster. Tests that need the real
// thing start the real binary (test/e2e/framework/harness.go).

import (
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/record"

	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// testDriverAccount is the driver's own service account in unit tests.
const testDriverAccount = "csi-sharedresource:shared-resource-csi-driver"

// newTestDriver is a driver over the given review and source fakes, with a fake mounter and a
// kubelet root of its own (d.kubeletRoot, a temp dir).
func newTestDriver(t *testing.T, sar sarCreator, src sourceGetter) *driver {
	t.Helper()
	sources, err := newSourceCache(src, 10, 1<<20, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	budget := &volume.Budget{}
	return &driver{
		version:     "test",
		nodeID:      "node",
		kubeletRoot: root,
		tmpfsSize:   1 << 20,
		budget:      budget,
		account:     testDriverAccount,
		mounter:     &fakeMounter{},
		store:       volume.NewStore(filepath.Join(root, "plugins", driverName), budget),
		locks:       newVolumeLocks(),
		shares:      share.NewIndex(dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme()), func(share.Kind, string) {}),
		sources:     sources,
		authz:       newAuthorizer(sar, notLoading, time.Minute, time.Minute),
		events:      &record.FakeRecorder{},
		metrics:     newMetrics(),
		crash:       crashpoint.New(),
	}
}

// addSecretShare puts the SharedSecret name, over Secret namespace/secret, in d's informer cache.
func addSecretShare(t *testing.T, d *driver, name, namespace, secret string) {
	t.Helper()
	if err := d.shares.Informer(share.KindSecret).GetStore().Add(&unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"secretRef": map[string]any{"namespace": namespace, "name": secret}},
	}}); err != nil {
		t.Fatal(err)
	}
}
