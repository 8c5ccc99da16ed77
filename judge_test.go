package main

// Specification of how the relist judges one share of a volume (judgeShare, judge.go), with a
// fake API server: access decides whether the share is shown; the driver's own read on the source
// decides whether it is refreshed. Losing read is never a revocation, is told once, and is told
// again, truthfully, when access comes back to a revoked share the driver still may not read.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
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
	rec := volume.Record{VolumeID: "v", PodNamespace: "team", ServiceAccount: "app", Refresh: true, GID: -1,
		Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "ca"}, SourceNamespace: "p", SourceName: "ca", ResourceVersion: "7"}}}
	for _, step := range []struct {
		name            string
		mayUse, mayRead bool
		change          changeKind // "" for none
		msg             string
		state           volume.Told
		files           bool // a new copy to write
	}{
		{"granted and readable, unchanged", true, true, "", "", volume.ToldCurrent, false},
		{"the driver loses read", true, false, "refreshFailed", "keeps its last files and is not refreshed", volume.ToldReadForbidden, false},
		{"told once", true, false, "", "", volume.ToldReadForbidden, false},
		{"the pod loses use: revoked", false, false, "revoked", "", volume.ToldRevoked, false},
		{"use back, read still not", true, false, "refreshFailed", "may be used again, but its files stay away", volume.ToldRegrantedReadForbidden, false},
		{"read back: restored", true, true, "restored", "", volume.ToldCurrent, true},
		{"read lost again, then back with nothing new", true, false, "refreshFailed", "keeps its last files", volume.ToldReadForbidden, false},
		{"resumed", true, true, "refreshResumed", "", volume.ToldCurrent, false},
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
		if got != step.change || v.state.Told != step.state || (v.files != nil) != step.files {
			t.Fatalf("%s: change %q state %q files %v; want %q %q %v", step.name, got,
				v.state.Told, v.files != nil, step.change, step.state, step.files)
		}
		rec.Shares[0] = v.state // what reconcile saves
	}
}

// A share's list of keys changing under a live volume (reconcile.go's keysChanged): a refreshing
// volume is refreshed through the new list, gaining and losing keys in one copy; a volume that
// does not refresh, or whose source cannot be shown through the new list, keeps only the files
// the list still shares; a listed key the source lacks leaves a volume whose list did not change
// as it was. No change's message names a key the share does not expose.
func TestJudgeShareFollowsTheSharesListOfKeys(t *testing.T) {
	w := newJudgeWorld(t)
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "tls", ResourceVersion: "9"},
		Data: map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("LEAF"), "tls.key": []byte("PRIVATE")}})
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !w.mayReadFile {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "tls", nil)
		}
		return false, nil, nil
	})
	w.d.sources, _ = newSourceCache(fakeSources{client}, 10, 1<<20, time.Minute)
	w.d.store = volume.NewStore(t.TempDir(), w.d.budget)
	setList := func(items ...map[string]any) {
		spec := map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "tls"}}
		if items != nil {
			spec["items"] = list(items...)
		}
		if err := w.d.shares.Informer(share.KindSecret).GetStore().Update(&unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "ca"}, "spec": spec}}); err != nil {
			t.Fatal(err)
		}
	}
	newRec := func(refresh bool, held map[string]string) volume.Record {
		rec := volume.Record{VolumeID: "v" + fmt.Sprint(refresh), PodNamespace: "team", ServiceAccount: "app", Refresh: refresh, GID: -1, DefaultMode: 0o644,
			Shares: []volume.ShareState{{Ref: share.Ref{Kind: share.KindSecret, Name: "ca"}, SourceNamespace: "p", SourceName: "tls", ResourceVersion: "9",
				Exposed: share.Exposure{{Key: "ca.crt", Path: "ca.crt"}}}}}
		files := map[string]atomicwriter.File{}
		for k, v := range held {
			files[k] = atomicwriter.File{Data: []byte(v), Mode: 0o644}
		}
		if err := w.d.store.DirOf(rec).WriteCopy(0, files); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	judge := func(rec volume.Record) shareVerdict {
		return w.d.judgeShare(context.Background(), rec, 0, w.d.newCycleMemo())
	}
	expect := func(step string, v shareVerdict, change changeKind, files []string) {
		t.Helper()
		if v.err != nil {
			t.Fatalf("%s: %v", step, v.err)
		}
		got := changeKind("")
		if v.change != nil {
			got = v.change.kind
			if strings.Contains(v.change.why, "tls.key") {
				t.Errorf("%s: the event %q names the unshared key", step, v.change.why)
			}
		}
		if got != change || !slices.Equal(slices.Sorted(maps.Keys(v.files)), files) || (files == nil) != (v.files == nil) {
			t.Fatalf("%s: change %q files %v; want %q %v", step, got, slices.Sorted(maps.Keys(v.files)), change, files)
		}
		for _, f := range v.files {
			if string(f.Data) == "PRIVATE" {
				t.Fatalf("%s: the unshared key's bytes are in the new copy", step)
			}
		}
	}

	// A refreshing volume showing ca.crt.
	rec := newRec(true, map[string]string{"ca.crt": "CA"})
	setList(entry("ca.crt"))
	expect("list as the volume shows it", judge(rec), "", nil)
	setList(entry("ca.crt"), entry("tls.crt"))
	v := judge(rec)
	expect("widened", v, changeKeys, []string{"ca.crt", "tls.crt"})
	if !strings.Contains(v.change.why, `it shares only "ca.crt", "tls.crt"`) || !slices.Equal(v.state.Exposed, share.Exposure{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}}) {
		t.Errorf("widened: %q, state %+v", v.change.why, v.state)
	}
	rec.Shares[0] = v.state
	setList(entry("ca.crt"))
	v = judge(rec)
	expect("narrowed back", v, changeKeys, []string{"ca.crt"})
	rec.Shares[0] = v.state

	// The list names a key the source lacks: with the list unchanged and the source changed,
	// the volume stays as it was and the error says which key; a change to such a list still drops what is no longer
	// shared.
	setList(entry("ca.crt"), entry("absent"))
	rec2 := rec.Clone()
	rec2.Shares[0].Exposed = share.Exposure{{Key: "ca.crt", Path: "ca.crt"}, {Key: "absent", Path: "absent"}}
	expect("nothing changed", judge(rec2), "", nil)
	rec2.Shares[0].ResourceVersion = "8" // the source changed since
	if v := judge(rec2); v.err == nil || !strings.Contains(v.err.Error(), `has no key "absent", which SharedSecret "ca" lists in spec.items`) {
		t.Errorf("listed key missing: %+v", v)
	}
	rec3 := newRec(true, map[string]string{"ca.crt": "CA", "tls.crt": "LEAF"})
	rec3.Shares[0].Exposed = share.Exposure{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}}
	v = judge(rec3)
	expect("narrowed to a list the source cannot fill", v, changeKeys, []string{"ca.crt"})

	// The driver may not read the source just as the list narrows: the pod is told about the
	// read, and the copy still loses what is no longer shared.
	w.mayReadFile = false
	setList(entry("ca.crt"))
	rec4 := newRec(true, map[string]string{"ca.crt": "CA", "tls.crt": "LEAF"})
	rec4.Shares[0].Exposed = share.Exposure{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}}
	expect("narrowed while the source is unreadable", judge(rec4), changeRefreshFailed, []string{"ca.crt"})
	w.mayReadFile = true

	// A volume that does not refresh loses what is no longer shared and gains nothing.
	setList(entry("ca.crt"), entry("tls.crt"))
	norefresh := newRec(false, map[string]string{"ca.crt": "CA"})
	v = judge(norefresh)
	expect("widened, refreshResource=false", v, "", nil)
	if !slices.Equal(v.state.Exposed, share.Exposure{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}}) {
		t.Errorf("the record does not note the new list: %+v", v.state)
	}
	setList(entry("tls.crt"))
	expect("narrowed, refreshResource=false", judge(norefresh), changeKeys, []string{})
}
