package api

// Specification of least privilege, against the real API server with deploy.yaml installed:
//   - who may share what: deploy.yaml's ValidatingAdmissionPolicy refuses a share (create, or an
//     update that re-points it, or a delete) unless the requesting user may get the object it
//     points at; it never stops the cluster admin or an update that keeps the ref;
//   - what the driver may read: nothing until an admin binds deploy.yaml's source-reader
//     ClusterRole in a namespace (or a narrower Role); cluster-wide read is a separate opt-in
//     manifest. What pods and shares show meanwhile is in test/e2e/pods/access_test.go; the wording of
//     the command the driver tells an admin to run, in internal/sourceaccess/sourceaccess_test.go.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// deploy.yaml's driver ClusterRole reads no Secret or ConfigMap; the source-reader ClusterRole
// does exactly that and nothing else, and deploy.yaml binds it nowhere.
func TestDeployGrantsNoSourceReadByDefault(t *testing.T) {
	e := framework.E2e(t)
	for _, verb := range []string{"get", "list", "watch"} {
		for _, res := range []string{"secrets", "configmaps"} {
			for _, ns := range []string{"kube-system", "default", framework.DriverNamespace} {
				out, _ := exec.Command(framework.KubectlBinary(), "--kubeconfig", e.Kubeconfig, "auth", "can-i", verb, res,
					"-n", ns, "--as", framework.DriverUser).CombinedOutput()
				if got := strings.TrimSpace(string(out)); got != "no" {
					t.Errorf("kubectl auth can-i %s %s -n %s --as %s: %q, want no", verb, res, ns, framework.DriverUser, got)
				}
			}
		}
	}
	role, err := e.Kube.RbacV1().ClusterRoles().Get(context.Background(), framework.SourceReaderRole, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy.yaml's ClusterRole %s: %v", framework.SourceReaderRole, err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("%s rules %v, want %v", framework.SourceReaderRole, role.Rules, want)
	}
	crbs, err := e.Kube.RbacV1().ClusterRoleBindings().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		if b.RoleRef.Name == framework.SourceReaderRole {
			t.Errorf("ClusterRoleBinding %s binds %s cluster-wide", b.Name, framework.SourceReaderRole)
		}
	}
}

// The cluster-wide opt-in is a valid manifest the API server accepts (dry run: applying it
// would widen every other test's driver).
func TestClusterWideReadOptInIsValid(t *testing.T) {
	e := framework.E2e(t)
	out, err := exec.Command(framework.KubectlBinary(), "--kubeconfig", e.Kubeconfig, "apply", "--dry-run=server",
		"-f", "deploy/cluster-wide-read.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f deploy/cluster-wide-read.yaml: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "clusterrolebinding.rbac.authorization.k8s.io/shared-resource-csi-source-reader-all-namespaces") {
		t.Errorf("unexpected output: %s", out)
	}
}

// refusedByPolicy checks that err is the admission policy's refusal naming the missing permission.
func refusedByPolicy(err error, user, resource, ns, name string) error {
	if err == nil {
		return fmt.Errorf("admitted, want refused by the admission policy")
	}
	for _, want := range []string{
		"shared-resource-csi-share-source-readable",
		fmt.Sprintf(`user "%s" may not get %s "%s" in namespace "%s"`, user, resource, name, ns),
		fmt.Sprintf("Missing permission: get on %s (resourceNames: [%s]) in namespace %s", resource, name, ns),
	} {
		if !strings.Contains(err.Error(), want) {
			return fmt.Errorf("refusal %q does not contain %q", err, want)
		}
	}
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("refusal is not Forbidden: %v", err)
	}
	return nil
}

// Only someone who can read a source can share it, and only someone who can read the source a
// share points at can point it elsewhere or delete the share (a delete revokes every consumer
// and frees the name for whoever may create shares); the cluster admin and updates that keep the
// ref are never stopped.
func TestSharePolicyRequiresReadOnTheSource(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	u := e.NewSharer(t)
	ns := e.Namespace(t, "sources")
	e.CreateSecret(t, ns, "readable", map[string][]byte{"k": []byte("v")})
	e.CreateSecret(t, ns, "unreadable", map[string][]byte{"k": []byte("v")})
	shares := u.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	name := "policy-" + framework.RandSuffix()
	t.Cleanup(func() { e.DeleteShare(t, framework.KindSecret, name) })

	// No get on the Secret: refused, with the permission that is missing. (The API server loads
	// a new policy a moment after it is created: the first refusal is waited for.)
	framework.Eventually(t, 30*time.Second, func() error {
		_, err := shares.Create(ctx, framework.ShareObject(framework.KindSecret, name, ns, "readable"), metav1.CreateOptions{})
		if err == nil {
			e.DeleteShare(t, framework.KindSecret, name)
		}
		return refusedByPolicy(err, u.Name, "secrets", ns, "readable")
	})
	_, err := shares.Create(ctx, framework.ShareObject(framework.KindSecret, name, ns, "readable"), metav1.CreateOptions{})
	if e := refusedByPolicy(err, u.Name, "secrets", ns, "readable"); e != nil {
		t.Fatal(e)
	}
	t.Logf("refused: %v", err)

	// With get on that one Secret: admitted.
	e.GrantGet(t, framework.UserSubject(u.Name), ns, "secrets", "readable")
	framework.Eventually(t, 30*time.Second, func() error {
		_, err := shares.Create(ctx, framework.ShareObject(framework.KindSecret, name, ns, "readable"), metav1.CreateOptions{})
		return err
	})

	// Re-pointing it at a Secret the user may not read: refused, and the share is unchanged.
	obj, err := shares.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, unstructured.SetNestedField(obj.Object, "unreadable", "spec", "secretRef", "name"))
	_, err = shares.Update(ctx, obj, metav1.UpdateOptions{})
	if e := refusedByPolicy(err, u.Name, "secrets", ns, "unreadable"); e != nil {
		t.Errorf("update to an unreadable ref: %v", e)
	}
	// An update that keeps the ref (labels, as a controller managing shares would write) is
	// admitted, whatever the user may read.
	patch := []byte(`{"metadata":{"labels":{"team":"platform"}}}`)
	if _, err := shares.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("an update keeping the ref was refused: %v", err)
	}

	// The cluster admin may share anything.
	adminShare := "policy-admin-" + framework.RandSuffix()
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Create(ctx, framework.ShareObject(framework.KindSecret, adminShare, ns, "unreadable"), metav1.CreateOptions{}); err != nil {
		t.Errorf("the cluster admin was refused: %v", err)
	}
	// A user who may update that share, and read a Secret of their own, may not re-point the
	// admin's share to it: that needs get on the Secret it points at now, too.
	obj, err = shares.Get(ctx, adminShare, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, unstructured.SetNestedField(obj.Object, "readable", "spec", "secretRef", "name"))
	_, err = shares.Update(ctx, obj, metav1.UpdateOptions{})
	if e := refusedByPolicy(err, u.Name, "secrets", ns, "unreadable"); e != nil {
		t.Errorf("re-pointing a share away from a Secret the user may not read: %v", e)
	} else if !strings.Contains(err.Error(), "may not re-point this share away from it") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	// Nor delete it: the share stays.
	err = shares.Delete(ctx, adminShare, metav1.DeleteOptions{})
	if e := refusedByPolicy(err, u.Name, "secrets", ns, "unreadable"); e != nil {
		t.Errorf("deleting a share of a Secret the user may not read: %v", e)
	} else if !strings.Contains(err.Error(), "so may not delete this share of it") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(ctx, adminShare, metav1.GetOptions{}); err != nil {
		t.Errorf("the refused delete removed the share: %v", err)
	}
	// A share of a Secret the user may read they may delete; the admin deletes any.
	if err := shares.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete of a share of a readable Secret refused: %v", err)
	}
	if err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Delete(ctx, adminShare, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the cluster admin's delete refused: %v", err)
	}

	// A SharedConfigMap is checked the same way, against configmaps.
	cms := u.Dyn.Resource(framework.ShareGVR(framework.KindConfigMap))
	cmShare := "policy-cm-" + framework.RandSuffix()
	t.Cleanup(func() { e.DeleteShare(t, framework.KindConfigMap, cmShare) })
	_, err = cms.Create(ctx, framework.ShareObject(framework.KindConfigMap, cmShare, ns, "settings"), metav1.CreateOptions{})
	if e := refusedByPolicy(err, u.Name, "configmaps", ns, "settings"); e != nil {
		t.Errorf("SharedConfigMap: %v", e)
	}
	e.GrantGet(t, framework.UserSubject(u.Name), ns, "configmaps", "settings")
	framework.Eventually(t, 30*time.Second, func() error {
		_, err := cms.Create(ctx, framework.ShareObject(framework.KindConfigMap, cmShare, ns, "settings"), metav1.CreateOptions{})
		return err
	})
}

// A share's pin on the object it was made for (status.sourceUID, internal/share/pin.go) is guarded as its
// ref is: a user who may update shares and their status, but not get the source, can neither
// make the share follow re-creations nor move or clear its pin (either would let a namespace
// re-created by someone else through to every consumer); the cluster admin can.
func TestSharePolicyGuardsThePin(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	u := e.NewSharer(t)
	ns := e.Namespace(t, "pinned")
	e.CreateSecret(t, ns, "ca", map[string][]byte{"ca.crt": []byte("CA")})
	src, err := e.Kube.CoreV1().Secrets(ns).Get(ctx, "ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := "policy-pin-" + framework.RandSuffix()
	admin := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	if _, err := admin.Create(ctx, framework.ShareObject(framework.KindSecret, name, ns, "ca"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.DeleteShare(t, framework.KindSecret, name) })
	// Pinned as the driver's status writer pins it: the source's UID (a first pin is not checked).
	pin := func(dyn dynamic.Interface, uid string) error {
		_, err := dyn.Resource(framework.ShareGVR(framework.KindSecret)).Patch(ctx, name, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"status":{"sourceUID":%q}}`, uid)), metav1.PatchOptions{}, "status")
		return err
	}
	if err := pin(e.Dyn, string(src.UID)); err != nil {
		t.Fatal(err)
	}

	shares := u.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	follow := []byte(`{"spec":{"sourceRecreation":"Follow"}}`)
	framework.Eventually(t, 30*time.Second, func() error { // the policy's new rules may take a moment to load
		_, err := shares.Patch(ctx, name, types.MergePatchType, follow, metav1.PatchOptions{})
		if err == nil {
			return fmt.Errorf("setting spec.sourceRecreation: Follow admitted, want refused")
		}
		return refusedByPolicy(err, u.Name, "secrets", ns, "ca")
	})
	_, err = shares.Patch(ctx, name, types.MergePatchType, follow, metav1.PatchOptions{})
	if e := refusedByPolicy(err, u.Name, "secrets", ns, "ca"); e != nil || !strings.Contains(err.Error(), "(spec.sourceRecreation)") {
		t.Errorf("following re-creations: %v (%v)", e, err)
	}
	for _, uid := range []string{"00000000-0000-0000-0000-00000000beef", ""} {
		err := pin(u.Dyn, uid)
		if e := refusedByPolicy(err, u.Name, "secrets", ns, "ca"); e != nil || !strings.Contains(err.Error(), "(status.sourceUID)") {
			t.Errorf("moving the pin to %q: %v (%v)", uid, e, err)
		}
	}
	// Writing the pin it already has, and a label, are admitted.
	if err := pin(u.Dyn, string(src.UID)); err != nil {
		t.Errorf("keeping the pin was refused: %v", err)
	}
	if _, err := shares.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"platform"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label change was refused: %v", err)
	}
	// The admin accepts another object, and may make the share follow.
	if err := pin(e.Dyn, "00000000-0000-0000-0000-00000000beef"); err != nil {
		t.Errorf("the admin moving the pin was refused: %v", err)
	}
	if _, err := admin.Patch(ctx, name, types.MergePatchType, follow, metav1.PatchOptions{}); err != nil {
		t.Errorf("the admin setting Follow was refused: %v", err)
	}
}

// A publish of a source the driver may not read fails FailedPrecondition with the command that
// fixes it; running that command (as the admin) lets the kubelet's retry mount it.
func TestPublishOfUnreadableSourceSaysWhatToRun(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	src, consumer := e.Namespace(t, "ungranted"), e.Namespace(t, "consumer")
	data := map[string][]byte{"ca.crt": p.Secret("ca")}
	e.CreateSecret(t, src, "ca-bundle", data)
	share := "ungranted-" + framework.RandSuffix()
	e.CreateShare(t, framework.KindSecret, share, src, "ca-bundle")
	e.Grant(t, consumer, framework.KindSecret, share, framework.ServiceAccount(consumer, "app"))
	v := p.Volume(consumer, "app", map[string]string{framework.AttrSharedSecret: share})

	err := p.Publish(v)
	wantCode(t, err, codes.FailedPrecondition, "the driver may not read Secret "+src+"/ca-bundle", framework.GrantReadFix(src), "--resource-name=ca-bundle")
	p.AssertNothingLeft(t, v)
	e.RunFix(t, err.Error())
	e.WaitMayGet(t, framework.ServiceAccount(framework.DriverNamespace, framework.DriverServiceAccount), src, "secrets", "ca-bundle", true)
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish after the fix: %v", err)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(data)); err != nil {
		t.Fatal(err)
	}
	p.UnpublishAll(t, v)
}

// The driver losing read on a source is not the pod losing access: the volume keeps its last
// files (never emptied, never a revocation), the pod is warned once (not every cycle) with the
// command that fixes it, and once read is back it is told so and refreshed again.
func TestDriverLosingReadKeepsDataAndWarnsOnce(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	src, consumer := e.Namespace(t, "platform"), e.Namespace(t, "consumer")
	revokeRead := e.GrantSourceRead(t, src, framework.SourceReaders()...)
	data := map[string][]byte{"ca.crt": p.Secret("ca")}
	e.CreateSecret(t, src, "ca-bundle", data)
	share := "corp-ca-" + framework.RandSuffix()
	e.CreateShare(t, framework.KindSecret, share, src, "ca-bundle")
	e.Grant(t, consumer, framework.KindSecret, share, framework.ServiceAccount(consumer, "app"))
	v := p.Volume(consumer, "app", map[string]string{framework.AttrSharedSecret: share})
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}

	revokeRead()
	var warned []corev1.Event
	framework.Eventually(t, relist+relistSlack, func() error {
		var err error
		warned, err = e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshFailed)
		if err != nil || len(warned) == 0 {
			return fmt.Errorf("no %s event yet (%v)", framework.ReasonRefreshFailed, err)
		}
		return nil
	})
	for _, want := range []string{"keeps its last files and is not refreshed", "may not read Secret " + src + "/ca-bundle", framework.GrantReadFix(src)} {
		if !strings.Contains(warned[0].Message, want) {
			t.Errorf("%s event %q does not contain %q", framework.ReasonRefreshFailed, warned[0].Message, want)
		}
	}
	if warned[0].Type != corev1.EventTypeWarning {
		t.Errorf("%s event of type %s, want Warning", framework.ReasonRefreshFailed, warned[0].Type)
	}
	// Later cycles keep the files and do not warn again.
	time.Sleep(2 * relist)
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(data)); err != nil {
		t.Fatalf("losing read changed the volume: %v", err)
	}
	if evs, _ := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshFailed); len(evs) != 1 || framework.EvCount(evs[0]) > 1 {
		t.Errorf("%s recorded %d events (%v), want one, once", framework.ReasonRefreshFailed, len(evs), evs)
	}
	if evs, _ := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRevoked); len(evs) > 0 {
		t.Errorf("losing read was taken for a revocation: %v", evs[0].Message)
	}

	// Read granted again: the pod is told, and the volume follows the source again.
	e.GrantSourceRead(t, src, framework.SourceReaders()...)
	framework.Eventually(t, relist+relistSlack, func() error {
		evs, err := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRefreshResumed)
		if err != nil || len(evs) == 0 {
			return fmt.Errorf("no %s event yet (%v)", framework.ReasonRefreshResumed, err)
		}
		return nil
	})
	next := map[string][]byte{"ca.crt": p.Secret("ca2")}
	e.UpdateSecret(t, src, "ca-bundle", next)
	framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(next)) })
	p.UnpublishAll(t, v)
}

// An ownerReference is a delete by another hand: the garbage collector (which may delete
// anything) deletes a share whose owners are all gone. So a user who may update a share but not
// get its source, and so may not delete it, may not change its ownerReferences either: a patch
// adding an owner that does not exist is refused, and the share outlives the collector's pass
// (a twin share given the same ghost owner by the cluster admin is collected meanwhile, which
// shows the collector acted). The user holds get, list, update and patch on shares and nothing
// else: RBAC alone would let the patch through.
func TestSharePolicyTreatsOwnerReferencesAsADelete(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	ns := e.Namespace(t, "owned")
	e.CreateSecret(t, ns, "ca", map[string][]byte{"ca.crt": []byte("CA")})
	admin := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	target, twin := "policy-owner-"+framework.RandSuffix(), "policy-owner-twin-"+framework.RandSuffix()
	for _, n := range []string{target, twin} {
		if _, err := admin.Create(ctx, framework.ShareObject(framework.KindSecret, n, ns, "ca"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.DeleteShare(t, framework.KindSecret, n) })
	}

	// The user: get, list, update and patch on shares; no delete, no create, no Secret.
	user := "updater-" + framework.RandSuffix()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{framework.ShareGroup}, Resources: []string{"sharedsecrets", "sharedconfigmaps"},
		Verbs: []string{"get", "list", "update", "patch"}}}}
	if _, err := e.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{framework.UserSubject(user)}}
	if _, err := e.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
		_ = e.Kube.RbacV1().ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
	e.WaitAuthorized(t, framework.UserSubject(user), authorizationv1.ResourceAttributes{Verb: "update", Group: framework.ShareGroup, Resource: "sharedsecrets"})
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = user
	cfg.Impersonate.Groups = []string{"system:authenticated"}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shares := dyn.Resource(framework.ShareGVR(framework.KindSecret))

	// RBAC refuses the user's delete; the policy (once loaded) refuses re-pointing the share.
	if err := shares.Delete(ctx, target, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the user's delete: %v, want Forbidden by RBAC", err)
	}
	framework.Eventually(t, 60*time.Second, func() error {
		_, err := shares.Patch(ctx, target, types.MergePatchType, []byte(`{"spec":{"secretRef":{"name":"other"}}}`), metav1.PatchOptions{})
		if err == nil { // the policy is not loaded yet: point it back
			if _, err := admin.Patch(ctx, target, types.MergePatchType, []byte(`{"spec":{"secretRef":{"name":"ca"}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return refusedByPolicy(err, user, "secrets", ns, "other") // the first refusal names the new ref
	})

	ghost := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":"SharedSecret","name":"ghost-%s","uid":"00000000-0000-0000-0000-%s"}]}}`,
		framework.ShareGroup+"/v1alpha1", framework.RandSuffix(), framework.RandSuffix()+framework.RandSuffix()[:4])
	patched := time.Now()
	_, err = shares.Patch(ctx, target, types.MergePatchType, []byte(ghost), metav1.PatchOptions{})
	if e := refusedByPolicy(err, user, "secrets", ns, "ca"); e != nil {
		t.Errorf("a ghost ownerReference: %v", e)
	} else if !strings.Contains(err.Error(), "may not change the ownerReferences of this share") {
		t.Errorf("the refusal does not say why: %v", err)
	} else {
		t.Logf("refused: %v", err)
	}

	// The collector's pass: the admin (who may read everything) gives the twin the same kind of
	// owner, and the collector deletes it.
	if _, err := admin.Patch(ctx, twin, types.MergePatchType, []byte(ghost), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the admin's ghost ownerReference was refused: %v", err)
	}
	framework.Eventually(t, 60*time.Second, func() error {
		if _, err := admin.Get(ctx, twin, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the twin share with a ghost owner is still there (%v): the garbage collector has not acted", err)
		}
		return nil
	})
	t.Logf("the garbage collector deleted the admin's twin share %s after it was given a ghost owner", time.Since(patched).Round(100*time.Millisecond))
	// As long again (at least 5 s), then the target: it must still be there, not being deleted,
	// and ownerless.
	time.Sleep(max(time.Since(patched), 5*time.Second))
	obj, err := admin.Get(ctx, target, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		t.Errorf("share %s is gone: the garbage collector deleted it through the user's ownerReference (checked %s after the patch)", target, time.Since(patched).Round(100*time.Millisecond))
	case err != nil:
		t.Fatal(err)
	case obj.GetDeletionTimestamp() != nil || len(obj.GetOwnerReferences()) != 0:
		t.Errorf("share %s: deletionTimestamp %v, ownerReferences %v: want neither", target, obj.GetDeletionTimestamp(), obj.GetOwnerReferences())
	}

	if t.Failed() {
		return
	}
	// With get on the source, the user may set the share's owners (as they could delete it were
	// RBAC to let them).
	e.GrantGet(t, framework.UserSubject(user), ns, "secrets", "ca")
	framework.Eventually(t, 30*time.Second, func() error {
		_, err := shares.Patch(ctx, target, types.MergePatchType, []byte(ghost), metav1.PatchOptions{})
		return err
	})
}
