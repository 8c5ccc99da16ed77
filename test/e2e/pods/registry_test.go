package pods

// The pod suite's driver, installed from the local cluster's registry (hack/cluster.sh starts
// distribution's registry on the node IP, TLS with a cluster-CA certificate; SRCSI_REGISTRY and
// SRCSI_REGISTRY_CA name it) by README.md's own install lines, its registry path replaced by the
// cluster's: `make release` pushes the image index and the chart there, and `helm install
// oci://...` installs it, as a user does; the node pulls the image the chart pins by digest.
// Nothing of the driver is imported into the node. So the README's install cannot rot: a line
// that no longer works fails the whole suite.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------------------------
// 0. Installed from the registry: the driver runs the image the release pushed, pulled by the
// node through the index digest the chart pins, and the index in the registry is the one the
// release's cosign signature signs.

func TestPodsInstalledFromTheRegistry(t *testing.T) {
	if os.Getenv("SRCSI_REGISTRY") == "" {
		t.Fatal("$SRCSI_REGISTRY is not set: this cluster has no registry (make up starts none); bring one up with `make registry build`, then `hack/cluster.sh up`, which writes it into the cluster env")
	}
	s := framework.PodsEnv(t, framework.PodsShared)
	rel, ca := s.Release, os.Getenv("SRCSI_REGISTRY_CA")
	if rel == nil {
		t.Fatal("the suite did not install the driver from the registry")
	}
	// The release the suite installed, by README.md's lines; the driver may run a newer one since
	// (TestPodsDriverRecreated upgrades it), which is checked below as it runs.
	if s.Installed == nil || s.Installed.Readme == nil {
		t.Fatal("the driver was not installed by README.md's install lines")
	}
	in := s.Installed.Readme
	t.Logf("installed by README.md's lines, registry %s replaced by the cluster's:\n  %s\n  %s", in.Registry, in.Release, in.Helm)
	pod, err := s.DriverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Image; got != rel.Image() {
		t.Errorf("the chart's image is %s, want the release's %s", got, rel.Image())
	}
	if err := s.CheckPulledFromRelease(pod); err != nil {
		t.Error(err)
	}
	t.Logf("driver pod %s: image %s, imageID %s", pod.Name, pod.Spec.Containers[0].Image, pod.Status.ContainerStatuses[0].ImageID)

	// For the release installed by README.md's lines, and the one the driver runs now if an
	// upgrade replaced it: what the registry serves for its tag is the index pushed, byte for
	// byte, and the release's signature verifies it.
	installed := servedRelease{s.Installed.Repo, s.Installed.Version, s.Installed.IndexDigest, s.Installed.IndexSig, s.Installed.CosignPub}
	running := servedRelease{rel.Repo, rel.Version, rel.IndexDigest, rel.IndexSig, rel.CosignPub}
	checkServedAndSigned(t, installed, ca)
	if running.IndexDigest != installed.IndexDigest {
		checkServedAndSigned(t, running, ca)
	}
}

// servedRelease is what a test release pushed to the cluster's registry: its tag, the digest of
// its index, and the index's signature with the public key that verifies it.
type servedRelease struct {
	Repo, Version, IndexDigest string
	IndexSig, CosignPub        []byte
}

// checkServedAndSigned checks that the registry serves rel's tag as the index rel pushed, and
// that rel's signature verifies that index and nothing else.
func checkServedAndSigned(t *testing.T, rel servedRelease, ca string) {
	t.Helper()
	// What the registry serves for the release's tag is the index pushed, byte for byte.
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	repoPath := strings.TrimPrefix(rel.Repo, os.Getenv("SRCSI_REGISTRY")+"/")
	req, err := http.NewRequest(http.MethodGet, "https://"+os.Getenv("SRCSI_REGISTRY")+"/v2/"+repoPath+"/manifests/"+rel.Version, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	index, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the manifest of %s:%s: %s %v\n%s", rel.Repo, rel.Version, resp.Status, err, index)
	}
	sum := sha256.Sum256(index)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != rel.IndexDigest || resp.Header.Get("Docker-Content-Digest") != rel.IndexDigest {
		t.Fatalf("the registry serves %s:%s as %s (Docker-Content-Digest %s), want the index pushed, %s",
			rel.Repo, rel.Version, got, resp.Header.Get("Docker-Content-Digest"), rel.IndexDigest)
	}

	// The release's signature verifies that index with the release's public key, offline
	// (verify-blob --insecure-ignore-tlog: the release signs without a transparency log, and the
	// signature is a file of the release, not an object in the registry, so `cosign verify`
	// would find nothing there), and does not verify anything else.
	dir := t.TempDir()
	files := map[string][]byte{"index.json": index, "index.sig": rel.IndexSig, "cosign.pub": rel.CosignPub,
		"other.json": append(bytes.Clone(index), '\n')}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(blob string) ([]byte, error) {
		return exec.Command("_output/bin/cosign", "verify-blob", "--key", filepath.Join(dir, "cosign.pub"), "--insecure-ignore-tlog",
			"--signature", filepath.Join(dir, "index.sig"), filepath.Join(dir, blob)).CombinedOutput()
	}
	if out, err := verify("index.json"); err != nil {
		t.Errorf("cosign verify-blob of the index served by the registry: %v\n%s", err, out)
	}
	if _, err := verify("other.json"); err == nil {
		t.Error("the index signature verified a changed index too")
	}
}
