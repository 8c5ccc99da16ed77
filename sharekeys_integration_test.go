//go:build integration

package main

// Specification, against the real API server with deploy.yaml's CRDs and admission policy, of a
// share's list of keys (spec.items) as admins and users meet it:
//   - the schema refuses what the driver would refuse (an empty list, a key or path breaking the
//     key rule, a path with a directory, a key or a file name twice) and accepts the rest, and a
//     share without a list, as OpenShift's manifests write it;
//   - the policy: a user who may update the share but not get its Secret cannot change the list
//     (widening it to the private key would share it), a label change still passes, the cluster
//     admin may, and so may the user once allowed to get the Secret.

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func listedShareObject(kind shareKind, name, ns, src string, items []any) *unstructured.Unstructured {
	u := shareObject(kind, name, ns, src)
	if items != nil {
		unstructured.SetNestedSlice(u.Object, items, "spec", "items")
	}
	return u
}

func TestShareItemsSchema(t *testing.T) {
	e := e2e(t)
	ctx := context.Background()
	for _, kind := range []shareKind{kindSecret, kindConfigMap} {
		shares := e.dyn.Resource(shareGVR(kind))
		for _, tc := range []struct {
			name  string
			items []any
			msg   string // "" : accepted
		}{
			{"no list (OpenShift's shape)", nil, ""},
			{"keys, renamed or not", sharedKeys("ca.crt=ca.pem", "tls.crt", ".hidden=x_Y-1"), ""},
			{"empty list", []any{}, "should have at least 1 items"},
			{"key twice", sharedKeys("ca.crt", "ca.crt=other"), "Duplicate value"},
			{"file name twice", sharedKeys("ca.crt=x", "tls.crt=x"), "two entries expose the same file name"},
			{"a path that is another's key", sharedKeys("ca.crt", "tls.crt=ca.crt"), "two entries expose the same file name"},
			{"path with a directory", sharedKeys("ca.crt=certs/ca.pem"), "spec.items[0].path"},
			{"reserved key", sharedKeys("..data"), "spec.items[0].key"},
			{"key escaping", sharedKeys("../etc"), "spec.items[0].key"},
			{"no key", []any{map[string]any{"path": "x"}}, "spec.items[0].key: Required value"},
		} {
			name := "schema-" + randSuffix()
			_, err := shares.Create(ctx, listedShareObject(kind, name, "any", "src", tc.items), metav1.CreateOptions{})
			if err == nil {
				e.deleteShare(t, kind, name)
			}
			switch {
			case tc.msg == "" && err != nil:
				t.Errorf("%s %s: refused: %v", kind.shareTypeName(), tc.name, err)
			case tc.msg != "" && (err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg)):
				t.Errorf("%s %s: got %v, want Invalid mentioning %q", kind.shareTypeName(), tc.name, err, tc.msg)
			}
			// Whatever the schema lets through, the driver reads as the same list, or refuses.
			if err == nil && tc.items != nil {
				if _, perr := parseExposure(tc.items, true); perr != nil {
					t.Errorf("%s %s: the API server accepted a list the driver refuses: %v", kind.shareTypeName(), tc.name, perr)
				}
			}
		}
	}
}

func TestSharePolicyGuardsTheListOfKeys(t *testing.T) {
	e := e2e(t)
	ctx := context.Background()
	u := e.newSharer(t)
	ns := e.namespace(t, "issuers")
	e.createSecret(t, ns, "issuer", map[string][]byte{"ca.crt": []byte("CA"), "tls.key": []byte("KEY")})
	name := "policy-keys-" + randSuffix()
	if _, err := e.dyn.Resource(shareGVR(kindSecret)).Create(ctx, listedShareObject(kindSecret, name, ns, "issuer", sharedKeys("ca.crt")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.deleteShare(t, kindSecret, name) })
	shares := u.dyn.Resource(shareGVR(kindSecret))
	widen := func(items []any) error {
		obj, err := shares.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unstructured.SetNestedSlice(obj.Object, items, "spec", "items")
		_, err = shares.Update(ctx, obj, metav1.UpdateOptions{})
		return err
	}

	// The user may update shares but not get the Secret: widening to the private key is refused,
	// naming the field and the permission missing; so is dropping the list (every key).
	err := widen(sharedKeys("ca.crt", "tls.key"))
	if e := refusedByPolicy(err, u.name, "secrets", ns, "issuer"); e != nil {
		t.Fatal(e)
	}
	if !strings.Contains(err.Error(), "(spec.items)") {
		t.Errorf("the refusal does not name spec.items: %v", err)
	}
	t.Logf("refused: %v", err)
	if _, err := shares.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/items"}]`), metav1.PatchOptions{}); refusedByPolicy(err, u.name, "secrets", ns, "issuer") != nil {
		t.Errorf("removing the list (sharing every key): %v", err)
	}
	// A label change keeps the list: admitted.
	if _, err := shares.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"platform"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label change was refused: %v", err)
	}
	// The cluster admin may widen it.
	obj, err := e.dyn.Resource(shareGVR(kindSecret)).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedSlice(obj.Object, sharedKeys("ca.crt", "tls.key"), "spec", "items")
	if _, err := e.dyn.Resource(shareGVR(kindSecret)).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the cluster admin was refused: %v", err)
	}
	// And the user, once allowed to get the Secret, may narrow it back.
	e.grantGet(t, userSubject(u.name), ns, "secrets", "issuer")
	eventually(t, 30*time.Second, func() error { return widen(sharedKeys("ca.crt")) })
}
