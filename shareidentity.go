package main

// A volume belongs to the share object it was published from, the way a share belongs to its
// source (internal/share/pin.go). A share is known to pods by its name only, and RBAC grants "use" by name;
// but a name is not an object. Whoever may delete and create shares (or only create them, when
// the name's share is gone and RoleBindings still grant "use" on it, or grant it ahead of time;
// RBAC cannot scope create by name) could otherwise delete "ca-bundle" and create it again over a
// Secret of their own, and every running consumer would be "restored" with their data by the
// informer's add event. So the record keeps the share's metadata.uid (and its source's) from the
// publish, and a share under the same name with another UID does not feed the volume:
//
//   - the new object shares the very source object the volume was made from (same source UID:
//     the share was re-created as it was, by a Helm reinstall, a GitOps prune, an admin's
//     delete-and-apply), and no key of it the volume's did not, each under the name the volume's
//     gave it (its spec.items the same or narrower): nothing was taken over, the volume adopts the
//     new UID and goes on (restored when the deletion had revoked it);
//   - any other object (one that lists more keys of the same source, too: it would hand running
//     pods keys they were never given; or one that renames keys between themselves, "ca.crt"
//     then holding the bytes of "tls.key": a re-creation as it was never renames, and a pod
//     must not find its files meaning something else without anyone's act on its side): the
//     share stays revoked in the volume (its files, if a missed delete
//     left them, leave it), and the pod gets one Warning event, SharedResourceReplaced, saying
//     which objects these are and what accepts the new one: re-creating the pod. A new pod is
//     a new publish, which uses the share as it is now after the pod's own review, as any pod
//     started after the change would. An admin who deleted the share by mistake re-creates it
//     over the same source instead, and the running volumes resume (the rule above).
//
// Acceptance is deliberately not a field on the share (an annotation "replaces-uid", say): the
// tenant who re-created the share could write it in the same request. Re-creating the pod is
// the consumer's own act, in the consumer's namespace, and needs no new permission or field.
//
// Records written before volumes knew their share's UID adopt the share they find at their next
// reconcile, and the source's UID at their next read of it (a volume that does not refresh never
// reads it again: a re-created share then needs the pod re-created, whatever its source).

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/shareapi"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// reasonShareReplaced is the event on a pod whose volume's share was replaced by another object.
const reasonShareReplaced = shareapi.ReasonShareReplaced

// shareIdentity says whether sh, the share named as share i of rec is now, is the object the
// volume was published from (or one that may stand in for it: same source object, exposing no
// key the volume's did not, each under the same name). Once the UIDs differ, the volume's object is known gone: an
// answer, not an outage. So a source that cannot be read (not found, forbidden, any API error)
// does not keep the volume as it was: the new object is not the volume's until its source is
// read and proves to be the volume's own (adopted then, restoring the volume).
func shareIdentity(ctx context.Context, st volume.ShareState, sh share.Spec, memo *cycleMemo) bool {
	switch {
	case st.ShareUID == "" || sh.UID == "" || sh.UID == st.ShareUID:
		return true
	case st.SourceUID == "" || !sh.Exposed.Within(st.Exposed):
		return false
	}
	src, err := memo.source(ctx, sh)
	if err != nil {
		klog.V(2).InfoS("The share was replaced and its new source cannot be read; it does not feed the volume", "share", st.String(),
			"source", klog.KRef(sh.SourceNamespace, sh.SourceName), "err", err)
		return false
	}
	return src.UID == st.SourceUID
}

// replacedShareMessage says which objects these are and what an admin does about it.
func replacedShareMessage(rec volume.Record, st volume.ShareState, sh share.Spec) string {
	return fmt.Sprintf("%s %q was deleted and created again (UID %s, sharing %s); this volume was published from UID %s, sharing %s %s/%s: "+
		"the new object does not feed this running pod, which shows none of its files. If the new object is the one to use, re-create the pod "+
		"(its controller starts a new one, published from the share as it is now): kubectl delete pod --namespace=%s %s. "+
		"If the share was deleted by mistake, create it again over %s %s/%s: running volumes then resume",
		st.Kind.TypeName(), st.Name, sh.UID, sh.SourceKey(), st.ShareUID, st.Kind, st.SourceNamespace, st.SourceName,
		rec.PodNamespace, rec.PodName, st.Kind, st.SourceNamespace, st.SourceName)
}
