package main

// Specification of how the relist judges one share of a volume (judgeShare, reconcile.go), with a
// fake API server: access decides whether the share is shown; the driver's own read on the source
// decides whether it is refreshed. Losing read is never a revocation, is told once, and is told
// again, truthfully, when access comes back to a revoked share the driver still may not read.

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// judgeWorld is a fake API server with one SharedSecret "ca" over Secret p/ca, whose answers the
// test switches: may the pod use the share, may the driver read the source.
type judgeWorld struct {
	d           *driver
	mayUse      bool
	mayReadFile bool
}

func newJudgeWorld(t *testing.T) *judgeWorld {
	w := &judgeWorld{mayUse: true, mayReadFile: true}
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "ca", ResourceVersion: "7"},
		Data: map[string][]byte{"ca.crt": []byte("CA")}})
	client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: w.mayUse}}, nil
	})
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !w.mayReadFile {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "ca", nil)
		}
		return false, nil, nil
	})
	w.d = newTestDriver(t, client.AuthorizationV1().SubjectAccessReviews(), fakeSources{client})
	addSecretShare(t, w.d, "ca", "p", "ca")
	return w
}

func TestJudgeShareThroughAccessAndReadChanges(t *testing.T) {
	w := newJudgeWorld(t)
	rec := volumeRecord{VolumeID: "v", PodNamespace: "team", ServiceAccount: "app", Refresh: true, GID: -1,
		Shares: []shareState{{shareRef: shareRef{Kind: kindSecret, Name: "ca"}, SourceNamespace: "p", SourceName: "ca", ResourceVersion: "7"}}}
	for _, step := range []struct {
		name            string
		mayUse, mayRead bool
		change          changeKind // "" for none
		msg             string
		revoked, forbid bool
		files           bool // a new copy to write
	}{
		{"granted and readable, unchanged", true, true, "", "", false, false, false},
		{"the driver loses read", true, false, "refreshFailed", "keeps its last files and is not refreshed", false, true, false},
		{"told once", true, false, "", "", false, true, false},
		{"the pod loses use: revoked", false, false, "revoked", "", true, false, false},
		{"use back, read still not", true, false, "refreshFailed", "may be used again, but its files stay away", true, true, false},
		{"read back: restored", true, true, "restored", "", false, false, true},
		{"read lost again, then back with nothing new", true, false, "refreshFailed", "keeps its last files", false, true, false},
		{"resumed", true, true, "refreshResumed", "", false, false, false},
	} {
		w.mayUse, w.mayReadFile = step.mayUse, step.mayRead
		v := w.d.judgeShare(context.Background(), rec, 0, w.d.newCycleMemo())
		if v.err != nil {
			t.Fatalf("%s: %v", step.name, v.err)
		}
		got := changeKind("")
		if v.change != nil {
			got = v.change.kind
			if !strings.Contains(v.change.why, step.msg) {
				t.Errorf("%s: %s says %q, want %q", step.name, got, v.change.why, step.msg)
			}
			if got == changeRefreshFailed && !strings.Contains(v.change.why, "kubectl create rolebinding") {
				t.Errorf("%s: %q does not say what to run", step.name, v.change.why)
			}
		}
		if got != step.change || v.state.Revoked != step.revoked || v.state.ReadForbidden != step.forbid || (v.files != nil) != step.files {
			t.Fatalf("%s: change %q revoked %v forbidden %v files %v; want %q %v %v %v", step.name, got,
				v.state.Revoked, v.state.ReadForbidden, v.files != nil, step.change, step.revoked, step.forbid, step.files)
		}
		rec.Shares[0] = v.state // what reconcile saves
	}
}
