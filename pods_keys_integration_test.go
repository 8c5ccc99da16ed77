//go:build integration

package main

// Specification, with real pods on the real kubelet and the driver deployed from deploy.yaml, of a
// share that exposes only some keys of its source (spec.items):
//   - a TLS Secret shared with only its ca.crt: pods see exactly ca.crt; the private key's bytes
//     are in no file under the driver's volume directories on the node; a pod whose items ask
//     for tls.key does not start, and its FailedMount event names what the share exposes (and
//     not the key); the share's status lists ca.crt;
//   - a rename through the list (ca.crt shared as ca.pem), placed and moded by a pod's items;
//   - the list widened to tls.crt, then narrowed back: running pods follow within the relist
//     bound, with an event each time; a refreshResource: "false" pod loses the key too;
//   - a listed key the source lacks: the share is not Ready and names it, and mounts fail with it;
//   - a SharedConfigMap's list, over data and binaryData.
// The schema and the admission policy of the list, against the API server alone:
// sharekeys_integration_test.go.

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// tlsSecret is a cert-manager-like issuer Secret: the CA, a leaf certificate and its private key,
// each with a marker of its own so its bytes can be searched for.
func tlsSecret() map[string][]byte {
	r := randSuffix()
	return map[string][]byte{
		"ca.crt":  []byte("-----BEGIN CERTIFICATE-----\nca-" + r + "\n-----END CERTIFICATE-----\n"),
		"tls.crt": []byte("-----BEGIN CERTIFICATE-----\nleaf-" + r + "\n-----END CERTIFICATE-----\n"),
		"tls.key": []byte("-----BEGIN PRIVATE KEY-----\nprivate-" + r + "\n-----END PRIVATE KEY-----\n"),
	}
}

// sharedKeys is spec.items: "key" or "key=path" entries.
func sharedKeys(entries ...string) []any {
	out := make([]any, len(entries))
	for i, e := range entries {
		key, path, renamed := strings.Cut(e, "=")
		m := map[string]any{"key": key}
		if renamed {
			m["path"] = path
		}
		out[i] = m
	}
	return out
}

// newListedShare shares a new Secret holding data, exposing only the items, as the cluster admin.
func (s *podSuite) newListedShare(t *testing.T, data map[string][]byte, items []any) *shareFixture {
	t.Helper()
	f := &shareFixture{platform: s.sourceNamespace(t, "platform"), secret: "issuer", share: "issuer-ca-" + randSuffix(), data: data}
	s.createSecret(t, f.platform, f.secret, data)
	u := shareObject(kindSecret, f.share, f.platform, f.secret)
	unstructured.SetNestedSlice(u.Object, items, "spec", "items")
	if _, err := s.dyn.Resource(shareGVR(kindSecret)).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the share: %v", err)
	}
	t.Cleanup(func() { s.deleteShare(t, kindSecret, f.share) })
	return f
}

// setSharedKeys replaces the share's list, as the cluster admin.
func (s *podSuite) setSharedKeys(t *testing.T, share string, items []any) {
	t.Helper()
	eventually(t, 10*time.Second, func() error { // a conflict with the status writer is retried
		u, err := s.dyn.Resource(shareGVR(kindSecret)).Get(context.Background(), share, metav1.GetOptions{})
		if err != nil {
			return err
		}
		unstructured.SetNestedSlice(u.Object, items, "spec", "items")
		_, err = s.dyn.Resource(shareGVR(kindSecret)).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
}

// grantedNamespace is a new namespace whose service account "app" may use the share.
func (s *podSuite) grantedNamespace(t *testing.T, prefix, share string) string {
	t.Helper()
	ns := s.podNamespace(t, prefix)
	s.createServiceAccount(t, ns, "app")
	s.grant(t, ns, kindSecret, share, serviceAccount(ns, "app"))
	return ns
}

// filesHolding lists the regular files under dir (skipping those that vanish meanwhile) whose
// bytes contain needle.
func filesHolding(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("searching %s: %v", dir, err)
	}
	return found
}

// exposedKeysOf is the share's status.exposedKeys.
func (s *podSuite) exposedKeysOf(share string) ([]string, error) {
	u, err := s.dyn.Resource(shareGVR(kindSecret)).Get(context.Background(), share, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	keys, _, err := unstructured.NestedStringSlice(u.Object, "status", "exposedKeys")
	return keys, err
}

func TestPodsShareOnlyTheCAOfATLSSecret(t *testing.T) {
	s := podsEnv(t, podsShared)
	data := tlsSecret()
	f := s.newListedShare(t, data, sharedKeys("ca.crt"))
	ns := s.grantedNamespace(t, "keys-ca", f.share)

	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitRunning(t, ns, "app", 60*time.Second)
	s.waitFiles(t, ns, "app", map[string][]byte{"ca.crt": data["ca.crt"]}, 10*time.Second)

	// On the node: the CA's bytes are in the volume's files (the search reaches them), the
	// private key's are in none, under any volume's directory.
	volumes := filepath.Join(s.kubelet, "plugins", driverName, "volumes")
	if got := filesHolding(t, volumes, data["ca.crt"]); len(got) == 0 {
		t.Fatalf("the CA's bytes are in no file under %s: the search does not reach the volumes", volumes)
	}
	for _, k := range []string{"tls.key", "tls.crt"} {
		if got := filesHolding(t, volumes, data[k]); len(got) > 0 {
			t.Errorf("the bytes of %s, not shared, are on the node: %v", k, got)
		}
	}
	s.assertNotLogged(t, data["tls.key"], data["tls.crt"])

	// A pod asking for the key does not start; the message names what the share exposes.
	s.createPod(t, ns, "greedy", consumerSpec{sa: "app", attrs: map[string]string{attrSharedSecret: f.share, attrItems: "ca.crt, tls.key"}})
	ev := s.waitEvent(t, ns, "greedy", "FailedMount", 60*time.Second,
		"FailedPrecondition", `SharedSecret "`+f.share+`"`, "entry 2 of the volume's items selects a key the share does not expose", `it exposes only "ca.crt"`)
	if strings.Contains(ev.Message, "tls.key") {
		t.Errorf("the FailedMount event names the key the share does not expose: %s", ev.Message)
	}
	t.Logf("FailedMount: %s", ev.Message)

	// The status says what a pod can read through the share.
	c := s.waitShareReady(t, f.share, metav1.ConditionTrue, reasonSourceAvailable, `the share exposes only "ca.crt"`)
	t.Logf("Ready: %s", c.Message)
	eventually(t, 30*time.Second, func() error {
		keys, err := s.exposedKeysOf(f.share)
		if err == nil && !slices.Equal(keys, []string{"ca.crt"}) {
			err = errors.New("status.exposedKeys is " + strings.Join(keys, ",") + ", want ca.crt")
		}
		return err
	})
}

func TestPodsRenameThroughTheShareListWithItemsAndModes(t *testing.T) {
	s := podsEnv(t, podsShared)
	data := tlsSecret()
	f := s.newListedShare(t, data, sharedKeys("ca.crt=ca.pem"))
	ns := s.grantedNamespace(t, "keys-rename", f.share)

	// The pod's items select the name the share exposes, place it and set its mode.
	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: map[string]string{
		attrSharedSecret: f.share, attrDefaultMode: "0444", attrItems: "ca.pem=certs/ca.pem:0400"}})
	s.waitRunning(t, ns, "app", 60*time.Second)
	out, stderr, err := s.exec(ns, "app", "sh", "-c", "ls "+podMount+"; ls "+podMount+"/certs; stat -L -c %a "+podMount+"/certs/ca.pem; cat "+podMount+"/certs/ca.pem")
	if err != nil {
		t.Fatalf("exec: %v (%s)", err, stderr)
	}
	if want := "certs\nca.pem\n400\n" + string(data["ca.crt"]); string(out) != want {
		t.Errorf("the pod sees:\n%s\nwant:\n%s", out, want)
	}
	// Without items, the renamed file under its shared name.
	s.createPod(t, ns, "plain", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitRunning(t, ns, "plain", 60*time.Second)
	s.waitFiles(t, ns, "plain", map[string][]byte{"ca.pem": data["ca.crt"]}, 10*time.Second)
	// The source's own name is not one the share exposes.
	s.createPod(t, ns, "by-source-name", consumerSpec{sa: "app", attrs: map[string]string{attrSharedSecret: f.share, attrItems: "ca.crt"}})
	s.waitEvent(t, ns, "by-source-name", "FailedMount", 60*time.Second, `it exposes only "ca.pem"`)
}

func TestPodsFollowTheShareListWidenedThenNarrowed(t *testing.T) {
	s := podsEnv(t, podsShared)
	data := tlsSecret()
	f := s.newListedShare(t, data, sharedKeys("ca.crt"))
	ns := s.grantedNamespace(t, "keys-change", f.share)
	caOnly := map[string][]byte{"ca.crt": data["ca.crt"]}
	caAndLeaf := map[string][]byte{"ca.crt": data["ca.crt"], "tls.crt": data["tls.crt"]}

	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitRunning(t, ns, "app", 60*time.Second)
	s.waitFiles(t, ns, "app", caOnly, 10*time.Second)

	bound := podsRelist + podsRelistSlack
	s.setSharedKeys(t, f.share, sharedKeys("ca.crt", "tls.crt"))
	took := s.waitFiles(t, ns, "app", caAndLeaf, bound)
	t.Logf("widened: the running pod has tls.crt after %v (bound %v)", took.Round(100*time.Millisecond), bound)
	s.waitEvent(t, ns, "app", reasonKeysChanged, 10*time.Second, `it shares only "ca.crt", "tls.crt"`)

	// A pod that does not refresh, started now, sees both; it loses tls.crt with the others.
	s.createPod(t, ns, "pinned", consumerSpec{sa: "app", attrs: map[string]string{attrSharedSecret: f.share, attrRefreshResource: "false"}})
	s.waitRunning(t, ns, "pinned", 60*time.Second)
	s.waitFiles(t, ns, "pinned", caAndLeaf, 10*time.Second)

	s.setSharedKeys(t, f.share, sharedKeys("ca.crt"))
	took = s.waitFiles(t, ns, "app", caOnly, bound)
	t.Logf("narrowed: tls.crt gone from the running pod after %v", took.Round(100*time.Millisecond))
	s.waitFiles(t, ns, "pinned", caOnly, bound)
	// The refreshing pod was refreshed through the new list; the pinned one kept what it still shares.
	for pod, says := range map[string]string{"app": `it shares only "ca.crt", from Secret`, "pinned": `it shares only "ca.crt"; files no longer shared were removed`} {
		ev := s.waitEvent(t, ns, pod, reasonKeysChanged, 10*time.Second, says)
		if strings.Contains(ev.Message, "tls.key") {
			t.Errorf("event on %s names the private key: %s", pod, ev.Message)
		}
		s.assertStillRunning(t, ns, pod)
	}
	volumes := filepath.Join(s.kubelet, "plugins", driverName, "volumes")
	if got := filesHolding(t, volumes, data["tls.crt"]); len(got) > 0 {
		t.Errorf("tls.crt, no longer shared, is still on the node: %v", got)
	}
}

func TestPodsShareListingAKeyTheSourceLacks(t *testing.T) {
	s := podsEnv(t, podsShared)
	data := tlsSecret()
	f := s.newListedShare(t, data, sharedKeys("ca.crt", "bundle.pem"))
	ns := s.grantedNamespace(t, "keys-missing", f.share)

	missing := `has no key "bundle.pem", which SharedSecret "` + f.share + `" lists in spec.items`
	c := s.waitShareReady(t, f.share, metav1.ConditionFalse, reasonSourceKeyMissing, "Secret "+f.platform+"/"+f.secret, missing)
	t.Logf("Ready: %s", c.Message)
	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: f.attrs()})
	s.waitEvent(t, ns, "app", "FailedMount", 60*time.Second, "FailedPrecondition", missing)

	// The source gains the key: the share turns Ready, and the pod starts.
	data["bundle.pem"] = []byte("bundle-" + randSuffix())
	s.updateSecret(t, f.platform, f.secret, data)
	s.waitShareReady(t, f.share, metav1.ConditionTrue, reasonSourceAvailable, `the share exposes only "bundle.pem", "ca.crt"`)
	s.waitRunning(t, ns, "app", 90*time.Second)
	s.waitFiles(t, ns, "app", map[string][]byte{"ca.crt": data["ca.crt"], "bundle.pem": data["bundle.pem"]}, 10*time.Second)
}

// A SharedConfigMap's list picks among data and binaryData alike.
func TestPodsSharedConfigMapListPicksDataAndBinaryData(t *testing.T) {
	s := podsEnv(t, podsShared)
	ctx := context.Background()
	platform := s.sourceNamespace(t, "platform")
	logo, internal := podsRandomBytes(256), "internal-"+randSuffix()
	if _, err := s.kube.CoreV1().ConfigMaps(platform).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data:       map[string]string{"app.env": "MODE=prod\n", "internal.conf": internal},
		BinaryData: map[string][]byte{"logo.png": logo}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	share := "settings-" + randSuffix()
	if _, err := s.dyn.Resource(shareGVR(kindConfigMap)).Create(ctx,
		listedShareObject(kindConfigMap, share, platform, "settings", sharedKeys("app.env=settings.env", "logo.png")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.deleteShare(t, kindConfigMap, share) })
	ns := s.podNamespace(t, "keys-cm")
	s.createServiceAccount(t, ns, "app")
	s.grant(t, ns, kindConfigMap, share, serviceAccount(ns, "app"))
	s.createPod(t, ns, "app", consumerSpec{sa: "app", attrs: map[string]string{attrSharedConfigMap: share}})
	s.waitRunning(t, ns, "app", 60*time.Second)
	s.waitFiles(t, ns, "app", map[string][]byte{"settings.env": []byte("MODE=prod\n"), "logo.png": logo}, 10*time.Second)
	if got := filesHolding(t, filepath.Join(s.kubelet, "plugins", driverName, "volumes"), []byte(internal)); len(got) > 0 {
		t.Errorf("internal.conf, not shared, is on the node: %v", got)
	}
}
