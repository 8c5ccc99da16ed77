package pods

// Specification of a share keeping to the object it was made for (internal/share/pin.go), with real
// pods: the source's namespace is deleted and created again by somebody else, with a Secret of
// the same name and other content, and the driver let read it. Consumers keep the data they had,
// a new pod cannot mount the share, the share's Ready condition says why and what to run; once
// that is run (the new object accepted), consumers follow. A share that follows re-creations
// (spec.sourceRecreation: Follow) follows at once.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

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
	s := framework.PodsEnv(t, framework.PodsShared)
	ctx := context.Background()
	v1 := map[string][]byte{"ca.crt": []byte("the platform team's CA")}
	v2 := map[string][]byte{"ca.crt": []byte("somebody else's CA")}
	pinned := s.NewShare(t, v1)
	follower := "follow-" + framework.RandSuffix()
	s.CreateShare(t, framework.KindSecret, follower, pinned.Platform, pinned.Secret)
	setSourceRecreation(t, s.KubeEnv, follower, framework.RecreationFollow)

	ns := s.PodNamespace(t, "pin")
	s.Grant(t, ns, framework.KindSecret, pinned.Share, framework.ServiceAccount(ns, "default"))
	s.Grant(t, ns, framework.KindSecret, follower, framework.ServiceAccount(ns, "default"))
	s.CreatePod(t, ns, "reader", framework.ConsumerSpec{Attrs: pinned.Attrs()})
	s.CreatePod(t, ns, "follower", framework.ConsumerSpec{Attrs: map[string]string{"sharedSecret": follower}})
	for _, p := range []string{"reader", "follower"} {
		s.WaitRunning(t, ns, p, 60*time.Second)
		s.WaitFiles(t, ns, p, v1, 10*time.Second)
	}
	orig, err := s.Kube.CoreV1().Secrets(pinned.Platform).Get(ctx, pinned.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.PodsRelist+framework.PodsRelistSlack, func() error {
		if uid := shareSourceUID(t, s.KubeEnv, pinned.Share); uid != string(orig.UID) {
			return fmt.Errorf("status.sourceUID %q, want the Secret's UID %s", uid, orig.UID)
		}
		return nil
	})

	// The namespace goes, and comes back with another Secret of the name, readable by the driver.
	if err := s.Kube.CoreV1().Namespaces().Delete(ctx, pinned.Platform, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() error {
		if _, err := s.Kube.CoreV1().Namespaces().Get(ctx, pinned.Platform, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s still there (%v)", pinned.Platform, err)
		}
		return nil
	})
	if _, err := s.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pinned.Platform}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.GrantSourceRead(t, pinned.Platform, framework.SourceReaders()...)
	s.CreateSecret(t, pinned.Platform, pinned.Secret, v2)
	replacement, err := s.Kube.CoreV1().Secrets(pinned.Platform).Get(ctx, pinned.Secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The follower follows within the bound; the pinned share's consumer keeps its data.
	s.WaitFiles(t, ns, "follower", v2, framework.PodsRelist*16/10+framework.PodsRelistSlack)
	s.WaitEvent(t, ns, "reader", framework.ReasonRefreshFailed, framework.PodsRelist*16/10+framework.PodsRelistSlack, "was deleted and created again", "kubectl patch sharedsecrets "+pinned.Share)
	if got, err := s.PodFiles(ns, "reader"); err != nil {
		t.Fatal(err)
	} else if err := framework.SameFiles(got, v1); err != nil {
		t.Fatalf("the pinned share's consumer reads the replacement: %v", err)
	}
	var msg string
	framework.Eventually(t, framework.PodsRelist+framework.PodsRelistSlack, func() error {
		c, _, err := s.ReadyCondition(framework.KindSecret, pinned.Share)
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != framework.ReasonSourceReplaced {
			return fmt.Errorf("Ready %s/%s, want False/%s", c.Status, c.Reason, framework.ReasonSourceReplaced)
		}
		msg = c.Message
		return nil
	})
	if !strings.Contains(msg, string(replacement.UID)) {
		t.Errorf("the condition does not name the new object's UID: %q", msg)
	}
	s.CreatePod(t, ns, "newcomer", framework.ConsumerSpec{Attrs: pinned.Attrs()})
	s.WaitEvent(t, ns, "newcomer", "FailedMount", time.Minute, "was deleted and created again")

	// The admin accepts the new object with the command the condition gives.
	i := strings.Index(msg, "kubectl patch ")
	j := strings.Index(msg[i:], "' ")
	if i < 0 || j < 0 {
		t.Fatalf("no command in %q", msg)
	}
	args := shellWords(t, msg[i+len("kubectl "):i+j+1])
	if out, err := exec.Command(s.Kubectl, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("the condition's command %v: %v\n%s", args, err, out)
	}
	s.WaitFiles(t, ns, "reader", v2, framework.PodsRelist*16/10+framework.PodsRelistSlack)
	s.WaitRunning(t, ns, "newcomer", 3*time.Minute) // the kubelet retries a failed mount with a growing backoff
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

func shareSourceUID(t *testing.T, e *framework.KubeEnv, share string) string {
	t.Helper()
	u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(context.Background(), share, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid, _, _ := unstructured.NestedString(u.Object, "status", framework.PinField)
	return uid
}

// setSourceRecreation sets the share's spec.sourceRecreation with a merge patch: the status
// writer may be writing the share's status at the same moment.
func setSourceRecreation(t *testing.T, e *framework.KubeEnv, share, mode string) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{%q:%q}}`, framework.RecreationField, mode))
	if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Patch(context.Background(), share, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
