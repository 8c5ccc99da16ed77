package api

// Specification of who may write share status (roles.go), decided by the real API server with
// each account's own token (deploy.yaml's RBAC, as installed): the node plugins' ServiceAccount,
// whose token every node holds, may not update sharedsecrets/status or sharedconfigmaps/status,
// nor read, update or create the status Lease: the API server answers 403 Forbidden. Were it
// allowed, whoever takes one node could hold the Lease for good, write a share's first pin
// (status.sourceUID, which the admission policy does not check) and put commands for admins in
// Ready messages. The status controller's ServiceAccount may do each of these; the node plugins'
// may still read shares.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// accountClients are clients authenticated with one ServiceAccount's token.
type accountClients struct {
	name string
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func clientsFor(t *testing.T, name, kubeconfig string) accountClients {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return accountClients{name: name, kube: kube, dyn: dyn}
}

func TestOnlyTheStatusControllerMayWriteStatus(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	// One share of each kind, and the status Lease (as an admin, if no status controller made it
	// yet), to write to.
	shares := map[framework.ShareKind]string{framework.KindSecret: "lp-secret-" + framework.RandSuffix(), framework.KindConfigMap: "lp-cm-" + framework.RandSuffix()}
	for k, name := range shares {
		e.CreateShare(t, k, name, "lp-platform", "lp-source")
	}
	leases := e.Kube.CoordinationV1().Leases(framework.DriverNamespace)
	if _, err := leases.Get(ctx, framework.StatusLeaseName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: framework.StatusLeaseName}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}

	// The status each account tries to write: a condition of a type nothing else writes.
	withProbe := func(k framework.ShareKind, name string) *unstructured.Unstructured {
		t.Helper()
		u, err := e.Dyn.Resource(framework.ShareGVR(k)).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := map[string]any{"type": "LeastPrivilegeProbe", "status": "True", "reason": "Probe", "message": "written by a test",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
		if err := unstructured.SetNestedSlice(u.Object, []any{cond}, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		return u
	}
	// Each write an account attempts; nil when the API server accepted it. Creating the Lease
	// that exists: AlreadyExists means the authorizer let the request through.
	writes := func(c accountClients) map[string]error {
		out := map[string]error{}
		for k, name := range shares {
			_, err := c.dyn.Resource(framework.ShareGVR(k)).UpdateStatus(ctx, withProbe(k, name), metav1.UpdateOptions{})
			out["update "+k.ShareResource()+"/status"] = err
		}
		_, err := c.kube.CoordinationV1().Leases(framework.DriverNamespace).Get(ctx, framework.StatusLeaseName, metav1.GetOptions{})
		out["get the status Lease"] = err
		l, err := e.Kube.CoordinationV1().Leases(framework.DriverNamespace).Get(ctx, framework.StatusLeaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.kube.CoordinationV1().Leases(framework.DriverNamespace).Update(ctx, l, metav1.UpdateOptions{})
		out["update the status Lease"] = err
		_, err = c.kube.CoordinationV1().Leases(framework.DriverNamespace).Create(ctx,
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: framework.StatusLeaseName}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		out["create the status Lease"] = err
		return out
	}

	// The node plugins' account: every one refused by the authorizer.
	node := clientsFor(t, "the node plugins' account", e.DriverKubeconfig)
	refused := 0
	nodeWrites := writes(node)
	for what, err := range nodeWrites {
		if apierrors.IsForbidden(err) {
			refused++
			continue
		}
		t.Errorf("%s may %s: %v, want 403 Forbidden", node.name, what, err)
	}
	t.Logf("%s: %d of %d status and Lease requests refused 403 Forbidden", node.name, refused, len(nodeWrites))
	// It still reads the shares it mounts.
	for k := range shares {
		if _, err := node.dyn.Resource(framework.ShareGVR(k)).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			t.Errorf("%s may not list %s: %v", node.name, k.ShareResource(), err)
		}
	}

	// The status controller's account: every one accepted.
	status := clientsFor(t, "the status controller's account", e.StatusKubeconfigFor(t))
	for what, err := range writes(status) {
		if err != nil {
			t.Errorf("%s may not %s: %v", status.name, what, err)
		}
	}
	for k, name := range shares {
		c, u, err := e.ReadyConditionOfType(k, name, "LeastPrivilegeProbe")
		if err != nil || c == nil {
			t.Errorf("%s %s has no condition written by %s (%v): %v", k.ShareTypeName(), name, status.name, err, u)
		}
	}
}
