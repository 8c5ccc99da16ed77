package pods

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
// test/e2e/api/sharekeys_test.go.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

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
)

// tlsSecret is a cert-manager-like issuer Secret: the CA, a leaf certificate and its private key,
// each with a marker of its own so its bytes can be searched for.
func tlsSecret() map[string][]byte {
	r := framework.RandSuffix()
	return map[string][]byte{
		"ca.crt":  []byte("-----BEGIN CERTIFICATE-----\nca-" + r + "\n-----END CERTIFICATE-----\n"),
		"tls.crt": []byte("-----BEGIN CERTIFICATE-----\nleaf-" + r + "\n-----END CERTIFICATE-----\n"),
		"tls.key": []byte("-----BEGIN PRIVATE KEY-----\nprivate-" + r + "\n-----END PRIVATE KEY-----\n"),
	}
}

// describeVolumes logs, for each volume holding one of paths, what its ..data links point at, its
// directories' entries and its record (names and states, never data): what a failure needs to
// be understood.
func describeVolumes(t *testing.T, volumes string, paths []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range paths {
		rel, err := filepath.Rel(volumes, p)
		if err != nil {
			continue
		}
		vol := filepath.Join(volumes, strings.SplitN(rel, string(filepath.Separator), 2)[0])
		if seen[vol] {
			continue
		}
		seen[vol] = true
		for _, d := range []string{filepath.Join(vol, "data"), filepath.Join(vol, "shares", "0")} {
			target, _ := os.Readlink(filepath.Join(d, "..data"))
			var names []string
			if entries, err := os.ReadDir(d); err == nil {
				for _, e := range entries {
					names = append(names, e.Name())
				}
			}
			t.Logf("%s: ..data -> %s; entries %v", d, target, names)
		}
		record, err := os.ReadFile(filepath.Join(vol, "record.json"))
		t.Logf("%s/record.json (%v): %s", vol, err, record)
	}
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

func TestPodsShareOnlyTheCAOfATLSSecret(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	data := tlsSecret()
	f := s.NewListedShare(t, data, framework.SharedKeys("ca.crt"))
	ns := s.GrantedNamespace(t, "keys-ca", f.Share)

	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "app", 60*time.Second)
	s.WaitFiles(t, ns, "app", map[string][]byte{"ca.crt": data["ca.crt"]}, 10*time.Second)

	// On the node: the CA's bytes are in the volume's files (the search reaches them), the
	// private key's are in none, under any volume's directory.
	volumes := filepath.Join(s.Kubelet, "plugins", framework.DriverName, "volumes")
	if got := filesHolding(t, volumes, data["ca.crt"]); len(got) == 0 {
		t.Fatalf("the CA's bytes are in no file under %s: the search does not reach the volumes", volumes)
	}
	for _, k := range []string{"tls.key", "tls.crt"} {
		if got := filesHolding(t, volumes, data[k]); len(got) > 0 {
			t.Errorf("the bytes of %s, not shared, are on the node: %v", k, got)
		}
	}
	s.AssertNotLogged(t, data["tls.key"], data["tls.crt"])

	// A pod asking for the key does not start; the message names what the share exposes.
	s.CreatePod(t, ns, "greedy", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{framework.AttrSharedSecret: f.Share, framework.AttrItems: "ca.crt, tls.key"}})
	ev := s.WaitEvent(t, ns, "greedy", "FailedMount", 60*time.Second,
		"FailedPrecondition", `SharedSecret "`+f.Share+`"`, "entry 2 of the volume's items selects a key the share does not expose", `it exposes only "ca.crt"`)
	if strings.Contains(ev.Message, "tls.key") {
		t.Errorf("the FailedMount event names the key the share does not expose: %s", ev.Message)
	}
	t.Logf("FailedMount: %s", ev.Message)

	// The status says what a pod can read through the share.
	c := s.WaitShareReady(t, f.Share, metav1.ConditionTrue, framework.ReasonSourceAvailable, `the share exposes only "ca.crt"`)
	t.Logf("Ready: %s", c.Message)
	framework.Eventually(t, 30*time.Second, func() error {
		keys, err := s.ExposedKeysOf(f.Share)
		if err == nil && !slices.Equal(keys, []string{"ca.crt"}) {
			err = errors.New("status.exposedKeys is " + strings.Join(keys, ",") + ", want ca.crt")
		}
		return err
	})
}

func TestPodsRenameThroughTheShareListWithItemsAndModes(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	data := tlsSecret()
	f := s.NewListedShare(t, data, framework.SharedKeys("ca.crt=ca.pem"))
	ns := s.GrantedNamespace(t, "keys-rename", f.Share)

	// The pod's items select the name the share exposes, place it and set its mode.
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{
		framework.AttrSharedSecret: f.Share, framework.AttrDefaultMode: "0444", framework.AttrItems: "ca.pem=certs/ca.pem:0400"}})
	s.WaitRunning(t, ns, "app", 60*time.Second)
	out, stderr, err := s.Exec(ns, "app", "sh", "-c", "ls "+framework.PodMount+"; ls "+framework.PodMount+"/certs; stat -L -c %a "+framework.PodMount+"/certs/ca.pem; cat "+framework.PodMount+"/certs/ca.pem")
	if err != nil {
		t.Fatalf("exec: %v (%s)", err, stderr)
	}
	if want := "certs\nca.pem\n400\n" + string(data["ca.crt"]); string(out) != want {
		t.Errorf("the pod sees:\n%s\nwant:\n%s", out, want)
	}
	// Without items, the renamed file under its shared name.
	s.CreatePod(t, ns, "plain", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "plain", 60*time.Second)
	s.WaitFiles(t, ns, "plain", map[string][]byte{"ca.pem": data["ca.crt"]}, 10*time.Second)
	// The source's own name is not one the share exposes.
	s.CreatePod(t, ns, "by-source-name", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{framework.AttrSharedSecret: f.Share, framework.AttrItems: "ca.crt"}})
	s.WaitEvent(t, ns, "by-source-name", "FailedMount", 60*time.Second, `it exposes only "ca.pem"`)
}

func TestPodsFollowTheShareListWidenedThenNarrowed(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	data := tlsSecret()
	f := s.NewListedShare(t, data, framework.SharedKeys("ca.crt"))
	ns := s.GrantedNamespace(t, "keys-change", f.Share)
	caOnly := map[string][]byte{"ca.crt": data["ca.crt"]}
	caAndLeaf := map[string][]byte{"ca.crt": data["ca.crt"], "tls.crt": data["tls.crt"]}

	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitRunning(t, ns, "app", 60*time.Second)
	s.WaitFiles(t, ns, "app", caOnly, 10*time.Second)

	bound := framework.PodsRelist + framework.PodsRelistSlack
	s.SetSharedKeys(t, f.Share, framework.SharedKeys("ca.crt", "tls.crt"))
	took := s.WaitFiles(t, ns, "app", caAndLeaf, bound)
	t.Logf("widened: the running pod has tls.crt after %v (bound %v)", took.Round(100*time.Millisecond), bound)
	s.WaitEvent(t, ns, "app", framework.ReasonKeysChanged, 10*time.Second, `it shares only "ca.crt", "tls.crt"`)

	// A pod that does not refresh, started now, sees both; it loses tls.crt with the others.
	s.CreatePod(t, ns, "pinned", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{framework.AttrSharedSecret: f.Share, framework.AttrRefreshResource: "false"}})
	s.WaitRunning(t, ns, "pinned", 60*time.Second)
	s.WaitFiles(t, ns, "pinned", caAndLeaf, 10*time.Second)

	s.SetSharedKeys(t, f.Share, framework.SharedKeys("ca.crt"))
	took = s.WaitFiles(t, ns, "app", caOnly, bound)
	t.Logf("narrowed: tls.crt gone from the running pod after %v", took.Round(100*time.Millisecond))
	s.WaitFiles(t, ns, "pinned", caOnly, bound)
	// The refreshing pod was refreshed through the new list; the pinned one kept what it still shares.
	for pod, says := range map[string]string{"app": `it shares only "ca.crt", from Secret`, "pinned": `it shares only "ca.crt"; files no longer shared were removed`} {
		ev := s.WaitEvent(t, ns, pod, framework.ReasonKeysChanged, 10*time.Second, says)
		if strings.Contains(ev.Message, "tls.key") {
			t.Errorf("event on %s names the private key: %s", pod, ev.Message)
		}
		s.AssertStillRunning(t, ns, pod)
	}
	volumes := filepath.Join(s.Kubelet, "plugins", framework.DriverName, "volumes")
	if got := filesHolding(t, volumes, data["tls.crt"]); len(got) > 0 {
		t.Errorf("tls.crt, no longer shared, is still on the node: %v", got)
		describeVolumes(t, volumes, got)
	}
}

func TestPodsShareListingAKeyTheSourceLacks(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	data := tlsSecret()
	f := s.NewListedShare(t, data, framework.SharedKeys("ca.crt", "bundle.pem"))
	ns := s.GrantedNamespace(t, "keys-missing", f.Share)

	missing := `has no key "bundle.pem", which SharedSecret "` + f.Share + `" lists in spec.items`
	c := s.WaitShareReady(t, f.Share, metav1.ConditionFalse, framework.ReasonSourceKeyMissing, "Secret "+f.Platform+"/"+f.Secret, missing)
	t.Logf("Ready: %s", c.Message)
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: f.Attrs()})
	s.WaitEvent(t, ns, "app", "FailedMount", 60*time.Second, "FailedPrecondition", missing)

	// The source gains the key: the share turns Ready, and the pod starts.
	data["bundle.pem"] = []byte("bundle-" + framework.RandSuffix())
	s.UpdateSecret(t, f.Platform, f.Secret, data)
	s.WaitShareReady(t, f.Share, metav1.ConditionTrue, framework.ReasonSourceAvailable, `the share exposes only "bundle.pem", "ca.crt"`)
	s.WaitRunning(t, ns, "app", 90*time.Second)
	s.WaitFiles(t, ns, "app", map[string][]byte{"ca.crt": data["ca.crt"], "bundle.pem": data["bundle.pem"]}, 10*time.Second)
}

// A SharedConfigMap's list picks among data and binaryData alike.
func TestPodsSharedConfigMapListPicksDataAndBinaryData(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	ctx := context.Background()
	platform := s.SourceNamespace(t, "platform")
	logo, internal := framework.PodsRandomBytes(256), "internal-"+framework.RandSuffix()
	if _, err := s.Kube.CoreV1().ConfigMaps(platform).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data:       map[string]string{"app.env": "MODE=prod\n", "internal.conf": internal},
		BinaryData: map[string][]byte{"logo.png": logo}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	share := "settings-" + framework.RandSuffix()
	if _, err := s.Dyn.Resource(framework.ShareGVR(framework.KindConfigMap)).Create(ctx,
		framework.ListedShareObject(framework.KindConfigMap, share, platform, "settings", framework.SharedKeys("app.env=settings.env", "logo.png")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.DeleteShare(t, framework.KindConfigMap, share) })
	ns := s.PodNamespace(t, "keys-cm")
	s.CreateServiceAccount(t, ns, "app")
	s.Grant(t, ns, framework.KindConfigMap, share, framework.ServiceAccount(ns, "app"))
	s.CreatePod(t, ns, "app", framework.ConsumerSpec{Sa: "app", Attrs: map[string]string{framework.AttrSharedConfigMap: share}})
	s.WaitRunning(t, ns, "app", 60*time.Second)
	s.WaitFiles(t, ns, "app", map[string][]byte{"settings.env": []byte("MODE=prod\n"), "logo.png": logo}, 10*time.Second)
	if got := filesHolding(t, filepath.Join(s.Kubelet, "plugins", framework.DriverName, "volumes"), []byte(internal)); len(got) > 0 {
		t.Errorf("internal.conf, not shared, is on the node: %v", got)
	}
}
