//go:build integration

package main

// Specification of least privilege, against the real API server with deploy.yaml installed:
//   - who may share what: deploy.yaml's ValidatingAdmissionPolicy refuses a share (create, or an
//     update that re-points it, or a delete) unless the requesting user may get the object it
//     points at; it never stops the cluster admin or an update that keeps the ref;
//   - what the driver may read: nothing until an admin binds deploy.yaml's source-reader
//     ClusterRole in a namespace (or a narrower Role); cluster-wide read is a separate opt-in
//     manifest. What pods and shares show meanwhile is in pods_access_integration_test.go; the wording of
//     the command the driver tells an admin to run, in sourceaccess_test.go.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
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
	e := e2e(t)
	for _, verb := range []string{"get", "list", "watch"} {
		for _, res := range []string{"secrets", "configmaps"} {
			for _, ns := range []string{"kube-system", "default", driverNamespace} {
				out, _ := exec.Command(kubectlBinary(), "--kubeconfig", e.kubeconfig, "auth", "can-i", verb, res,
					"-n", ns, "--as", driverUser).CombinedOutput()
				if got := strings.TrimSpace(string(out)); got != "no" {
					t.Errorf("kubectl auth can-i %s %s -n %s --as %s: %q, want no", verb, res, ns, driverUser, got)
				}
			}
		}
	}
	role, err := e.kube.RbacV1().ClusterRoles().Get(context.Background(), sourceReaderRole, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy.yaml's ClusterRole %s: %v", sourceReaderRole, err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("%s rules %v, want %v", sourceReaderRole, role.Rules, want)
	}
	crbs, err := e.kube.RbacV1().ClusterRoleBindings().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		if b.RoleRef.Name == sourceReaderRole {
			t.Errorf("ClusterRoleBinding %s binds %s cluster-wide", b.Name, sourceReaderRole)
		}
	}
}

// The cluster-wide opt-in is a valid manifest the API server accepts (dry run: applying it
// would widen every other test's driver).
func TestClusterWideReadOptInIsValid(t *testing.T) {
	e := e2e(t)
	out, err := exec.Command(kubectlBinary(), "--kubeconfig", e.kubeconfig, "apply", "--dry-run=server",
		"-f", "deploy/cluster-wide-read.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f deploy/cluster-wide-read.yaml: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "clusterrolebinding.rbac.authorization.k8s.io/shared-resource-csi-source-reader-all-namespaces") {
		t.Errorf("unexpected output: %s", out)
	}
}

// sharer is a user who may create, update and delete shares, and nothing else until a test
// grants more: what a platform team member typically holds.
type sharer struct {
	name string
	dyn  dynamic.Interface
}

func (e *kubeEnv) newSharer(t *testing.T) *sharer {
	t.Helper()
	ctx := context.Background()
	name := "sharer-" + randSuffix()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{shareGroup}, Resources: []string{"sharedsecrets", "sharedconfigmaps", "sharedsecrets/status", "sharedconfigmaps/status"},
		Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}
	if _, err := e.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{userSubject(name)}}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		e.kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = name
	cfg.Impersonate.Groups = []string{"system:authenticated"}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &sharer{name: name, dyn: dyn}
}

// grantGet lets subject get one object, the narrowest grant there is, until the test ends.
func (e *kubeEnv) grantGet(t *testing.T, subject rbacv1.Subject, ns, resource, name string) {
	t.Helper()
	ctx := context.Background()
	rn := "get-" + name + "-" + randSuffix()
	if _, err := e.kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: rn},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, ResourceNames: []string{name}, Verbs: []string{"get"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rn},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: rn},
		Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.kube.RbacV1().RoleBindings(ns).Delete(context.Background(), rn, metav1.DeleteOptions{})
		e.kube.RbacV1().Roles(ns).Delete(context.Background(), rn, metav1.DeleteOptions{})
	})
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: name}
}

func shareObject(kind shareKind, name, ns, src string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": shareGroup + "/v1alpha1",
		"kind":       kind.shareTypeName(),
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{shareRefField(kind): map[string]any{"namespace": ns, "name": src}},
	}}
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
	e := e2e(t)
	ctx := context.Background()
	u := e.newSharer(t)
	ns := e.namespace(t, "sources")
	e.createSecret(t, ns, "readable", map[string][]byte{"k": []byte("v")})
	e.createSecret(t, ns, "unreadable", map[string][]byte{"k": []byte("v")})
	shares := u.dyn.Resource(shareGVR(kindSecret))
	name := "policy-" + randSuffix()
	t.Cleanup(func() { e.deleteShare(t, kindSecret, name) })

	// No get on the Secret: refused, with the permission that is missing. (The API server loads
	// a new policy a moment after it is created: the first refusal is waited for.)
	eventually(t, 30*time.Second, func() error {
		_, err := shares.Create(ctx, shareObject(kindSecret, name, ns, "readable"), metav1.CreateOptions{})
		if err == nil {
			e.deleteShare(t, kindSecret, name)
		}
		return refusedByPolicy(err, u.name, "secrets", ns, "readable")
	})
	_, err := shares.Create(ctx, shareObject(kindSecret, name, ns, "readable"), metav1.CreateOptions{})
	if e := refusedByPolicy(err, u.name, "secrets", ns, "readable"); e != nil {
		t.Fatal(e)
	}
	t.Logf("refused: %v", err)

	// With get on that one Secret: admitted.
	e.grantGet(t, userSubject(u.name), ns, "secrets", "readable")
	eventually(t, 30*time.Second, func() error {
		_, err := shares.Create(ctx, shareObject(kindSecret, name, ns, "readable"), metav1.CreateOptions{})
		return err
	})

	// Re-pointing it at a Secret the user may not read: refused, and the share is unchanged.
	obj, err := shares.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(obj.Object, "unreadable", "spec", "secretRef", "name")
	_, err = shares.Update(ctx, obj, metav1.UpdateOptions{})
	if e := refusedByPolicy(err, u.name, "secrets", ns, "unreadable"); e != nil {
		t.Errorf("update to an unreadable ref: %v", e)
	}
	// An update that keeps the ref (labels, as a controller managing shares would write) is
	// admitted, whatever the user may read.
	patch := []byte(`{"metadata":{"labels":{"team":"platform"}}}`)
	if _, err := shares.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("an update keeping the ref was refused: %v", err)
	}

	// The cluster admin may share anything.
	adminShare := "policy-admin-" + randSuffix()
	if _, err := e.dyn.Resource(shareGVR(kindSecret)).Create(ctx, shareObject(kindSecret, adminShare, ns, "unreadable"), metav1.CreateOptions{}); err != nil {
		t.Errorf("the cluster admin was refused: %v", err)
	}
	// A user who may update that share, and read a Secret of their own, may not re-point the
	// admin's share to it: that needs get on the Secret it points at now, too.
	obj, err = shares.Get(ctx, adminShare, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(obj.Object, "readable", "spec", "secretRef", "name")
	_, err = shares.Update(ctx, obj, metav1.UpdateOptions{})
	if e := refusedByPolicy(err, u.name, "secrets", ns, "unreadable"); e != nil {
		t.Errorf("re-pointing a share away from a Secret the user may not read: %v", e)
	} else if !strings.Contains(err.Error(), "may not re-point this share away from it") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	// Nor delete it: the share stays.
	err = shares.Delete(ctx, adminShare, metav1.DeleteOptions{})
	if e := refusedByPolicy(err, u.name, "secrets", ns, "unreadable"); e != nil {
		t.Errorf("deleting a share of a Secret the user may not read: %v", e)
	} else if !strings.Contains(err.Error(), "so may not delete this share of it") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if _, err := e.dyn.Resource(shareGVR(kindSecret)).Get(ctx, adminShare, metav1.GetOptions{}); err != nil {
		t.Errorf("the refused delete removed the share: %v", err)
	}
	// A share of a Secret the user may read they may delete; the admin deletes any.
	if err := shares.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete of a share of a readable Secret refused: %v", err)
	}
	if err := e.dyn.Resource(shareGVR(kindSecret)).Delete(ctx, adminShare, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the cluster admin's delete refused: %v", err)
	}

	// A SharedConfigMap is checked the same way, against configmaps.
	cms := u.dyn.Resource(shareGVR(kindConfigMap))
	cmShare := "policy-cm-" + randSuffix()
	t.Cleanup(func() { e.deleteShare(t, kindConfigMap, cmShare) })
	_, err = cms.Create(ctx, shareObject(kindConfigMap, cmShare, ns, "settings"), metav1.CreateOptions{})
	if e := refusedByPolicy(err, u.name, "configmaps", ns, "settings"); e != nil {
		t.Errorf("SharedConfigMap: %v", e)
	}
	e.grantGet(t, userSubject(u.name), ns, "configmaps", "settings")
	eventually(t, 30*time.Second, func() error {
		_, err := cms.Create(ctx, shareObject(kindConfigMap, cmShare, ns, "settings"), metav1.CreateOptions{})
		return err
	})
}

// A share's pin on the object it was made for (status.sourceUID, sourcepin.go) is guarded as its
// ref is: a user who may update shares and their status, but not get the source, can neither
// make the share follow re-creations nor move or clear its pin (either would let a namespace
// re-created by someone else through to every consumer); the cluster admin can.
func TestSharePolicyGuardsThePin(t *testing.T) {
	e := e2e(t)
	ctx := context.Background()
	u := e.newSharer(t)
	ns := e.namespace(t, "pinned")
	e.createSecret(t, ns, "ca", map[string][]byte{"ca.crt": []byte("CA")})
	src, err := e.kube.CoreV1().Secrets(ns).Get(ctx, "ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := "policy-pin-" + randSuffix()
	admin := e.dyn.Resource(shareGVR(kindSecret))
	if _, err := admin.Create(ctx, shareObject(kindSecret, name, ns, "ca"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.deleteShare(t, kindSecret, name) })
	// Pinned as the driver's status writer pins it: the source's UID (a first pin is not checked).
	pin := func(dyn dynamic.Interface, uid string) error {
		_, err := dyn.Resource(shareGVR(kindSecret)).Patch(ctx, name, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"status":{"sourceUID":%q}}`, uid)), metav1.PatchOptions{}, "status")
		return err
	}
	if err := pin(e.dyn, string(src.UID)); err != nil {
		t.Fatal(err)
	}

	shares := u.dyn.Resource(shareGVR(kindSecret))
	follow := []byte(`{"spec":{"sourceRecreation":"Follow"}}`)
	eventually(t, 30*time.Second, func() error { // the policy's new rules may take a moment to load
		_, err := shares.Patch(ctx, name, types.MergePatchType, follow, metav1.PatchOptions{})
		if err == nil {
			return fmt.Errorf("setting spec.sourceRecreation: Follow admitted, want refused")
		}
		return refusedByPolicy(err, u.name, "secrets", ns, "ca")
	})
	_, err = shares.Patch(ctx, name, types.MergePatchType, follow, metav1.PatchOptions{})
	if e := refusedByPolicy(err, u.name, "secrets", ns, "ca"); e != nil || !strings.Contains(err.Error(), "(spec.sourceRecreation)") {
		t.Errorf("following re-creations: %v (%v)", e, err)
	}
	for _, uid := range []string{"00000000-0000-0000-0000-00000000beef", ""} {
		err := pin(u.dyn, uid)
		if e := refusedByPolicy(err, u.name, "secrets", ns, "ca"); e != nil || !strings.Contains(err.Error(), "(status.sourceUID)") {
			t.Errorf("moving the pin to %q: %v (%v)", uid, e, err)
		}
	}
	// Writing the pin it already has, and a label, are admitted.
	if err := pin(u.dyn, string(src.UID)); err != nil {
		t.Errorf("keeping the pin was refused: %v", err)
	}
	if _, err := shares.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"platform"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label change was refused: %v", err)
	}
	// The admin accepts another object, and may make the share follow.
	if err := pin(e.dyn, "00000000-0000-0000-0000-00000000beef"); err != nil {
		t.Errorf("the admin moving the pin was refused: %v", err)
	}
	if _, err := admin.Patch(ctx, name, types.MergePatchType, follow, metav1.PatchOptions{}); err != nil {
		t.Errorf("the admin setting Follow was refused: %v", err)
	}
}

// grantReadFix is what every message about a source the driver may not read tells an admin to
// run, for the tests' driver (deploy.yaml's account).
func grantReadFix(ns string) string {
	return "kubectl create rolebinding shared-resource-csi-source-reader --namespace=" + ns +
		" --clusterrole=shared-resource-csi-source-reader --serviceaccount=" + driverNamespace + ":" + driverServiceAccount +
		" --serviceaccount=" + driverNamespace + ":" + statusServiceAccount
}

// A publish of a source the driver may not read fails FailedPrecondition with the command that
// fixes it; running that command (as the admin) lets the kubelet's retry mount it.
func TestPublishOfUnreadableSourceSaysWhatToRun(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	src, consumer := e.namespace(t, "ungranted"), e.namespace(t, "consumer")
	data := map[string][]byte{"ca.crt": p.secret("ca")}
	e.createSecret(t, src, "ca-bundle", data)
	share := "ungranted-" + randSuffix()
	e.createShare(t, kindSecret, share, src, "ca-bundle")
	e.grant(t, consumer, kindSecret, share, serviceAccount(consumer, "app"))
	v := p.volume(consumer, "app", map[string]string{attrSharedSecret: share})

	err := p.publish(v)
	wantCode(t, err, codes.FailedPrecondition, "the driver may not read Secret "+src+"/ca-bundle", grantReadFix(src), "--resource-name=ca-bundle")
	p.assertNothingLeft(t, v)
	e.runFix(t, err.Error())
	e.waitMayGet(t, serviceAccount(driverNamespace, driverServiceAccount), src, "secrets", "ca-bundle", true)
	if err := p.publish(v); err != nil {
		t.Fatalf("publish after the fix: %v", err)
	}
	if err := sameFiles(readVolume(t, v.target), asStrings(data)); err != nil {
		t.Fatal(err)
	}
	p.unpublishAll(t, v)
}

// runFix runs, as the cluster admin, the commands a message tells the admin to run first (the
// narrowest grant: "run: kubectl ... && kubectl ... (or, ...").
func (e *kubeEnv) runFix(t testing.TB, msg string) {
	t.Helper()
	_, cmdline, ok := strings.Cut(msg, "run: ")
	if !ok {
		t.Fatalf("no command to run in %q", msg)
	}
	cmdline, _, _ = strings.Cut(cmdline, " (or, ")
	for _, cmd := range strings.Split(cmdline, " && ") {
		args, ok := strings.CutPrefix(cmd, "kubectl ")
		if !ok {
			t.Fatalf("%q is not a kubectl command", cmd)
		}
		if out, err := exec.Command(kubectlBinary(), append([]string{"--kubeconfig", e.kubeconfig}, strings.Fields(args)...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		t.Logf("ran the fix: %s", cmd)
	}
}

// The driver losing read on a source is not the pod losing access: the volume keeps its last
// files (never emptied, never a revocation), the pod is warned once (not every cycle) with the
// command that fixes it, and once read is back it is told so and refreshed again.
func TestDriverLosingReadKeepsDataAndWarnsOnce(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	src, consumer := e.namespace(t, "platform"), e.namespace(t, "consumer")
	revokeRead := e.grantSourceRead(t, src, sourceReaders()...)
	data := map[string][]byte{"ca.crt": p.secret("ca")}
	e.createSecret(t, src, "ca-bundle", data)
	share := "corp-ca-" + randSuffix()
	e.createShare(t, kindSecret, share, src, "ca-bundle")
	e.grant(t, consumer, kindSecret, share, serviceAccount(consumer, "app"))
	v := p.volume(consumer, "app", map[string]string{attrSharedSecret: share})
	if err := p.publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}

	revokeRead()
	var warned []corev1.Event
	eventually(t, relist+relistSlack, func() error {
		var err error
		warned, err = e.podEvents(v.podNS, v.podName, reasonRefreshFailed)
		if err != nil || len(warned) == 0 {
			return fmt.Errorf("no %s event yet (%v)", reasonRefreshFailed, err)
		}
		return nil
	})
	for _, want := range []string{"keeps its last files and is not refreshed", "may not read Secret " + src + "/ca-bundle", grantReadFix(src)} {
		if !strings.Contains(warned[0].Message, want) {
			t.Errorf("%s event %q does not contain %q", reasonRefreshFailed, warned[0].Message, want)
		}
	}
	if warned[0].Type != corev1.EventTypeWarning {
		t.Errorf("%s event of type %s, want Warning", reasonRefreshFailed, warned[0].Type)
	}
	// Later cycles keep the files and do not warn again.
	time.Sleep(2 * relist)
	if err := sameFiles(readVolume(t, v.target), asStrings(data)); err != nil {
		t.Fatalf("losing read changed the volume: %v", err)
	}
	if evs, _ := e.podEvents(v.podNS, v.podName, reasonRefreshFailed); len(evs) != 1 || evCount(evs[0]) > 1 {
		t.Errorf("%s recorded %d events (%v), want one, once", reasonRefreshFailed, len(evs), evs)
	}
	if evs, _ := e.podEvents(v.podNS, v.podName, reasonRevoked); len(evs) > 0 {
		t.Errorf("losing read was taken for a revocation: %v", evs[0].Message)
	}

	// Read granted again: the pod is told, and the volume follows the source again.
	e.grantSourceRead(t, src, sourceReaders()...)
	eventually(t, relist+relistSlack, func() error {
		evs, err := e.podEvents(v.podNS, v.podName, reasonRefreshResumed)
		if err != nil || len(evs) == 0 {
			return fmt.Errorf("no %s event yet (%v)", reasonRefreshResumed, err)
		}
		return nil
	})
	next := map[string][]byte{"ca.crt": p.secret("ca2")}
	e.updateSecret(t, src, "ca-bundle", next)
	eventually(t, relist+relistSlack, func() error { return sameFiles(readVolume(t, v.target), asStrings(next)) })
	p.unpublishAll(t, v)
}
