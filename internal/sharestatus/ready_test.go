package sharestatus

// Specification of the Ready condition a share carries (ready.go; the check behind it, writer.go),
// as an admin reads it: its status, reason and message for each answer the API server can give
// about the source, and for a share whose ref cannot be used. Pure: no API server is asked. Who
// writes the condition, and `kubectl get`'s Ready column, are specified against the real API
// server in test/e2e/api/status_test.go.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/shareapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The condition for each answer the API server can give about the source, as an admin reads it.
func TestReadyConditionFromSourceCheck(t *testing.T) {
	sh := share.Spec{Kind: share.KindSecret, Name: "corp-ca", SourceNamespace: "platform", SourceName: "ca-bundle", Pin: share.Pin{UID: "uid-1"}}
	gr := schema.GroupResource{Resource: "secrets"}
	for _, tc := range []struct {
		name   string
		uid    string
		err    error
		status metav1.ConditionStatus
		reason string
		msg    []string
	}{
		{"readable", "uid-1", nil, metav1.ConditionTrue, reasonSourceAvailable, []string{"Secret platform/ca-bundle"}},
		{"re-created", "uid-2", nil, metav1.ConditionFalse, reasonSourceReplaced, []string{"Secret platform/ca-bundle was deleted and created again (UID uid-2",
			"made for UID uid-1", `kubectl patch sharedsecrets corp-ca --subresource=status --type=merge -p '{"status":{"sourceUID":"uid-2"}}'`,
			"spec.sourceRecreation: Follow"}},
		{"missing", "", apierrors.NewNotFound(gr, "ca-bundle"), metav1.ConditionFalse, reasonSourceNotFound,
			[]string{"Secret platform/ca-bundle does not exist", `SharedSecret "corp-ca"`, "spec.secretRef"}},
		{"forbidden", "", apierrors.NewForbidden(gr, "ca-bundle", errors.New(`User "x" cannot get resource "secrets"`)), metav1.ConditionFalse, reasonSourceForbidden,
			[]string{"Secret platform/ca-bundle", `pods cannot mount SharedSecret "corp-ca"`, "keep their last data",
				"kubectl create rolebinding shared-resource-csi-source-reader --namespace=platform --clusterrole=shared-resource-csi-source-reader --serviceaccount=csi-sharedresource:shared-resource-csi-driver",
				"--resource-name=ca-bundle"}},
		{"server error", "", apierrors.NewServiceUnavailable("etcd down"), metav1.ConditionUnknown, reasonSourceCheckFailed,
			[]string{"Secret platform/ca-bundle", "etcd down"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readyCondition(sh, tc.uid, tc.err, "csi-sharedresource:shared-resource-csi-driver")
			if c.Type != conditionReady || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("got %s=%s/%s, want Ready=%s/%s", c.Type, c.Status, c.Reason, tc.status, tc.reason)
			}
			for _, m := range tc.msg {
				if !strings.Contains(c.Message, m) {
					t.Errorf("message %q does not mention %q", c.Message, m)
				}
			}
		})
	}
	cm := readyCondition(share.Spec{Kind: share.KindConfigMap, Name: "cfg", SourceNamespace: "ns", SourceName: "n"}, "", apierrors.NewNotFound(gr, "n"), "")
	if follow := readyCondition(share.Spec{Kind: share.KindSecret, Name: "f", SourceNamespace: "ns", SourceName: "n", Pin: share.Pin{UID: "uid-1", Follow: true}}, "uid-2", nil, ""); follow.Reason != reasonSourceAvailable {
		t.Errorf("a share that follows re-creations: %s, want %s", follow.Reason, reasonSourceAvailable)
	}
	if !strings.Contains(cm.Message, "ConfigMap ns/n") || !strings.Contains(cm.Message, "spec.configMapRef") {
		t.Errorf("ConfigMap message %q", cm.Message)
	}
}

// A share whose ref cannot be used is not Ready, and the check does not even reach the API
// server (the writer's metadata client is nil here).
func TestReadyConditionOfInvalidShare(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "broken", "generation": int64(3)},
		"spec":     map[string]any{"secretRef": map[string]any{"name": "x"}},
	}}
	c, _, _ := (&statusWriter{}).checkSource(context.Background(), share.KindSecret, u)
	if c.Status != metav1.ConditionFalse || c.Reason != reasonInvalidShare || c.ObservedGeneration != 3 || !strings.Contains(c.Message, "spec.secretRef") {
		t.Errorf("got %+v", c)
	}
}

// A share with a list: Ready says what it exposes, and a listed key the source lacks makes it
// not Ready, naming that key.
func TestReadyConditionOfAShareWithAList(t *testing.T) {
	sh := share.Spec{Kind: share.KindSecret, Name: "corp-ca", SourceNamespace: "platform", SourceName: "tls", Exposed: share.Exposure{{Key: "ca.crt", Path: "ca.pem"}, {Key: "tls.crt", Path: "tls.crt"}}}
	c := readyCondition(sh, "", nil, "")
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, `the share exposes only "ca.pem", "tls.crt"`) {
		t.Errorf("readable: %+v", c)
	}
	if c := readyCondition(share.Spec{Kind: share.KindSecret, Name: "all", SourceNamespace: "p", SourceName: "s"}, "", nil, ""); !strings.Contains(c.Message, "the share exposes every key") {
		t.Errorf("no list: %q", c.Message)
	}
	c = readyCondition(sh, "", &share.MissingSharedKeysError{Share: sh, Keys: []string{"tls.crt"}}, "")
	if c.Status != metav1.ConditionFalse || c.Reason != reasonSourceKeyMissing ||
		!strings.Contains(c.Message, `Secret platform/tls has no key "tls.crt", which SharedSecret "corp-ca" lists in spec.items`) ||
		!strings.Contains(c.Message, `pods cannot mount SharedSecret "corp-ca"`) {
		t.Errorf("missing key: %+v", c)
	}
}

// The first pin takes only the share's first object: one not created after the share, or one
// found after the status said no source existed for the share's spec. Another object created
// after the share is not pinned: Ready is False, SourceReplaced, with the command that accepts it.
// A share that has a pin, or follows, is judged by the pin as before.
func TestFirstPinTakesOnlyTheSharesFirstObject(t *testing.T) {
	made := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	sh := share.Spec{Kind: share.KindSecret, Name: "corp-ca", SourceNamespace: "platform", SourceName: "ca-bundle"}
	for _, tc := range []struct {
		name        string
		pin         share.Pin
		sawNoSource bool
		created     time.Time
		refused     bool
	}{
		{"older than the share", share.Pin{}, false, made.Add(-time.Hour), false},
		{"created with the share, in the same second", share.Pin{}, false, made, false},
		{"newer than the share", share.Pin{}, false, made.Add(time.Minute), true},
		{"newer, after the status said no source existed", share.Pin{}, true, made.Add(time.Minute), false},
		{"newer, the share follows", share.Pin{Follow: true}, false, made.Add(time.Minute), false},
		{"newer, the share is pinned to it", share.Pin{UID: "uid-2"}, false, made.Add(time.Minute), false},
	} {
		sh := sh
		sh.Pin = tc.pin
		err := share.FirstPinRefusal(sh, made, tc.sawNoSource, "uid-2", tc.created)
		if (err != nil) != tc.refused {
			t.Errorf("%s: refusal %v, want refused %v", tc.name, err, tc.refused)
			continue
		}
		c := readyCondition(sh, "uid-2", err, "")
		if tc.refused && (c.Status != metav1.ConditionFalse || c.Reason != reasonSourceReplaced ||
			!strings.Contains(c.Message, `kubectl patch sharedsecrets corp-ca --subresource=status --type=merge -p '{"status":{"sourceUID":"uid-2"}}'`)) {
			t.Errorf("%s: %+v, want False, SourceReplaced, with the command that accepts the object", tc.name, c)
		}
		if !tc.refused && c.Status != metav1.ConditionTrue {
			t.Errorf("%s: %+v, want True", tc.name, c)
		}
	}
}

// The status says no source existed for the first pin only while no object was ever read for the
// share: a SourceNotFound of an earlier spec counts (a ref that named nothing, corrected), one
// after an object was read (SourceObserved, of any generation) does not.
func TestSawNoSourceOnlyWhileNoObjectWasEverRead(t *testing.T) {
	share := func(generation, observed int64, reason string, observedObject bool) *unstructured.Unstructured {
		conds := []any{map[string]any{
			"type": conditionReady, "status": "False", "reason": reason, "message": "m",
			"observedGeneration": observed, "lastTransitionTime": "2026-11-01T12:00:00Z"}}
		if observedObject {
			conds = append(conds, map[string]any{"type": conditionSourceObserved, "status": "True", "reason": reasonObjectRead,
				"message": "m", "observedGeneration": int64(1), "lastTransitionTime": "2026-11-01T12:00:00Z"})
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "s", "generation": generation},
			"status":   map[string]any{"conditions": conds},
		}}
	}
	if !sawNoSource(share(2, 2, reasonSourceNotFound, false)) {
		t.Error("SourceNotFound for the current spec: not seen")
	}
	if !sawNoSource(share(3, 2, reasonSourceNotFound, false)) {
		t.Error("SourceNotFound for an earlier spec, no object ever read: not seen")
	}
	if sawNoSource(share(2, 2, reasonSourceNotFound, true)) {
		t.Error("SourceNotFound after an object was read for an earlier spec: seen")
	}
	if sawNoSource(share(2, 2, reasonSourceForbidden, false)) {
		t.Error("SourceForbidden: seen as no source")
	}
}

// A share listing 256 keys of 253 bytes makes a Ready message that names them all, some 66 KB:
// over the schema's 32768 bytes, the API server would refuse the status whole (and the pin with
// it). The message is cut to fit, on a character's boundary, saying so.
func TestReadyMessageFitsTheSchema(t *testing.T) {
	sh := share.Spec{Kind: share.KindSecret, Name: "many", SourceNamespace: "p", SourceName: "s"}
	for i := range share.MaxItems {
		name := fmt.Sprintf("%03d", i) + strings.Repeat("é", 125) // 253 bytes, two-byte characters
		sh.Exposed = append(sh.Exposed, share.ExposedKey{Key: name, Path: name})
	}
	c := readyCondition(sh, "", nil, "")
	if len(c.Message) > maxConditionMessage || !utf8.ValidString(c.Message) || !strings.Contains(c.Message, "cut: the message was") {
		t.Errorf("Ready message of %d bytes (valid UTF-8: %v), want at most %d, cut on a character's boundary and saying so: ...%s",
			len(c.Message), utf8.ValidString(c.Message), maxConditionMessage, c.Message[max(0, len(c.Message)-120):])
	}
	if short := readyCondition(share.Spec{Kind: share.KindSecret, Name: "few", SourceNamespace: "p", SourceName: "s", Exposed: share.Exposure{{Key: "a", Path: "a"}}}, "", nil, ""); strings.Contains(short.Message, "cut:") {
		t.Errorf("a short message was cut: %q", short.Message)
	}
}

// sourceAt answers every GET with one source object, created at a given time.
func sourceAt(d share.SourceData) SourceGetter {
	return func(context.Context, share.SourceKey, metav1.GetOptions) (*share.SourceData, error) {
		d := d
		return &d, nil
	}
}

// A share with a list whose re-created source lacks a listed key: the first pin does not take it
// either (pinned now, it would feed running volumes once the key is added). The check reports
// it replaced, and gives no UID to pin.
func TestFirstPinRefusesANewerSourceMissingAKey(t *testing.T) {
	made := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "corp-ca", "generation": int64(1), "creationTimestamp": made.Format(time.RFC3339)},
		"spec": map[string]any{"secretRef": map[string]any{"namespace": "platform", "name": "ca-bundle"},
			"items": []any{map[string]any{"key": "ca.crt"}}},
	}}
	w := &statusWriter{cfg: Config{Sources: sourceAt(share.SourceData{UID: "uid-2", Created: made.Add(time.Hour), Files: map[string][]byte{"other": []byte("x")}})}}
	c, uid, _ := w.checkSource(context.Background(), share.KindSecret, u)
	if uid != "" || c.Reason != reasonSourceReplaced {
		t.Errorf("a newer source missing a key: pin %q, %+v; want no pin, SourceReplaced", uid, c)
	}
	// Not newer than the share: pinned, and reported missing its key.
	w.cfg.Sources = sourceAt(share.SourceData{UID: "uid-1", Created: made, Files: map[string][]byte{"other": []byte("x")}})
	if c, uid, _ := w.checkSource(context.Background(), share.KindSecret, u); uid != "uid-1" || c.Reason != reasonSourceKeyMissing {
		t.Errorf("the share's own source missing a key: pin %q, %+v; want uid-1, SourceKeyMissing", uid, c)
	}
}

// sourceGone answers every GET as the API server does for a source that does not exist.
func sourceGone(_ context.Context, k share.SourceKey, _ metav1.GetOptions) (*share.SourceData, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, k.Name)
}

// checkAndWrite runs one check of the share u by the status writer against src and returns the
// share with the status it writes, as the API server then stores it.
func checkAndWrite(t *testing.T, u *unstructured.Unstructured, src SourceGetter) (*unstructured.Unstructured, metav1.Condition, string) {
	t.Helper()
	w := &statusWriter{cfg: Config{Sources: src}}
	cond, uid, seen := w.checkSource(context.Background(), share.KindSecret, u)
	out, _, err := statusAfterCheck(share.KindSecret, u, cond, uid, seen)
	if err != nil {
		t.Fatal(err)
	}
	return out, cond, share.PinOf(out).UID
}

// "No source" counts for the first pin only when it is the first thing the status writer found
// for the share's spec. A share whose newer object was refused, and whose source was then
// deleted, does not take the next object created as its first: it stays SourceReplaced, without
// a pin, until an admin accepts it. A share made before its source still pins the first object.
func TestNoSourceAfterARefusalDoesNotReopenTheFirstPin(t *testing.T) {
	made := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	shareObject := func(status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "corp-ca", "generation": int64(1), "creationTimestamp": made.Format(time.RFC3339)},
			"spec": map[string]any{"secretRef": map[string]any{"namespace": "platform", "name": "ca-bundle"},
				"items": []any{map[string]any{"key": "ca.crt"}}},
		}}
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	source := func(uid string, created time.Time) SourceGetter {
		return sourceAt(share.SourceData{UID: uid, Created: created, Files: map[string][]byte{"ca.crt": []byte("CA")}})
	}

	u, c, pin := checkAndWrite(t, shareObject(nil), source("uid-2", made.Add(time.Hour)))
	if pin != "" || c.Reason != reasonSourceReplaced {
		t.Fatalf("a newer object: pin %q, %s; want no pin, SourceReplaced", pin, c.Reason)
	}
	u, c, _ = checkAndWrite(t, u, sourceGone)
	if c.Reason != reasonSourceNotFound {
		t.Fatalf("the source deleted: %s, want SourceNotFound", c.Reason)
	}
	if _, c, pin = checkAndWrite(t, u, source("uid-3", made.Add(2*time.Hour))); pin != "" || c.Reason != reasonSourceReplaced {
		t.Errorf("refused, then no source, then a new object: pin %q, %s; want no pin, SourceReplaced", pin, c.Reason)
	}

	// The same, with an edit of the share between (its description: a new generation, the ref
	// unchanged) while the source is gone: the edit does not make the next object the first.
	u, _, _ = checkAndWrite(t, shareObject(nil), source("uid-2", made.Add(time.Hour)))
	u, _, _ = checkAndWrite(t, u, sourceGone)
	u.SetGeneration(2)
	u, c, _ = checkAndWrite(t, u, sourceGone)
	if c.Reason != reasonSourceNotFound {
		t.Fatalf("edited, the source still gone: %s, want SourceNotFound", c.Reason)
	}
	if _, c, pin = checkAndWrite(t, u, source("uid-3", made.Add(2*time.Hour))); pin != "" || c.Reason != reasonSourceReplaced {
		t.Errorf("refused, no source, the share edited, then a new object: pin %q, %s; want no pin, SourceReplaced", pin, c.Reason)
	}

	// A status written before SourceObserved existed: its Ready condition says an object was read.
	old := shareObject(map[string]any{"conditions": []any{map[string]any{"type": conditionReady, "status": "False", "reason": reasonSourceReplaced,
		"message": "m", "observedGeneration": int64(1), "lastTransitionTime": made.Add(time.Hour).Format(time.RFC3339)}}})
	u, _, _ = checkAndWrite(t, old, sourceGone)
	if _, c, pin = checkAndWrite(t, u, source("uid-3", made.Add(2*time.Hour))); pin != "" || c.Reason != reasonSourceReplaced {
		t.Errorf("refused under an older driver, then no source, then a new object: pin %q, %s; want no pin, SourceReplaced", pin, c.Reason)
	}

	// Made before its source: the first check finds none, and the first object is pinned.
	u, _, _ = checkAndWrite(t, shareObject(nil), sourceGone)
	u, _, _ = checkAndWrite(t, u, sourceGone)
	if _, c, pin = checkAndWrite(t, u, source("uid-1", made.Add(time.Hour))); pin != "uid-1" || c.Reason != reasonSourceAvailable {
		t.Errorf("no source since the share was made, then an object: pin %q, %s; want uid-1, SourceAvailable", pin, c.Reason)
	}
}

// No false SourceReplaced where nothing was replaced: a source created seconds after its share
// (applied together, the status controller not running yet) is the share's first, and so is the
// first object found for a share whose ref named nothing until an edit corrected it. One created
// later than that, or found after an object was read for the share, is not.
func TestFirstPinTakesAnObjectMadeWithTheShare(t *testing.T) {
	made := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	shareObject := func(generation int64, conditions ...any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "corp-ca", "generation": generation, "creationTimestamp": made.Format(time.RFC3339)},
			"spec": map[string]any{"secretRef": map[string]any{"namespace": "platform", "name": "ca-bundle"},
				"items": []any{map[string]any{"key": "ca.crt"}}},
		}}
		if len(conditions) > 0 {
			u.Object["status"] = map[string]any{"conditions": conditions}
		}
		return u
	}
	notFound := map[string]any{"type": conditionReady, "status": "False", "reason": reasonSourceNotFound, "message": "m",
		"observedGeneration": int64(1), "lastTransitionTime": made.Format(time.RFC3339)}
	observed := map[string]any{"type": conditionSourceObserved, "status": "True", "reason": reasonObjectRead, "message": "m",
		"observedGeneration": int64(1), "lastTransitionTime": made.Format(time.RFC3339)}
	for _, tc := range []struct {
		name    string
		u       *unstructured.Unstructured
		created time.Time
		pinned  bool
	}{
		{"created 5s after the share, nothing checked yet", shareObject(1), made.Add(5 * time.Second), true},
		{"created a minute after the share, nothing checked yet", shareObject(1), made.Add(time.Minute), false},
		{"the ref corrected by an edit after it named nothing", shareObject(2, notFound), made.Add(time.Hour), true},
		{"the ref edited after an object was read for it", shareObject(2, notFound, observed), made.Add(time.Hour), false},
	} {
		_, c, pin := checkAndWrite(t, tc.u, sourceAt(share.SourceData{UID: "uid-1", Created: tc.created, Files: map[string][]byte{"ca.crt": []byte("CA")}}))
		if got := pin == "uid-1"; got != tc.pinned || (tc.pinned && c.Reason != reasonSourceAvailable) || (!tc.pinned && c.Reason != reasonSourceReplaced) {
			t.Errorf("%s: pin %q, %s; want pinned %v", tc.name, pin, c.Reason, tc.pinned)
		}
	}
}

// A status written before the schema bounded its conditions keeps Ready and the first others, up
// to the schema's maxItems: with more, every write of it would be refused.
func TestConditionsAreKeptWithinTheSchemasBound(t *testing.T) {
	var conds []metav1.Condition
	for i := range 12 {
		conds = append(conds, metav1.Condition{Type: fmt.Sprintf("Example%d", i)})
	}
	conds = append(conds, metav1.Condition{Type: conditionReady})
	kept := withinMaxConditions(conds)
	if len(kept) != maxConditions || kept[len(kept)-1].Type != conditionReady || kept[0].Type != "Example0" {
		t.Errorf("kept %d conditions %v, want %d with Ready", len(kept), kept, maxConditions)
	}
	// Ready first, or anywhere: the bound is kept, not one less.
	readyFirst := append([]metav1.Condition{{Type: conditionReady}}, conds[:12]...)
	if kept := withinMaxConditions(readyFirst); len(kept) != maxConditions || kept[0].Type != conditionReady || kept[1].Type != "Example0" {
		t.Errorf("Ready first: kept %d conditions %v, want %d with Ready", len(kept), kept, maxConditions)
	}
	// The record that an object was read for the spec is the driver's too: kept.
	withObserved := append(slices.Clone(readyFirst), metav1.Condition{Type: conditionSourceObserved, Status: metav1.ConditionTrue})
	if kept := withinMaxConditions(withObserved); len(kept) != maxConditions || meta.FindStatusCondition(kept, conditionSourceObserved) == nil || meta.FindStatusCondition(kept, conditionReady) == nil {
		t.Errorf("with SourceObserved: kept %d conditions %v, want %d with Ready and SourceObserved", len(kept), kept, maxConditions)
	}
	if few := conds[:3]; len(withinMaxConditions(few)) != 3 {
		t.Error("a status within the bound lost conditions")
	}
	crds, err := os.ReadFile("../../charts/shared-resource-csi/templates/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bound := fmt.Sprintf("conditions:\n                  description: conditions are observations about this share made by the CSI driver.\n                  type: array\n                  maxItems: %d\n", maxConditions)
	if n := strings.Count(string(crds), bound); n != 2 {
		t.Errorf("%d of the two CRDs bound status.conditions to maxItems: %d", n, maxConditions)
	}
}

// The words the status controller writes (defined beside the code that writes them) and the pin's
// fields are the ones shareapi gives the admin's diagnose to read.
func TestStatusWordsAreShareAPIs(t *testing.T) {
	for _, c := range []struct{ driver, api string }{
		{conditionReady, shareapi.ConditionReady},
		{reasonSourceNotFound, shareapi.ReasonSourceNotFound},
		{reasonSourceForbidden, shareapi.ReasonSourceForbidden},
		{reasonSourceReplaced, shareapi.ReasonSourceReplaced},
		{reasonSourceKeyMissing, shareapi.ReasonSourceKeyMissing},
		{share.PinField, shareapi.PinField},
		{share.RecreationField, shareapi.RecreationField},
		{share.RecreationFollow, shareapi.RecreationFollow},
	} {
		if c.driver != c.api {
			t.Errorf("the driver writes %q where the admin's commands read %q", c.driver, c.api)
		}
	}
}
