package main

// What the admin's commands (internal/admin) take from the node plugin: its own reading of a
// volume's attributes, a share object, a share's conditions and the driver's service accounts,
// so that diagnose and who-uses judge what the driver judges, from the same code.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shared-resource/csi-driver/internal/admin"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/shareapi"
	"github.com/shared-resource/csi-driver/internal/sourceaccess"
)

// adminDriver is the node plugin's functions, as internal/admin takes them.
func adminDriver() admin.Driver {
	return admin.Driver{
		Version: version,
		ShareAttributes: func(attrs map[string]string) ([]shareapi.Ref, error) {
			refs, err := parseShareAttributes(attrs)
			return apiRefs(refs), err
		},
		Refreshes: func(attrs map[string]string) (bool, error) {
			v := volumeRequest{Refresh: true} // as a publish reads them (attributes.go)
			err := parseVolumeAttributes(attrs, &v)
			return v.Refresh, err
		},
		Share: func(k shareapi.Kind, u *unstructured.Unstructured) (admin.Share, error) {
			sh, err := share.FromObject(share.Kind(k), u)
			return admin.Share{Name: sh.Name, Source: apiSourceKey(sh.SourceKey()), PinUID: sh.Pin.UID, RefusesSource: sh.Pin.Refuses}, err
		},
		Conditions: func(u *unstructured.Unstructured) ([]metav1.Condition, error) { return share.Conditions(u) },
		CheckAccounts: func(accounts string) error {
			_, err := sourceaccess.ParseDriverAccount(accounts)
			return err
		},
		GrantReadHint: func(accounts string, key shareapi.SourceKey) string {
			return sourceaccess.DriverAccount(accounts).GrantReadHint(share.SourceKey{Kind: share.Kind(key.Kind), Namespace: key.Namespace, Name: key.Name})
		},
	}
}

func apiRefs(refs []share.Ref) []shareapi.Ref {
	if refs == nil {
		return nil
	}
	out := make([]shareapi.Ref, len(refs))
	for i, r := range refs {
		out[i] = shareapi.Ref{Kind: shareapi.Kind(r.Kind), Name: r.Name}
	}
	return out
}

func apiSourceKey(k share.SourceKey) shareapi.SourceKey {
	return shareapi.SourceKey{Kind: shareapi.Kind(k.Kind), Namespace: k.Namespace, Name: k.Name}
}
