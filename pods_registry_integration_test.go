//go:build integration

package main

// The pod suite's driver, installed from the local cluster's registry (hack/cluster.sh starts
// distribution's registry on the node IP, TLS with a cluster-CA certificate; SRCSI_REGISTRY and
// SRCSI_REGISTRY_CA name it): `make release` pushes the image index and the chart there, as a
// maintainer pushes a release, and `helm install oci://...` installs it, as a user does; the node
// pulls the image the chart pins by digest. Nothing of the driver is imported into the node.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// registryPath is where the pod suite's test releases go in the cluster's registry.
const registryPath = "srcsi-e2e"

// testRelease is a release `make release` pushed to the cluster's registry.
type testRelease struct {
	version      string // vX.Y.Z-e2e.<commit>
	chartVersion string // the packaged chart's version
	repo         string // REGISTRY/srcsi-e2e/shared-resource-csi
	indexDigest  string // the pushed image index
	indexSig     []byte // cosign's signature of the index (make release COSIGN_KEY=...)
	cosignPub    []byte // the key pair's public key, as the release ships it
	took         time.Duration
}

// image is the reference the released chart's DaemonSet names: tag and index digest.
func (r *testRelease) image() string { return r.repo + ":" + r.version + "@" + r.indexDigest }

// chartArgs name the released chart for helm install/upgrade: from the registry, by version,
// trusting the cluster CA.
func (r *testRelease) chartArgs(reg, ca string) []string {
	return []string{"oci://" + reg + "/" + registryPath + "/charts/shared-resource-csi", "--version", r.chartVersion, "--ca-file", ca}
}

// deployFromRegistry releases the driver into the cluster's registry and installs that release's
// chart, with only the suite's relist interval set (the image is the chart's own, pinned by digest).
func deployFromRegistry(s *podSuite, reg string) (*podSuite, error) {
	ca := os.Getenv("SRCSI_REGISTRY_CA")
	if ca == "" {
		return nil, fmt.Errorf("$SRCSI_REGISTRY is set but $SRCSI_REGISTRY_CA is not (hack/cluster.sh writes both)")
	}
	rel, err := releaseToRegistry(reg, ca, "v0.1.0")
	if err != nil {
		return nil, err
	}
	s.release, s.image, s.chart = rel, rel.image(), rel.chartArgs(reg, ca)
	start := time.Now()
	// upgrade --install --take-ownership: the harness applied deploy.yaml's other objects with
	// `kubectl apply --server-side` before; Helm takes them over, as when an admin moves from
	// deploy.yaml to the chart.
	if err := s.helm(append(append([]string{"upgrade", "--install", "--take-ownership", "--force-conflicts", "shared-resource-csi"},
		s.chart...), "--set", "driver.relistInterval="+podsRelist.String())...); err != nil {
		return nil, err
	}
	if _, err := s.waitDriver(context.Background(), "", 2*time.Minute); err != nil {
		return nil, err
	}
	fmt.Printf("pods suite: %s released to %s in %v (build and push, linux/%s only); helm install to driver Ready: %v\n",
		rel.version, rel.repo, rel.took.Round(100*time.Millisecond), runtime.GOARCH, time.Since(start).Round(100*time.Millisecond))
	return s, nil
}

// releaseToRegistry runs `make release` for base-e2e.<commit> into the cluster's registry, the
// image for the node's platform only (the four-platform release is tools/ociimage's tests' job),
// signed with a fresh cosign key pair, its notes from a changelog of its own (a test version has
// no section in CHANGELOG.md).
func releaseToRegistry(reg, ca, base string) (*testRelease, error) {
	commit, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return nil, fmt.Errorf("git rev-parse: %v", err)
	}
	rel := &testRelease{version: base + "-e2e." + strings.TrimSpace(string(commit)), repo: reg + "/" + registryPath + "/shared-resource-csi"}
	dir, err := os.MkdirTemp("", "srcsi-release")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cosign, err := filepath.Abs("_output/bin/cosign")
	if err != nil {
		return nil, err
	}
	password := "COSIGN_PASSWORD=" + randSuffix()
	gen := exec.Command(cosign, "generate-key-pair")
	gen.Dir, gen.Env = dir, append(os.Environ(), password)
	if out, err := gen.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cosign generate-key-pair (make test builds cosign): %v\n%s", err, out)
	}
	changelog := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte("# Changelog\n\n## ["+strings.TrimPrefix(rel.version, "v")+
		"]\n\nA test release of the pod suite (pods_registry_integration_test.go).\n"), 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "out")
	start := time.Now()
	cmd := exec.Command("make", "release", "VERSION="+rel.version, "REGISTRY="+reg+"/"+registryPath, "RELEASE_OUT="+out)
	cmd.Env = append(os.Environ(), "PLATFORMS=linux/"+runtime.GOARCH, "CHANGELOG="+changelog, "REGISTRY_CA_FILE="+ca,
		"REGISTRY_INSECURE=0", "COSIGN_KEY="+filepath.Join(dir, "cosign.key"), password)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make release: %v\n%s", err, b)
	}
	rel.took = time.Since(start)
	digest, err := os.ReadFile(filepath.Join(out, "index-digest"))
	if err != nil {
		return nil, err
	}
	rel.indexDigest = strings.TrimSpace(string(digest))
	charts, _ := filepath.Glob(filepath.Join(out, "shared-resource-csi-*.tgz"))
	if len(charts) != 1 {
		return nil, fmt.Errorf("make release packaged %d charts, want 1: %v", len(charts), charts)
	}
	rel.chartVersion = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(charts[0]), "shared-resource-csi-"), ".tgz")
	if rel.indexSig, err = os.ReadFile(filepath.Join(out, "index.sig")); err != nil {
		return nil, err
	}
	if rel.cosignPub, err = os.ReadFile(filepath.Join(out, "cosign.pub")); err != nil {
		return nil, err
	}
	return rel, nil
}

// prepareUpgrade readies a `helm upgrade` that rolls the driver, and returns it: from the
// registry, to a newer release (another version, so another binary and index digest), pushed
// here so the upgrade itself is only Helm's, as a user upgrades; without the registry, a changed
// value of this tree's chart.
func (s *podSuite) prepareUpgrade() (func() error, error) {
	if s.release == nil {
		return func() error { return s.helmUpgrade("--set", "driver.logLevel=3") }, nil
	}
	reg, ca := os.Getenv("SRCSI_REGISTRY"), os.Getenv("SRCSI_REGISTRY_CA")
	rel, err := releaseToRegistry(reg, ca, "v0.1.1")
	if err != nil {
		return nil, err
	}
	if rel.indexDigest == s.release.indexDigest {
		return nil, fmt.Errorf("release %s has the index digest of %s (%s): the upgrade would change nothing", rel.version, s.release.version, rel.indexDigest)
	}
	fmt.Printf("pods suite: %s released to %s in %v for the upgrade\n", rel.version, rel.repo, rel.took.Round(100*time.Millisecond))
	return func() error {
		s.release, s.image, s.chart = rel, rel.image(), rel.chartArgs(reg, ca)
		return s.helmUpgrade()
	}, nil
}

// helmUpgrade upgrades the release to s.chart, keeping the values set so far and adding values.
func (s *podSuite) helmUpgrade(values ...string) error {
	return s.helm(append(append([]string{"upgrade", "shared-resource-csi"}, s.chart...), append([]string{"--reset-then-reuse-values"}, values...)...)...)
}

// checkPulledFromRelease: the driver pod runs the released image, pulled from the registry. The
// kubelet's imageID is what containerd's CRI reports as the image's reference: the first of the
// image's repo digests, REPO@DIGEST with the digest it was pulled by. The chart names the image
// by the index digest, so that is the digest, not the linux/amd64 manifest's the node went on to
// fetch (nor the config digest containerd uses as image ID). An imported image has no repo
// digest in that repository, so this also tells that the node pulled it.
func (s *podSuite) checkPulledFromRelease(pod *corev1.Pod) error {
	if len(pod.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("driver pod %s has no container status", pod.Name)
	}
	if got, want := pod.Status.ContainerStatuses[0].ImageID, s.release.repo+"@"+s.release.indexDigest; got != want {
		return fmt.Errorf("driver pod %s: imageID %q, want %q (the index %s pushed)", pod.Name, got, want, s.release.version)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// 0. Installed from the registry: the driver runs the image the release pushed, pulled by the
// node through the index digest the chart pins, and the index in the registry is the one the
// release's cosign signature signs.

func TestPodsInstalledFromTheRegistry(t *testing.T) {
	if os.Getenv("SRCSI_REGISTRY") == "" {
		if os.Getenv("CI") != "" || os.Getenv("SRCSI_CLUSTER_DIR") != "" {
			t.Fatal("$SRCSI_REGISTRY is not set: hack/cluster.sh up writes it into the cluster env")
		}
		t.Skip("no registry in this cluster (hack/e2e-kind.sh imports the image)")
	}
	s := podsEnv(t, podsShared)
	rel, ca := s.release, os.Getenv("SRCSI_REGISTRY_CA")
	if rel == nil {
		t.Fatal("the suite did not install the driver from the registry (SRCSI_DRIVER_IMAGE set?)")
	}
	pod, err := s.driverPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Image; got != rel.image() {
		t.Errorf("the chart's image is %s, want the release's %s", got, rel.image())
	}
	if err := s.checkPulledFromRelease(pod); err != nil {
		t.Error(err)
	}
	t.Logf("driver pod %s: image %s, imageID %s", pod.Name, pod.Spec.Containers[0].Image, pod.Status.ContainerStatuses[0].ImageID)

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
	repoPath := strings.TrimPrefix(rel.repo, os.Getenv("SRCSI_REGISTRY")+"/")
	req, err := http.NewRequest(http.MethodGet, "https://"+os.Getenv("SRCSI_REGISTRY")+"/v2/"+repoPath+"/manifests/"+rel.version, nil)
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
		t.Fatalf("GET the manifest of %s:%s: %s %v\n%s", rel.repo, rel.version, resp.Status, err, index)
	}
	sum := sha256.Sum256(index)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != rel.indexDigest || resp.Header.Get("Docker-Content-Digest") != rel.indexDigest {
		t.Fatalf("the registry serves %s:%s as %s (Docker-Content-Digest %s), want the index pushed, %s",
			rel.repo, rel.version, got, resp.Header.Get("Docker-Content-Digest"), rel.indexDigest)
	}

	// The release's signature verifies that index with the release's public key, offline
	// (verify-blob --insecure-ignore-tlog: the release signs without a transparency log, and the
	// signature is a file of the release, not an object in the registry, so `cosign verify`
	// would find nothing there), and does not verify anything else.
	dir := t.TempDir()
	files := map[string][]byte{"index.json": index, "index.sig": rel.indexSig, "cosign.pub": rel.cosignPub,
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
