//go:build integration

package main

// Specification of a share keeping to the object it was made for (sourcepin.go), with real
// pods: the source's namespace is deleted and created again by somebody else, with a Secret of
// the same name and other content, and the driver let read it. Consumers keep the data they had,
// a new pod cannot mount the share, the share's Ready condition says why and what to run; once
// that is run (the new object accepted), consumers follow. A share that follows re-creations
// (spec.sourceRecreation: Follow) follows at once.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func TestPodsShareKeepsToTheObjectItWasMadeFor(t *testing.T) {
	s := podsEnv(t, podsShared)
	ctx := context.Background()
	v1 := map[string][]byte{"ca.crt": []byte("the platform team's CA")}
	v2 := map[string][]byte{"ca.crt": []byte("somebody else's CA")}
	pinned := s.newShare(t, v1)
	follower := "follow-" + randSuffix()
	s.createShare(t, kindSecret, follower, pinned.platform, pinned.secret)
	setSourceRecreation(t, s.kubeEnv, follower, recreationFollow)

	ns := s.podNamespace(t, "pin")
	s.grant(t, ns, kindSecret, pinned.share, serviceAccount(ns, "default"))
	s.grant(t, ns, kindSecret, follower, serviceAccount(ns, "default"))
	s.createPod(t, ns, "reader", consumerSpec{attrs: pinned.attrs()})
	s.createPod(t, ns, "follower", consumerSpec{attrs: map[string]string{"sharedSecret": follower}})
	for _, p := range []string{"reader", "follower"} {
		s.waitRunning(t, ns, p, 60*time.Second)
		s.waitFiles(t, ns, p, v1, 10*time.Second)
	}
	orig, err := s.kube.CoreV1().Secrets(pinned.platform).Get(ctx, pinned.secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, podsRelist+podsRelistSlack, func() error {
		if uid := shareSourceUID(t, s.kubeEnv, pinned.share); uid != string(orig.UID) {
			return fmt.Errorf("status.sourceUID %q, want the Secret's UID %s", uid, orig.UID)
		}
		return nil
	})

	// The namespace goes, and comes back with another Secret of the name, readable by the driver.
	if err := s.kube.CoreV1().Namespaces().Delete(ctx, pinned.platform, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error {
		if _, err := s.kube.CoreV1().Namespaces().Get(ctx, pinned.platform, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s still there (%v)", pinned.platform, err)
		}
		return nil
	})
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pinned.platform}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.grantSourceRead(t, pinned.platform, sourceReaders()...)
	s.createSecret(t, pinned.platform, pinned.secret, v2)
	replacement, err := s.kube.CoreV1().Secrets(pinned.platform).Get(ctx, pinned.secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The follower follows within the bound; the pinned share's consumer keeps its data.
	s.waitFiles(t, ns, "follower", v2, podsRelist*16/10+podsRelistSlack)
	s.waitEvent(t, ns, "reader", reasonRefreshFailed, podsRelist*16/10+podsRelistSlack, "was deleted and created again", "kubectl patch sharedsecrets "+pinned.share)
	if got, err := s.podFiles(ns, "reader"); err != nil {
		t.Fatal(err)
	} else if err := sameFiles(got, v1); err != nil {
		t.Fatalf("the pinned share's consumer reads the replacement: %v", err)
	}
	var msg string
	eventually(t, podsRelist+podsRelistSlack, func() error {
		c, _, err := s.readyCondition(kindSecret, pinned.share)
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != reasonSourceReplaced {
			return fmt.Errorf("Ready %s/%s, want False/%s", c.Status, c.Reason, reasonSourceReplaced)
		}
		msg = c.Message
		return nil
	})
	if !strings.Contains(msg, string(replacement.UID)) {
		t.Errorf("the condition does not name the new object's UID: %q", msg)
	}
	s.createPod(t, ns, "newcomer", consumerSpec{attrs: pinned.attrs()})
	s.waitEvent(t, ns, "newcomer", "FailedMount", time.Minute, "was deleted and created again")

	// The admin accepts the new object with the command the condition gives.
	i := strings.Index(msg, "kubectl patch ")
	j := strings.Index(msg[i:], "' ")
	if i < 0 || j < 0 {
		t.Fatalf("no command in %q", msg)
	}
	args := shellWords(t, msg[i+len("kubectl "):i+j+1])
	if out, err := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("the condition's command %v: %v\n%s", args, err, out)
	}
	s.waitFiles(t, ns, "reader", v2, podsRelist*16/10+podsRelistSlack)
	s.waitRunning(t, ns, "newcomer", 3*time.Minute) // the kubelet retries a failed mount with a growing backoff
}

// shellWords splits a command line made of plain words and single-quoted ones.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '\'' {
			end := strings.IndexByte(line[1:], '\'')
			if end < 0 {
				t.Fatalf("unbalanced quote in %q", line)
			}
			words, line = append(words, line[1:end+1]), line[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(line, " ")
		words, line = append(words, w), rest
	}
	return words
}

func shareSourceUID(t *testing.T, e *kubeEnv, share string) string {
	t.Helper()
	u, err := e.dyn.Resource(shareGVR(kindSecret)).Get(context.Background(), share, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid, _, _ := unstructured.NestedString(u.Object, "status", pinField)
	return uid
}

// setSourceRecreation sets the share's spec.sourceRecreation with a merge patch: the status
// writer may be writing the share's status at the same moment.
func setSourceRecreation(t *testing.T, e *kubeEnv, share, mode string) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{%q:%q}}`, recreationField, mode))
	if _, err := e.dyn.Resource(shareGVR(kindSecret)).Patch(context.Background(), share, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
