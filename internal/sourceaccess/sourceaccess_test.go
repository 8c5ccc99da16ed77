package sourceaccess

// Specification of the command the driver tells an admin to run when it may not read a source
// (sourceaccess.go): it names the namespace, the source-reader ClusterRole and the driver's
// service account (--service-account), and the narrower alternative names the object. What the
// driver does when refused, against the real API server, is in test/e2e/api/sourceaccess_test.go.

import (
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/share"
)

// The fix an admin is told to run names the namespace, the ClusterRole and the driver's account,
// and the narrower alternative names the object.
func TestGrantReadHintNamesTheCommandToRun(t *testing.T) {
	a, err := ParseDriverAccount("csi-sharedresource:shared-resource-csi-driver")
	if err != nil {
		t.Fatal(err)
	}
	hint := a.GrantReadHint(share.SourceKey{Kind: share.KindConfigMap, Namespace: "app-config", Name: "flags"})
	for _, want := range []string{
		"kubectl create rolebinding shared-resource-csi-source-reader --namespace=app-config --clusterrole=shared-resource-csi-source-reader --serviceaccount=csi-sharedresource:shared-resource-csi-driver",
		"every Secret and ConfigMap of namespace app-config",
		"kubectl create role shared-resource-csi-read-flags --namespace=app-config --verb=get --resource=configmaps --resource-name=flags && kubectl create rolebinding shared-resource-csi-read-flags --namespace=app-config --role=shared-resource-csi-read-flags --serviceaccount=csi-sharedresource:shared-resource-csi-driver",
	} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q does not contain %q", hint, want)
		}
	}
	if h := DriverAccount("").GrantReadHint(share.SourceKey{Kind: share.KindSecret, Namespace: "n", Name: "s"}); !strings.Contains(h, "--serviceaccount=<driver namespace>:<driver service account>") {
		t.Errorf("an unknown account is not shown as a placeholder: %q", h)
	}
	// The node plugin's and the status controller's accounts: one grant serves both, since the
	// status controller checks the same sources under its own identity.
	both, err := ParseDriverAccount("csi-sharedresource:shared-resource-csi-driver,csi-sharedresource:shared-resource-csi-status")
	if err != nil {
		t.Fatal(err)
	}
	hint = both.GrantReadHint(share.SourceKey{Kind: share.KindSecret, Namespace: "platform", Name: "ca"})
	for _, want := range []string{
		"service accounts csi-sharedresource:shared-resource-csi-driver, csi-sharedresource:shared-resource-csi-status",
		"kubectl create rolebinding shared-resource-csi-source-reader --namespace=platform --clusterrole=shared-resource-csi-source-reader --serviceaccount=csi-sharedresource:shared-resource-csi-driver --serviceaccount=csi-sharedresource:shared-resource-csi-status)",
		"--role=shared-resource-csi-read-ca --serviceaccount=csi-sharedresource:shared-resource-csi-driver --serviceaccount=csi-sharedresource:shared-resource-csi-status (or",
	} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q does not contain %q", hint, want)
		}
	}
	for _, bad := range []string{"noseparator", "ns:", ":name", "NS:name", "ns:name:extra", "ns:a,", "ns:a,,ns:b", "ns:a,b"} {
		if _, err := ParseDriverAccount(bad); err == nil {
			t.Errorf("--service-account %q accepted", bad)
		}
	}
}
