package api

// Specification, against the real API server with deploy.yaml's CRDs and admission policy, of a
// share's list of keys (spec.items) as admins and users meet it:
//   - the schema refuses what the driver would refuse (an empty list, a key or path breaking the
//     key rule, a path with a directory, a key or a file name twice) and accepts the rest, and a
//     share without a list, as OpenShift's manifests write it;
//   - the policy: a user who may update the share but not get its Secret cannot change the list
//     (widening it to the private key would share it), a label change still passes, the cluster
//     admin may, and so may the user once allowed to get the Secret.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func TestShareItemsSchema(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	for _, kind := range []framework.ShareKind{framework.KindSecret, framework.KindConfigMap} {
		shares := e.Dyn.Resource(framework.ShareGVR(kind))
		for _, tc := range []struct {
			name  string
			items []any
			msg   string // "" : accepted
		}{
			{"no list (OpenShift's shape)", nil, ""},
			{"keys, renamed or not", framework.SharedKeys("ca.crt=ca.pem", "tls.crt", ".hidden=x_Y-1"), ""},
			{"empty list", []any{}, "should have at least 1 items"},
			{"key twice", framework.SharedKeys("ca.crt", "ca.crt=other"), "Duplicate value"},
			{"file name twice", framework.SharedKeys("ca.crt=x", "tls.crt=x"), "two entries expose the same file name"},
			{"a path that is another's key", framework.SharedKeys("ca.crt", "tls.crt=ca.crt"), "two entries expose the same file name"},
			{"path with a directory", framework.SharedKeys("ca.crt=certs/ca.pem"), "spec.items[0].path"},
			{"reserved key", framework.SharedKeys("..data"), "spec.items[0].key"},
			{"key escaping", framework.SharedKeys("../etc"), "spec.items[0].key"},
			{"no key", []any{map[string]any{"path": "x"}}, "spec.items[0].key: Required value"},
		} {
			name := "schema-" + framework.RandSuffix()
			_, err := shares.Create(ctx, framework.ListedShareObject(kind, name, "any", "src", tc.items), metav1.CreateOptions{})
			if err == nil {
				e.DeleteShare(t, kind, name)
			}
			switch {
			case tc.msg == "" && err != nil:
				t.Errorf("%s %s: refused: %v", kind.ShareTypeName(), tc.name, err)
			case tc.msg != "" && (err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg)):
				t.Errorf("%s %s: got %v, want Invalid mentioning %q", kind.ShareTypeName(), tc.name, err, tc.msg)
			}
			// That the driver reads the one list the schema accepts here ("keys, renamed or not")
			// is specified without a cluster by TestShareItemsAccepted (internal/share/exposure_test.go,
			// the same list): this suite cannot call the driver's parser.
		}
	}
}

func TestSharePolicyGuardsTheListOfKeys(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	u := e.NewSharer(t)
	ns := e.Namespace(t, "issuers")
	e.CreateSecret(t, ns, "issuer", map[string][]byte{"ca.crt": []byte("CA"), "tls.key": []byte("KEY")})
	name := "policy-keys-" + framework.RandSuffix()
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Create(ctx, framework.ListedShareObject(framework.KindSecret, name, ns, "issuer", framework.SharedKeys("ca.crt")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.DeleteShare(t, framework.KindSecret, name) })
	shares := u.Dyn.Resource(framework.ShareGVR(framework.KindSecret))
	widen := func(items []any) error {
		obj, err := shares.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		must(t, unstructured.SetNestedSlice(obj.Object, items, "spec", "items"))
		_, err = shares.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	}

	// The user may update shares but not get the Secret: widening to the private key is refused,
	// naming the field and the permission missing; so is dropping the list (every key).
	err := widen(framework.SharedKeys("ca.crt", "tls.key"))
	if e := refusedByPolicy(err, u.Name, "secrets", ns, "issuer"); e != nil {
		t.Fatal(e)
	}
	if !strings.Contains(err.Error(), "(spec.items)") {
		t.Errorf("the refusal does not name spec.items: %v", err)
	}
	t.Logf("refused: %v", err)
	if _, err := shares.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/items"}]`), metav1.PatchOptions{}); refusedByPolicy(err, u.Name, "secrets", ns, "issuer") != nil {
		t.Errorf("removing the list (sharing every key): %v", err)
	}
	// A label change keeps the list: admitted.
	if _, err := shares.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"platform"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label change was refused: %v", err)
	}
	// The cluster admin may widen it.
	obj, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, unstructured.SetNestedSlice(obj.Object, framework.SharedKeys("ca.crt", "tls.key"), "spec", "items"))
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the cluster admin was refused: %v", err)
	}
	// And the user, once allowed to get the Secret, may narrow it back.
	e.GrantGet(t, framework.UserSubject(u.Name), ns, "secrets", "issuer")
	framework.Eventually(t, 30*time.Second, func() error { return widen(framework.SharedKeys("ca.crt")) })
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
