package sourceaccess

// What the driver may read, and what an admin runs when it may not.
//
// The driver holds no read on Secrets or ConfigMaps of its own (deploy.yaml grants none): an admin
// grants it, per source namespace, by binding the ClusterRole sourceReaderRole to the driver's
// service account with a RoleBinding there, or, narrower still, with a Role limited by
// resourceNames to the one object. So a node's driver can read only what some admin chose to
// share, and taking a node exposes those sources, not every Secret in the cluster.
//
// Every message about a source the driver may not read (a pod's FailedMount event, a share's
// Ready condition, the Warning event on a pod whose volume can no longer be refreshed) ends in
// the command that fixes it, built here, so they never disagree.

import (
	"fmt"
	"strings"

	"github.com/shared-resource/csi-driver/internal/share"
)

// sourceReaderRole is deploy.yaml's ClusterRole granting get on secrets and configmaps; bound in
// a namespace, it lets the driver read that namespace's sources.
const sourceReaderRole = "shared-resource-csi-source-reader"

// DriverAccount names the service accounts that read sources, as kubectl's --serviceaccount
// takes each (NAMESPACE:NAME), comma-separated: the node plugin's, and the status controller's
// (--role=status checks the same sources for the shares' Ready condition, under an identity of
// its own), so the commands that grant read name both and one grant serves both. It only names
// them in messages; empty when unknown.
type DriverAccount string

// ParseDriverAccount checks a --service-account value: empty, or NAMESPACE:NAME[,NAMESPACE:NAME...].
func ParseDriverAccount(s string) (DriverAccount, error) {
	if s == "" {
		return "", nil
	}
	for _, one := range strings.Split(s, ",") {
		ns, name, ok := strings.Cut(one, ":")
		if !ok || !share.ValidLabel(ns) || !share.ValidName(name) {
			return "", fmt.Errorf("--service-account %q must be NAMESPACE:NAME, or several separated by commas: the driver's service accounts (node plugin, status controller)", s)
		}
	}
	return DriverAccount(s), nil
}

func (a DriverAccount) String() string {
	if a == "" {
		return "<driver namespace>:<driver service account>"
	}
	return strings.ReplaceAll(string(a), ",", ", ")
}

// serviceAccountFlags is kubectl's --serviceaccount for each account.
func (a DriverAccount) serviceAccountFlags() string {
	if a == "" {
		return "--serviceaccount=" + a.String()
	}
	accounts := strings.Split(string(a), ",")
	for i := range accounts {
		accounts[i] = "--serviceaccount=" + accounts[i]
	}
	return strings.Join(accounts, " ")
}

// GrantReadHint says what to run so that the driver may read key: first the narrowest grant, a
// Role for this one object (the least a node's driver can hold; right for a system namespace),
// then the namespace-wide RoleBinding to sourceReaderRole, which exposes every Secret and
// ConfigMap of the namespace to every node's driver.
func (a DriverAccount) GrantReadHint(key share.SourceKey) string {
	resource := share.SourceGVR(key.Kind).Resource
	role := "shared-resource-csi-read-" + key.Name
	accounts := "service account " + a.String()
	if strings.Contains(string(a), ",") {
		accounts = "service accounts " + a.String()
	}
	return fmt.Sprintf("to let the driver (%s) read this object only, run: "+
		"kubectl create role %s --namespace=%s --verb=get --resource=%s --resource-name=%s && "+
		"kubectl create rolebinding %s --namespace=%s --role=%s %s "+
		"(or, to let it read every %s of namespace %s: "+
		"kubectl create rolebinding %s --namespace=%s --clusterrole=%s %s)",
		accounts, role, key.Namespace, resource, key.Name, role, key.Namespace, role, a.serviceAccountFlags(),
		share.SourceKindsText(), key.Namespace, sourceReaderRole, key.Namespace, sourceReaderRole, a.serviceAccountFlags())
}
