package api

// End-to-end specification of the driver: the real binary over its CSI socket, a real API
// server, real mounts. Each test is one user story: a publish allowed, denied, granted through a
// group; an unknown share or missing source; ConfigMap binaryData; revocation and re-grant;
// refresh; a share deleted or re-pointed; the driver killed and restarted; concurrent publishes.
// See test/e2e/framework/harness.go.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// relist is the interval the driver runs with in these tests; revocation and refresh must be
// seen within it (plus slack for the API server's RBAC cache and the cycle's own work).
const (
	relist      = 2 * time.Second
	relistSlack = 4 * time.Second
)

func wantCode(t *testing.T, err error, code codes.Code, msgParts ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v (%q), want %v", st.Code(), st.Message(), code)
	}
	for _, p := range msgParts {
		if !strings.Contains(st.Message(), p) {
			t.Errorf("message %q does not mention %q", st.Message(), p)
		}
	}
}

// sharedSecretFixture: a Secret in a "platform" namespace, shared as a SharedSecret, and a
// consumer namespace whose service account "app" is granted `use`.
type sharedSecretFixture struct {
	platform, consumer, share string
	data                      map[string][]byte
	revoke                    func()
}

func newSharedSecret(t *testing.T, e *framework.KubeEnv, p *framework.DriverProc, grant bool) *sharedSecretFixture {
	f := &sharedSecretFixture{platform: e.SourceNamespace(t, "platform"), consumer: e.Namespace(t, "consumer"), share: "corp-ca-" + framework.RandSuffix()}
	f.data = map[string][]byte{"ca.crt": p.Secret("ca"), "tls.key": p.Secret("key")}
	e.CreateSecret(t, f.platform, "ca-bundle", f.data)
	e.CreateShare(t, framework.KindSecret, f.share, f.platform, "ca-bundle")
	if grant {
		f.revoke = e.Grant(t, f.consumer, framework.KindSecret, f.share, framework.ServiceAccount(f.consumer, "app"))
	}
	return f
}

// publishedVolume shares a Secret, grants it to consumer/app, and publishes one volume of it.
func publishedVolume(t *testing.T, e *framework.KubeEnv, p *framework.DriverProc) (*sharedSecretFixture, *framework.TestVolume) {
	t.Helper()
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return f, v
}

func asStrings(m map[string][]byte) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func TestPublishAllowedShowsTheSecretReadOnly(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	// The kubelet may pass service-account tokens; they must never be logged.
	v.Attrs[framework.CtxServiceAccountTok] = string(p.Secret("token"))

	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}
	// The bytes are in the volume's memory once: the pod's files are hard links to the share's
	// copy that the driver keeps beside them (to restore after a revocation).
	shareCopy := filepath.Join(p.KubeletRoot, "plugins", framework.DriverName, "volumes", v.ID, "shares", "0", "..data")
	for name := range f.data {
		shown, err := os.Stat(filepath.Join(v.Target, name))
		if err != nil {
			t.Fatal(err)
		}
		kept, err := os.Stat(filepath.Join(shareCopy, name))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(shown, kept) {
			t.Errorf("%s is a second copy of the share's file, not a link to it", name)
		}
	}
	// That the pod cannot write: TestReadOnlyInTheMountNamespaceThePodSees, where the pod looks.
	// Idempotent: the same call again succeeds and changes nothing.
	if err := p.Publish(v); err != nil {
		t.Fatalf("second publish: %v", err)
	}
	if n := len(framework.MountsUnder(filepath.Dir(v.Target))); n != 1 {
		t.Errorf("%d mounts at the target after a repeated publish, want 1", n)
	}
	// Same volume id, other arguments: AlreadyExists.
	other := *v
	other.Attrs = map[string]string{framework.AttrSharedSecret: f.share, framework.AttrRefreshResource: "false"}
	wantCode(t, p.Publish(&other), codes.AlreadyExists, v.ID)

	// Unpublish twice: both succeed, nothing is left.
	if err := p.Unpublish(v); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if err := p.Unpublish(v); err != nil {
		t.Fatalf("second unpublish: %v", err)
	}
	p.AssertNothingLeft(t, v)
}

// The driver runs in a container, in its own mount namespace: the bind must be read-only where
// the kubelet and the pod see it, not only where the driver made it. (A bind followed by a
// read-only remount fails this: the remount does not propagate.)
func TestReadOnlyInTheMountNamespaceThePodSees(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t, framework.WithOwnMountNamespace())
	f, v := publishedVolume(t, e, p)
	mounts, err := framework.ReadMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := framework.MountAt(mounts, v.Target)
	if !ok {
		t.Fatal("the bind did not propagate to the test's mount namespace")
	}
	for _, opt := range []string{"ro", "nosuid", "nodev", "noexec"} {
		if !framework.HasOption(m.Options, opt) {
			t.Errorf("the propagated bind's options %q lack %s", m.Options, opt)
		}
	}
	// The pod can never write: not a file it has, not a new one, not a removal.
	for what, op := range map[string]func() error{
		"overwrite": func() error { return os.WriteFile(filepath.Join(v.Target, "ca.crt"), []byte("x"), 0o644) },
		"create":    func() error { return os.WriteFile(filepath.Join(v.Target, "x"), []byte("x"), 0o644) },
		"remove":    func() error { return os.Remove(filepath.Join(v.Target, "tls.key")) },
	} {
		if err := op(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s through the propagated bind: %v, want EROFS", what, err)
		}
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}
	p.UnpublishAll(t, v)
}

func TestPublishDeniedWithoutUseGrant(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, false)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	wantCode(t, p.Publish(v), codes.PermissionDenied,
		f.share, f.consumer+"/app", "resources: [sharedsecrets]", "resourceNames: ["+f.share+"]", "verbs: [use]")
	p.AssertNothingLeft(t, v)

	// A grant to a different share does not help.
	e.Grant(t, f.consumer, framework.KindSecret, "some-other-share", framework.ServiceAccount(f.consumer, "app"))
	wantCode(t, p.Publish(v), codes.PermissionDenied)
	p.AssertNothingLeft(t, v)
}

func TestPublishAllowedThroughGroupBinding(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, false)
	// Every service account of the namespace, through its group.
	e.Grant(t, f.consumer, framework.KindSecret, f.share, rbacv1.Subject{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:serviceaccounts:" + f.consumer})
	v := p.Volume(f.consumer, "any-sa", map[string]string{framework.AttrSharedSecret: f.share})
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}
	// Another namespace's service account is not in that group.
	otherNS := e.Namespace(t, "other")
	w := p.Volume(otherNS, "any-sa", map[string]string{framework.AttrSharedSecret: f.share})
	wantCode(t, p.Publish(w), codes.PermissionDenied)
	if err := p.Unpublish(v); err != nil {
		t.Fatal(err)
	}
	p.AssertNothingLeft(t, v, w)
}

func TestPublishUnknownShareOrMissingSource(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	ns := e.Namespace(t, "consumer")

	// A share that does not exist: a pod that may not use the name is told only that, so that
	// no pod can probe which shares exist; one granted use of the name learns it is missing.
	v := p.Volume(ns, "app", map[string]string{framework.AttrSharedSecret: "no-such-share"})
	err := p.Publish(v)
	wantCode(t, err, codes.PermissionDenied, "no-such-share")
	if strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a denied publish says whether the share exists: %v", err)
	}
	e.Grant(t, ns, framework.KindSecret, "no-such-share", framework.ServiceAccount(ns, "app"))
	wantCode(t, p.Publish(v), codes.NotFound, "SharedSecret", "no-such-share", "does not exist")

	share := "dangling-" + framework.RandSuffix()
	platform := e.SourceNamespace(t, "platform")
	e.CreateShare(t, framework.KindSecret, share, platform, "gone")
	// Denied first: a pod that may not use the share learns nothing of its source, not even
	// that it is missing (the driver fetches it while the review is out, and keeps quiet).
	denied := p.Volume(ns, "app", map[string]string{framework.AttrSharedSecret: share})
	err = p.Publish(denied)
	wantCode(t, err, codes.PermissionDenied, share)
	if strings.Contains(err.Error(), platform) || strings.Contains(err.Error(), "gone") {
		t.Errorf("a denied publish reveals the share's source: %v", err)
	}
	e.Grant(t, ns, framework.KindSecret, share, framework.ServiceAccount(ns, "app"))
	w := p.Volume(ns, "app", map[string]string{framework.AttrSharedSecret: share})
	wantCode(t, p.Publish(w), codes.FailedPrecondition, "Secret "+platform+"/gone", "does not exist")
	p.AssertNothingLeft(t, v, denied, w)
}

func TestPublishRejectsBothOrNeitherShareAttribute(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	ns := e.Namespace(t, "consumer")
	both := p.Volume(ns, "app", map[string]string{framework.AttrSharedSecret: "a", framework.AttrSharedConfigMap: "b"})
	wantCode(t, p.Publish(both), codes.InvalidArgument, "exactly one")
	neither := p.Volume(ns, "app", map[string]string{})
	wantCode(t, p.Publish(neither), codes.InvalidArgument, framework.AttrSharedSecret, framework.AttrSharedConfigMap)
	p.AssertNothingLeft(t, both, neither)
}

func TestConfigMapWithBinaryData(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	platform, consumer := e.SourceNamespace(t, "platform"), e.Namespace(t, "consumer")
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	_, err := e.Kube.CoreV1().ConfigMaps(platform).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data:       map[string]string{"app.conf": "mode=shared\n"},
		BinaryData: map[string][]byte{"blob.bin": binary},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	share := "settings-" + framework.RandSuffix()
	e.CreateShare(t, framework.KindConfigMap, share, platform, "settings")
	e.Grant(t, consumer, framework.KindConfigMap, share, framework.ServiceAccount(consumer, "app"))
	v := p.Volume(consumer, "app", map[string]string{framework.AttrSharedConfigMap: share})
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), map[string]string{"app.conf": "mode=shared\n", "blob.bin": string(binary)}); err != nil {
		t.Fatal(err)
	}
	p.UnpublishAll(t, v)
}

func TestRevocationEmptiesTheVolumeAndRegrantRestoresIt(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	pinned := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share, framework.AttrRefreshResource: "false"})
	for _, vol := range []*framework.TestVolume{v, pinned} {
		if err := p.Publish(vol); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}

	f.revoke()
	for _, vol := range []*framework.TestVolume{v, pinned} {
		framework.Eventually(t, relist+relistSlack, func() error {
			if files := framework.ReadVolume(t, vol.Target); len(files) != 0 {
				return fmt.Errorf("still %d files after revocation", len(files))
			}
			return nil
		})
		// The mount stays (a running pod keeps its mount), only the files go; the pod can't
		// reach the data through hidden paths either.
		if n := len(framework.MountsUnder(filepath.Dir(vol.Target))); n != 1 {
			t.Errorf("mount gone after revocation")
		}
		assertNoDataReachable(t, vol.Target, f.data)
		framework.Eventually(t, 10*time.Second, func() error {
			evs, err := e.PodEvents(vol.PodNS, vol.PodName, framework.ReasonRevoked)
			if err != nil || len(evs) == 0 {
				return fmt.Errorf("no %s event on the pod (err %v)", framework.ReasonRevoked, err)
			}
			if evs[0].Type != corev1.EventTypeWarning {
				return fmt.Errorf("event type %s", evs[0].Type)
			}
			return nil
		})
	}

	e.Grant(t, f.consumer, framework.KindSecret, f.share, framework.ServiceAccount(f.consumer, "app"))
	for _, vol := range []*framework.TestVolume{v, pinned} {
		framework.Eventually(t, relist+relistSlack, func() error {
			return framework.SameFiles(framework.ReadVolume(t, vol.Target), asStrings(f.data))
		})
	}
	p.UnpublishAll(t, v, pinned)
}

// assertNoDataReachable walks everything visible under target and checks no file holds any of
// the share's values.
func assertNoDataReachable(t *testing.T, target string, data map[string][]byte) {
	t.Helper()
	err := filepath.Walk(target, func(path string, info os.FileInfo, err error) error {
		// Symlinks (..data, the top-level links) point into the timestamped dir, walked itself.
		if err != nil || info.IsDir() || info.Mode()&os.ModeSymlink != 0 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for k, v := range data {
			if strings.Contains(string(b), string(v)) {
				t.Errorf("%s still holds the value of %s", path, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", target, err)
	}
}

func TestRefreshUpdatesDataUnlessRefreshResourceFalse(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	live := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	pinned := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share, framework.AttrRefreshResource: "false"})
	for _, vol := range []*framework.TestVolume{live, pinned} {
		if err := p.Publish(vol); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	rotated := map[string][]byte{"ca.crt": p.Secret("ca2"), "new.pem": p.Secret("new")}
	e.UpdateSecret(t, f.platform, "ca-bundle", rotated)
	framework.Eventually(t, relist+relistSlack, func() error {
		return framework.SameFiles(framework.ReadVolume(t, live.Target), asStrings(rotated))
	})
	framework.Eventually(t, 10*time.Second, func() error {
		if evs, err := e.PodEvents(live.PodNS, live.PodName, framework.ReasonRefreshed); err != nil || len(evs) == 0 {
			return fmt.Errorf("no %s event (err %v)", framework.ReasonRefreshed, err)
		}
		return nil
	})
	// Two more cycles: the pinned volume still has what it was published with.
	time.Sleep(2 * relist)
	if err := framework.SameFiles(framework.ReadVolume(t, pinned.Target), asStrings(f.data)); err != nil {
		t.Fatalf("refreshResource=false volume changed: %v", err)
	}
	p.UnpublishAll(t, live, pinned)
}

// A deleted share's files leave its volumes through the CRD watch, not the relist. So do those
// of a share whose deletion a finalizer holds (metadata.deletionTimestamp set, the object still
// served), and a new volume may not use it.
func TestShareDeletedActsThroughTheWatchNotTheRelist(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleted", true: "held by a finalizer"}[held], func(t *testing.T) {
			e := framework.E2e(t)
			// A relist interval far longer than the test: only the CRD watch can act in time. Its
			// reaction waits a random part of the spread window (shareevents.go): 3.6 s at most here.
			p := e.StartDriver(t, framework.WithRelist(time.Hour), framework.WithArgs("--relist-spread=0.001"))
			f, v := publishedVolume(t, e, p)
			if held {
				holdByAFinalizer(t, e, f.share)
			}
			e.DeleteShare(t, framework.KindSecret, f.share)
			framework.Eventually(t, 10*time.Second, func() error {
				if files := framework.ReadVolume(t, v.Target); len(files) != 0 {
					return fmt.Errorf("still %d files after the share was deleted", len(files))
				}
				return nil
			})
			if held {
				w := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
				wantCode(t, p.Publish(w), codes.NotFound, "is being deleted", "no new volume may use it")
			}
			p.UnpublishAll(t, v)
		})
	}
}

// holdByAFinalizer gives the share a finalizer, so that a deletion leaves it stored with a
// deletionTimestamp; the test's cleanup removes it.
func holdByAFinalizer(t *testing.T, e *framework.KubeEnv, share string) {
	t.Helper()
	shares := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	ctx := context.Background()
	patch := func(finalizers string) error {
		_, err := shares.Patch(ctx, share, types.MergePatchType, []byte(`{"metadata":{"finalizers":`+finalizers+`}}`), metav1.PatchOptions{})
		return err
	}
	if err := patch(`["example.com/hold"]`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := patch("null"); err != nil {
			t.Errorf("removing the finalizer: %v", err)
		}
	})
}

func TestShareRefChangeActsThroughTheWatch(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t, framework.WithRelist(time.Hour), framework.WithArgs("--relist-spread=0.001")) // as above
	f := newSharedSecret(t, e, p, true)
	other := map[string][]byte{"other.txt": p.Secret("other")}
	e.CreateSecret(t, f.platform, "other-bundle", other)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(context.Background(), f.share, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = map[string]any{"secretRef": map[string]any{"namespace": f.platform, "name": "other-bundle"}}
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 10*time.Second, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(other)) })
	if err := p.Unpublish(v); err != nil {
		t.Fatal(err)
	}
}

func TestDriverKilledAndRestartedKeepsServingItsVolumes(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f, v := publishedVolume(t, e, p)

	p.Kill()
	// While the driver is down, the pod still has its data.
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("while the driver is down: %v", err)
	}
	p.Start()
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	// The kubelet's retry of the publish it sent before the crash is answered from the record.
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	// Refresh still works for the recovered volume...
	rotated := map[string][]byte{"ca.crt": p.Secret("rotated")}
	e.UpdateSecret(t, f.platform, "ca-bundle", rotated)
	framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(rotated)) })
	// ...and so does revocation.
	f.revoke()
	framework.Eventually(t, relist+relistSlack, func() error {
		if files := framework.ReadVolume(t, v.Target); len(files) != 0 {
			return fmt.Errorf("still %d files after revocation", len(files))
		}
		return nil
	})
	p.UnpublishAll(t, v)
}

func TestRestartCleansVolumesWhosePodIsGone(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	_, v := publishedVolume(t, e, p)
	p.Kill()
	// The pod went away while the driver was down and the kubelet cleaned up around our mount.
	if err := syscall.Unmount(v.Target, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(p.KubeletRoot, "pods", v.PodUID)); err != nil {
		t.Fatal(err)
	}
	p.Start()
	p.AssertNothingLeft(t, v)
}

func TestConcurrentPublishOfOneVolume(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.PublishOnce(v) }()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			ok++
		case codes.Aborted:
		default:
			t.Errorf("concurrent publish: %v (want OK or Aborted)", err)
		}
	}
	if ok == 0 {
		t.Fatal("no concurrent publish succeeded")
	}
	if n := len(framework.MountsUnder(filepath.Dir(v.Target))); n != 1 {
		t.Errorf("%d mounts at the target, want exactly 1", n)
	}
	p.UnpublishAll(t, v)
}
