package api

// Specification of the move from OpenShift's shared resource driver
// (docs/moving-from-openshift.md), against the real API server with deploy.yaml installed. There is no
// OpenShift here; what is checked is that what users of OpenShift's driver have in their clusters
// is accepted as it is:
//   - the objects OpenShift's documentation and Builds for OpenShift's manifests have users create,
//     written here in their shape (openShiftObjects): shares with a description, one carrying the
//     metadata.namespace Builds for OpenShift's own test data sets on it; a Role and a ClusterRole
//     granting `use` by name; the Role that lets OpenShift's driver read a source; a pod with
//     in-line volumes and refreshResource "false";
//   - the documented commands, as written there: listing the shares' source namespaces, finding and
//     patching the RoleBindings that let OpenShift's driver read, backing the shares up and
//     restoring them;
//   - OpenShift's CRD schema as Builds for OpenShift installs it (theirSchema), against ours
//     (deploy.yaml's), both under test groups so the cluster's share CRDs stay deploy.yaml's: what
//     each accepts, and shares stored under theirs once ours replaces it.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// openShiftPod mounts both shares the way OpenShift's examples do, one without refresh.
const openShiftPod = `
kind: Pod
apiVersion: v1
metadata:
  name: my-csi-app-pod
  namespace: $APP
spec:
  serviceAccountName: builder
  containers:
    - name: my-frontend
      image: quay.io/quay/busybox
      command: ["sh", "-c", "ls -la /data /config; sleep 120"]
      volumeMounts:
        - mountPath: /data
          name: my-csi-volume
        - mountPath: /config
          name: shared-config
  volumes:
    - name: my-csi-volume
      csi:
        readOnly: true
        driver: csi.sharedresource.openshift.io
        volumeAttributes:
          sharedSecret: $SECRET_SHARE
          refreshResource: "false"
    - name: shared-config
      csi:
        readOnly: true
        driver: csi.sharedresource.openshift.io
        volumeAttributes:
          sharedConfigMap: $CONFIG_SHARE
`

// What OpenShift's documentation has users create is accepted as written: the shares (stored as
// OpenShift's would be: the namespace on a cluster-scoped object dropped, the description kept),
// the grants of `use` by name through a Role or a ClusterRole (in effect for the pod's service
// account, as the driver asks), and a pod with in-line volumes and refreshResource "false".
func TestOpenShiftDocumentedObjectsAreAccepted(t *testing.T) {
	e := framework.E2e(t)
	s := e.ApplyOpenShiftObjects(t)

	for _, c := range []struct {
		kind        framework.ShareKind
		name, descr string
	}{{framework.KindSecret, s.SecretShare, "entitlement keys for builds"}, {framework.KindConfigMap, s.ConfigShare, "shared configuration"}} {
		u, err := e.Dyn.Resource(framework.ShareGVR(c.kind)).Get(context.Background(), c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u.GetNamespace() != "" {
			t.Errorf("%s %s stored with namespace %q", c.kind.ShareTypeName(), c.name, u.GetNamespace())
		}
		if got, _, _ := unstructured.NestedString(u.Object, "spec", "description"); got != c.descr {
			t.Errorf("%s %s: spec.description %q, want %q", c.kind.ShareTypeName(), c.name, got, c.descr)
		}
		if got, _, _ := unstructured.NestedString(u.Object, "spec", framework.ShareRefField(c.kind), "namespace"); got != s.Src {
			t.Errorf("%s %s: source namespace %q, want %q", c.kind.ShareTypeName(), c.name, got, s.Src)
		}
	}
	e.WaitAccess(t, s.App, framework.KindSecret, s.SecretShare, framework.ServiceAccount(s.App, "builder"), true)
	e.WaitAccess(t, s.App, framework.KindConfigMap, s.ConfigShare, framework.ServiceAccount(s.App, "default"), true)
	e.WaitAccess(t, s.App, framework.KindSecret, s.ConfigShare, framework.ServiceAccount(s.App, "builder"), false)

	out := e.Kubectl(t, s.Vars.Replace(openShiftPod), "apply", "--dry-run=server", "-f", "-")
	if !strings.Contains(out, "pod/my-csi-app-pod created (server dry run)") {
		t.Errorf("unexpected output: %s", out)
	}
}

// The documented commands for the move (README.md or docs/*.md), exactly as written there (NAME and NAMESPACE filled in,
// and the shares narrowed to this test's).
const (
	readmeSourceNamespaces = `kubectl get sharedsecrets,sharedconfigmaps -o json | jq -r '.items[].spec | (.secretRef // .configMapRef).namespace' | sort -u`
	readmeFindBindings     = `kubectl get rolebindings -A -o json | jq -r '.items[] | select(any(.subjects[]?; .kind == "ServiceAccount" and .name == "csi-driver-shared-resource")) | "\(.metadata.namespace) \(.metadata.name)"'`
	readmePatchBinding     = `kubectl patch rolebinding NAME -n NAMESPACE --type=json -p '[{"op":"add","path":"/subjects/-","value":{"kind":"ServiceAccount","name":"shared-resource-csi-driver","namespace":"csi-sharedresource"}},{"op":"add","path":"/subjects/-","value":{"kind":"ServiceAccount","name":"shared-resource-csi-status","namespace":"csi-sharedresource"}}]'`
	readmeBackup           = `kubectl get sharedsecrets,sharedconfigmaps -o json | jq '{apiVersion: "v1", kind: "List", items: [.items[] |
     {apiVersion, kind, metadata: (.metadata | {name, labels, annotations} | with_entries(select(.value != null))), spec}]}' >shares.json`
	readmeRestore = `kubectl create -f shares.json`
)

// The documented commands do what they say: list the source namespaces, find the RoleBinding that
// lets OpenShift's driver read and add this driver to it (which then may read that one Secret, and
// no other), and back the shares up and restore them as they were.
func TestMovingFromOpenShiftREADMECommands(t *testing.T) {
	// The commands may be in the README or in any page of docs/: they are looked for in all of
	// them together.
	docs, pages := framework.ReadDocs(t)
	for _, c := range []string{readmeSourceNamespaces, readmeFindBindings, readmePatchBinding, readmeBackup, readmeRestore} {
		if !bytes.Contains(docs, []byte(c)) {
			t.Fatalf("none of %s has the command\n%s", strings.Join(pages, ", "), c)
		}
	}
	e := framework.E2e(t)
	s := e.ApplyOpenShiftObjects(t)
	dir := t.TempDir()
	onlyOurs := strings.NewReplacer("kubectl get sharedsecrets,sharedconfigmaps",
		"kubectl get sharedsecret/"+s.SecretShare+" sharedconfigmap/"+s.ConfigShare)

	if got := e.Shell(t, dir, onlyOurs.Replace(readmeSourceNamespaces)); got != s.Src+"\n" {
		t.Errorf("source namespaces %q, want %q", got, s.Src+"\n")
	}
	binding := s.Src + " share-entitlement-key"
	if got := e.Shell(t, dir, readmeFindBindings); !strings.Contains("\n"+got, "\n"+binding+"\n") {
		t.Errorf("RoleBindings of OpenShift's driver:\n%s\nwant a line %q", got, binding)
	}
	e.Shell(t, dir, strings.NewReplacer("NAMESPACE", s.Src, "NAME", "share-entitlement-key").Replace(readmePatchBinding))
	for _, sa := range framework.SourceReaders() {
		e.WaitMayGet(t, sa, s.Src, "secrets", "entitlement-key", true)
		e.WaitMayGet(t, sa, s.Src, "secrets", "another-secret", false)
		e.WaitMayGet(t, sa, s.Src, "configmaps", "shared-config", false)
	}

	before := map[framework.ShareKind]*unstructured.Unstructured{}
	names := map[framework.ShareKind]string{framework.KindSecret: s.SecretShare, framework.KindConfigMap: s.ConfigShare}
	for k, name := range names {
		u, err := e.Dyn.Resource(framework.ShareGVR(k)).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[k] = u
	}
	e.Shell(t, dir, onlyOurs.Replace(readmeBackup))
	for k, name := range names {
		e.DeleteShare(t, k, name)
		framework.Eventually(t, 30*time.Second, func() error {
			_, err := e.Dyn.Resource(framework.ShareGVR(k)).Get(context.Background(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("%s %s not deleted yet (%v)", k.ShareTypeName(), name, err)
		})
	}
	e.Shell(t, dir, readmeRestore)
	for k, name := range names {
		u, err := e.Dyn.Resource(framework.ShareGVR(k)).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s %s after the restore: %v", k.ShareTypeName(), name, err)
		}
		if got, want := fmt.Sprint(u.Object["spec"]), fmt.Sprint(before[k].Object["spec"]); got != want {
			t.Errorf("%s %s restored with spec %s, want %s", k.ShareTypeName(), name, got, want)
		}
		if got, want := fmt.Sprint(u.GetLabels()), fmt.Sprint(before[k].GetLabels()); got != want {
			t.Errorf("%s %s restored with labels %s, want %s", k.ShareTypeName(), name, got, want)
		}
	}
}

// ourCRD is deploy.yaml's CRD of the kind, moved to group.
func ourCRD(t *testing.T, k framework.ShareKind, group string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile("deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := framework.FindObject(framework.RenderedObjects(t, b), "CustomResourceDefinition", k.ShareResource()+"."+framework.ShareGroup)
	if crd == nil {
		t.Fatalf("deploy.yaml has no CRD %s.%s", k.ShareResource(), framework.ShareGroup)
	}
	crd = crd.DeepCopy()
	crd.SetName(k.ShareResource() + "." + group)
	crd.SetLabels(nil)
	crd.SetAnnotations(nil)
	if err := unstructured.SetNestedField(crd.Object, group, "spec", "group"); err != nil {
		t.Fatal(err)
	}
	return crd
}

// theirCRD is ourCRD with OpenShift's schema in place of ours, and no printer columns.
func theirCRD(t *testing.T, k framework.ShareKind, group string) *unstructured.Unstructured {
	t.Helper()
	crd := ourCRD(t, k, group)
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	v := versions[0].(map[string]any)
	condition, ok, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema", "properties", "status", "properties", "conditions", "items")
	if !ok {
		t.Fatal("deploy.yaml's CRD has no status.conditions items")
	}
	v["schema"] = map[string]any{"openAPIV3Schema": theirSchema(framework.ShareRefField(k), condition)}
	delete(v, "additionalPrinterColumns")
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	return crd
}

// theirSchema is the schema of OpenShift's share CRDs as Builds for OpenShift installs them
// (generated from openshift/api's sharedresource/v1alpha1 types): the ref's name and namespace
// are any strings, spec is not required, and status.conditions is an array of metav1.Condition
// without list-map markers. Its condition items are the same as ours (compared when this was
// written), so they are taken from ours. openshift/api's current schema adds required: [spec] and
// the list-map markers, as ours has.
func theirSchema(ref string, condition map[string]any) map[string]any {
	str := func() map[string]any { return map[string]any{"type": "string"} }
	return map[string]any{"type": "object", "properties": map[string]any{
		"apiVersion": str(), "kind": str(), "metadata": map[string]any{"type": "object"},
		"spec": map[string]any{"type": "object", "required": []any{ref}, "properties": map[string]any{
			"description": str(),
			ref: map[string]any{"type": "object", "required": []any{"name", "namespace"},
				"properties": map[string]any{"name": str(), "namespace": str()}},
		}},
		"status": map[string]any{"type": "object", "properties": map[string]any{
			"conditions": map[string]any{"type": "array", "items": condition},
		}},
	}}
}

func shareIn(group string, k framework.ShareKind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1alpha1",
		"kind":       k.ShareTypeName(),
		"metadata":   map[string]any{"name": name},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func refSpec(k framework.ShareKind, ns, name string) map[string]any {
	return map[string]any{framework.ShareRefField(k): map[string]any{"namespace": ns, "name": name}}
}

func condition(typ, status, reason string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": "",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
}

// OpenShift's CRD schema against ours. Each object either accepts is listed with what each does:
// where they differ ours is stricter, and only about shares that could never be mounted, or a
// description longer than 4096 characters (which every node would otherwise hold whole). (The
// status part: OpenShift's driver writes no status, its ClusterRole has no status permission; the
// shape its CRD allows is metav1.Condition, as ours.) Then ours replaces theirs, as installing this
// chart over Builds for OpenShift's CRDs does: shares stored under theirs are still served, given a
// status (the driver marks the ones it cannot use InvalidShare) and deleted, and those whose ref
// ours would refuse can still be labelled (CRD validation ratcheting).
func TestOpenShiftCRDSchemaAgainstOurs(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	sfx := framework.RandSuffix()
	theirs, ours := "theirs-"+sfx+".srcsi.test", "ours-"+sfx+".srcsi.test"
	gvr := func(group string, k framework.ShareKind) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: k.ShareResource()}
	}
	for _, k := range []framework.ShareKind{framework.KindSecret, framework.KindConfigMap} {
		probe := func(group string) *unstructured.Unstructured {
			return shareIn(group, k, "probe", refSpec(k, "platform", "ca"))
		}
		e.CreateCRD(t, theirCRD(t, k, theirs), probe(theirs), gvr(theirs, k))
		e.CreateCRD(t, ourCRD(t, k, ours), probe(ours), gvr(ours, k))
	}

	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	documented := refSpec(framework.KindSecret, "openshift-config-managed", "etc-pki-entitlement")
	documented["description"] = "entitlement keys for builds"
	for _, c := range []struct {
		name         string
		kind         framework.ShareKind
		spec         map[string]any // nil: no spec at all
		theirs, ours bool           // accepted
	}{
		{"documented SharedSecret", framework.KindSecret, documented, true, true},
		{"documented SharedConfigMap", framework.KindConfigMap, refSpec(framework.KindConfigMap, "my-csi-app-namespace", "my-config"), true, true},
		{"source namespace empty", framework.KindSecret, refSpec(framework.KindSecret, "", "ca-bundle"), true, false},
		{"source name empty", framework.KindConfigMap, refSpec(framework.KindConfigMap, "platform", ""), true, false},
		{"source name not a DNS subdomain", framework.KindSecret, refSpec(framework.KindSecret, "platform", "Ca_Bundle"), true, false},
		{"source namespace longer than a DNS label", framework.KindSecret, refSpec(framework.KindSecret, strings.Repeat("n", 64), "ca-bundle"), true, false},
		{"no spec", framework.KindSecret, nil, true, false},
		{"spec without the ref", framework.KindSecret, map[string]any{"description": "x"}, false, false},
		{"ref without namespace", framework.KindConfigMap, map[string]any{"configMapRef": map[string]any{"name": "x"}}, false, false},
		{"description longer than 4096 characters", framework.KindSecret, map[string]any{"secretRef": map[string]any{"namespace": "a", "name": "b"}, "description": strings.Repeat("d", 4097)}, true, false},
		{"description of 4096 characters", framework.KindConfigMap, map[string]any{"configMapRef": map[string]any{"namespace": "a", "name": "b"}, "description": strings.Repeat("d", 4096)}, true, true},
		{"description not a string", framework.KindSecret, map[string]any{"secretRef": map[string]any{"namespace": "a", "name": "b"}, "description": int64(5)}, false, false},
		{"a field neither has", framework.KindSecret, map[string]any{"secretRef": map[string]any{"namespace": "a", "name": "b"}, "items": "x"}, false, false},
	} {
		for _, side := range []struct {
			group string
			want  bool
		}{{theirs, c.theirs}, {ours, c.ours}} {
			_, err := e.Dyn.Resource(gvr(side.group, c.kind)).Create(ctx, shareIn(side.group, c.kind, "osh-case", c.spec), dryRun)
			if got := err == nil; got != side.want {
				t.Errorf("%s under %s: accepted %v, want %v (%v)", c.name, side.group, got, side.want, err)
			}
		}
	}

	// Status, on a stored share of each.
	for _, c := range []struct {
		name         string
		conditions   []any
		theirs, ours bool
	}{
		{"the Ready condition this driver writes", []any{condition("Ready", "True", "SourceAvailable")}, true, true},
		{"conditions of two types", []any{condition("Ready", "False", "SourceForbidden"), condition("Degraded", "False", "AsExpected")}, true, true},
		{"two conditions of one type", []any{condition("Ready", "True", "SourceAvailable"), condition("Ready", "False", "SourceNotFound")}, true, false},
		{"a condition without reason", []any{map[string]any{"type": "Ready", "status": "True", "message": "",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}}, false, false},
		{"8 conditions", conditionsOfTypes(8), true, true},
		// Ours bounds them: every node plugin used to cache every share's conditions.
		{"9 conditions", conditionsOfTypes(9), true, false},
	} {
		for _, side := range []struct {
			group string
			want  bool
		}{{theirs, c.theirs}, {ours, c.ours}} {
			r := e.Dyn.Resource(gvr(side.group, framework.KindSecret))
			u, err := r.Get(ctx, "osh-status", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				u, err = r.Create(ctx, shareIn(side.group, framework.KindSecret, "osh-status", documented), metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := unstructured.SetNestedSlice(u.Object, c.conditions, "status", "conditions"); err != nil {
				t.Fatal(err)
			}
			_, err = r.UpdateStatus(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			if got := err == nil; got != side.want {
				t.Errorf("status with %s under %s: accepted %v, want %v (%v)", c.name, side.group, got, side.want, err)
			}
		}
	}

	// Shares stored under theirs, then our schema in its place.
	r := e.Dyn.Resource(gvr(theirs, framework.KindSecret))
	stored := map[string]map[string]any{
		"stored-valid":           documented,
		"stored-empty-namespace": refSpec(framework.KindSecret, "", "ca-bundle"),
		"stored-no-spec":         nil,
	}
	for name, spec := range stored {
		if _, err := r.Create(ctx, shareIn(theirs, framework.KindSecret, name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatalf("storing %s under their schema: %v", name, err)
		}
	}
	crdName := framework.KindSecret.ShareResource() + "." + theirs
	crd, err := e.Dyn.Resource(framework.CrdGVR).Get(ctx, crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ourVersions, _, _ := unstructured.NestedSlice(ourCRD(t, framework.KindSecret, theirs).Object, "spec", "versions")
	if err := unstructured.SetNestedSlice(crd.Object, ourVersions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Dyn.Resource(framework.CrdGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("replacing their schema with ours: %v", err)
	}
	framework.Eventually(t, 60*time.Second, func() error {
		_, err := r.Create(ctx, shareIn(theirs, framework.KindSecret, "osh-case", refSpec(framework.KindSecret, "", "ca-bundle")), dryRun)
		if !apierrors.IsInvalid(err) {
			return fmt.Errorf("the API server does not validate with our schema yet (%v)", err)
		}
		return nil
	})
	for name := range stored {
		if _, err := r.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s is no longer served under our schema: %v", name, err)
		}
	}
	for _, c := range []struct {
		name     string
		cond     map[string]any
		labelled bool // a share without spec cannot be: "required" is checked at the top, which a label changes
	}{
		{"stored-valid", condition("Ready", "True", "SourceAvailable"), true},
		{"stored-empty-namespace", condition("Ready", "False", "InvalidShare"), true},
		{"stored-no-spec", condition("Ready", "False", "InvalidShare"), false},
	} {
		u, err := r.Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.labelled {
			u.SetLabels(map[string]string{"reviewed": "true"})
			if u, err = r.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				t.Errorf("labelling %s under our schema: %v", c.name, err)
				continue
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, []any{c.cond}, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Errorf("writing the status of %s under our schema: %v", c.name, err)
		}
	}
	if err := r.Delete(ctx, "stored-no-spec", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting stored-no-spec under our schema: %v", err)
	}
}

// conditionsOfTypes is n conditions, Ready and n-1 of other types.
func conditionsOfTypes(n int) []any {
	out := []any{condition("Ready", "True", "SourceAvailable")}
	for i := 1; i < n; i++ {
		out = append(out, condition(fmt.Sprintf("Example%d", i), "False", "AsExpected"))
	}
	return out
}
