package main

// Specification of `make release VERSION=v0.1.0` without REGISTRY (hack/release.sh), run from
// the repository's root into a temporary RELEASE_OUT: the release directory is complete, its
// manifests and chart pin the image by the layout's index digest, the SBOMs and SHA256SUMS match
// the files, the release notes are the version's section of the changelog (testdata/CHANGELOG.md:
// the tests' own) and the chart's Artifact Hub changes, and the host platform's image binary says
// it is v0.1.0; with COSIGN_KEY the index and SHA256SUMS are signed. Skipped with -short: it
// cross-compiles the driver four times (minutes cold, seconds from Go's build cache).

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestMakeReleaseWritesACompleteRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a whole release")
	}
	if _, err := os.Stat("../../_output/bin/helm"); err != nil {
		missingTool(t, "no _output/bin/helm: run `make helm` first (the release packages the chart with it)")
	}
	out := makeRelease(t)

	for _, f := range []string{"oci/oci-layout", "oci/index.json", "index-digest", "deploy.yaml", "cluster-wide-read.yaml",
		"shared-resource-csi-0.1.0.tgz", "RELEASE_NOTES.md", "SHA256SUMS", "krew/shared-resource.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("release lacks %s: %v", f, err)
		}
	}
	for _, p := range platforms {
		if _, err := os.Stat(filepath.Join(out, "sbom", sbomFileName("shared-resource-csi", p))); err != nil {
			t.Errorf("release lacks the SBOM of %s: %v", p, err)
		}
		if _, err := os.Stat(filepath.Join(out, "kubectl-shared_resource-"+strings.ReplaceAll(p, "/", "-")+".tar.gz")); err != nil {
			t.Errorf("release lacks the kubectl plugin of %s: %v", p, err)
		}
	}

	idx := layoutIndex(t, filepath.Join(out, "oci"))
	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "index-digest")); strings.TrimSpace(string(b)) != digest.String() {
		t.Errorf("index-digest %q, layout's index %s", b, digest)
	}
	pinned := "image: ghcr.io/shared-resource/shared-resource-csi:v0.1.0@" + digest.String() + "\n"
	if b, _ := os.ReadFile(filepath.Join(out, "deploy.yaml")); !strings.Contains(string(b), pinned) {
		t.Errorf("deploy.yaml does not pin %q", pinned)
	}
	// The packaged chart's Chart.yaml (helm package rewrites it: its own key order and quoting) and
	// values.yaml (as stamped).
	packaged := func(file string) []byte {
		b, err := exec.Command("tar", "-xzOf", filepath.Join(out, "shared-resource-csi-0.1.0.tgz"), "shared-resource-csi/"+file).Output()
		if err != nil {
			t.Fatalf("the packaged chart's %s: %v", file, err)
		}
		return b
	}
	chartYAML := packaged("Chart.yaml")
	var c struct {
		Version     string            `yaml:"version"`
		AppVersion  string            `yaml:"appVersion"`
		Annotations map[string]string `yaml:"annotations"`
	}
	var v struct {
		Image struct{ Repository, Tag string } `yaml:"image"`
	}
	if err := yaml.Unmarshal(chartYAML, &c); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(packaged("values.yaml"), &v); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ name, got, want string }{
		{"version", c.Version, "0.1.0"},
		{"appVersion", c.AppVersion, "v0.1.0"},
		{"image.tag", v.Image.Tag, "v0.1.0@" + digest.String()},
		{"image.repository", v.Image.Repository, "ghcr.io/shared-resource/shared-resource-csi"},
	} {
		if f.got != f.want {
			t.Errorf("the packaged chart's %s is %q, want %q", f.name, f.got, f.want)
		}
	}
	// The chart's Artifact Hub annotations: the image it pins, a release (not a pre-release), and
	// the release notes as its list of changes.
	if want := "image: ghcr.io/shared-resource/shared-resource-csi@" + digest.String(); !strings.Contains(c.Annotations["artifacthub.io/images"], want) {
		t.Errorf("artifacthub.io/images %q, want %q", c.Annotations["artifacthub.io/images"], want)
	}
	if c.Annotations["artifacthub.io/prerelease"] != "false" {
		t.Errorf("artifacthub.io/prerelease %q for v0.1.0, want false", c.Annotations["artifacthub.io/prerelease"])
	}
	var changes []struct{ Kind, Description string }
	if err := yaml.Unmarshal([]byte(c.Annotations["artifacthub.io/changes"]), &changes); err != nil {
		t.Fatalf("artifacthub.io/changes: %v\n%s", err, c.Annotations["artifacthub.io/changes"])
	}
	if len(changes) != 1 || changes[0].Kind != "added" || changes[0].Description != "The release notes of the test release 0.1.0." {
		t.Errorf("artifacthub.io/changes %+v, want testdata/CHANGELOG.md's one entry of 0.1.0", changes)
	}

	if b, _ := os.ReadFile(filepath.Join(out, "RELEASE_NOTES.md")); !strings.Contains(string(b), "The release notes of the test release 0.1.0.") ||
		strings.Contains(string(b), "Not in the release notes") {
		t.Errorf("RELEASE_NOTES.md is not testdata/CHANGELOG.md's 0.1.0 section:\n%s", b)
	}

	// SHA256SUMS lists every other file, with its sum.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", line)
		}
		listed[name] = sum
	}
	err = filepath.Walk(out, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, path)
		if rel == "SHA256SUMS" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		if listed[rel] != hex.EncodeToString(h[:]) {
			t.Errorf("SHA256SUMS: %s listed %q, is %x", rel, listed[rel], h)
		}
		delete(listed, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) > 0 {
		t.Errorf("SHA256SUMS lists files the release lacks: %v", listed)
	}

	// The host's image runs: its binary prints the release's version.
	if runtime.GOOS != "linux" {
		return
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range m.Manifests {
		if desc.Platform.Architecture != runtime.GOARCH {
			continue
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		if _, err := tr.Next(); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(t.TempDir(), "shared-resource-csi")
		f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
		rc.Close()
		v, err := exec.Command(bin, "--version").Output()
		if err != nil || !strings.HasPrefix(string(v), "shared-resource-csi v0.1.0\n") {
			t.Errorf("the %s image's binary --version: %q, %v", runtime.GOARCH, v, err)
		}
	}
}

// makeRelease runs `make release VERSION=v0.1.0` into a new directory, with testdata/CHANGELOG.md,
// the environment's REGISTRY (it would push) and COSIGN_* removed and extra added, and returns
// the directory.
func makeRelease(t *testing.T, extra ...string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("make", "-C", "../..", "release", "VERSION=v0.1.0", "RELEASE_OUT="+out)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "REGISTRY=") && !strings.HasPrefix(e, "COSIGN_") && !strings.HasPrefix(e, "CHANGELOG=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	changelog, err := filepath.Abs("testdata/CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, "CHANGELOG="+changelog)
	cmd.Env = append(cmd.Env, extra...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, b)
	}
	t.Logf("make release:\n%s", b)
	return out
}

// With COSIGN_KEY, the index and SHA256SUMS are signed with that key, and the signatures verify
// with the public key the release ships, and only for what they sign; so is the packaged chart.
func TestMakeReleaseSignsWithAKeyPair(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a whole release")
	}
	cosign, err := filepath.Abs("../../_output/bin/cosign")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cosign); err != nil {
		missingTool(t, "no _output/bin/cosign: run `make cosign` (a long build, so no test builds it)")
	}
	keys := t.TempDir()
	gen := exec.Command(cosign, "generate-key-pair")
	gen.Dir = keys
	gen.Env = append(os.Environ(), "COSIGN_PASSWORD=test-password")
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, b)
	}
	out := makeRelease(t, "COSIGN_KEY="+filepath.Join(keys, "cosign.key"), "COSIGN_PASSWORD=test-password")

	digest, err := os.ReadFile(filepath.Join(out, "index-digest"))
	if err != nil {
		t.Fatal(err)
	}
	indexBlob := filepath.Join(out, "oci", "blobs", "sha256", strings.TrimPrefix(strings.TrimSpace(string(digest)), "sha256:"))
	verify := func(sig, blob string) error {
		return exec.Command(cosign, "verify-blob", "--key", filepath.Join(out, "cosign.pub"), "--insecure-ignore-tlog",
			"--signature", filepath.Join(out, sig), blob).Run()
	}
	if err := verify("index.sig", indexBlob); err != nil {
		t.Errorf("index.sig does not verify the index %s: %v", digest, err)
	}
	charts, _ := filepath.Glob(filepath.Join(out, "shared-resource-csi-*.tgz"))
	if len(charts) != 1 {
		t.Fatalf("packaged charts: %v, want one", charts)
	}
	if err := verify(filepath.Base(charts[0])+".sig", charts[0]); err != nil {
		t.Errorf("the chart's signature does not verify it: %v", err)
	}
	if err := verify(filepath.Base(charts[0])+".sig", indexBlob); err == nil {
		t.Error("the chart's signature verified the index too")
	}
	if err := verify("SHA256SUMS.sig", filepath.Join(out, "SHA256SUMS")); err != nil {
		t.Errorf("SHA256SUMS.sig does not verify SHA256SUMS: %v", err)
	}
	if err := verify("index.sig", filepath.Join(out, "SHA256SUMS")); err == nil {
		t.Error("index.sig verified SHA256SUMS too")
	}
	pub, err := os.ReadFile(filepath.Join(keys, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if shipped, _ := os.ReadFile(filepath.Join(out, "cosign.pub")); !bytes.Equal(shipped, pub) {
		t.Error("the release's cosign.pub is not the key pair's public key")
	}
}

// missingTool skips a test whose tool is not built, on a developer's machine; in CI (CI set, as
// .ci/run and the workflows have it) it fails: `make test` builds the tools first, so a missing
// one is a broken build, never a reason to pass without the test.
func missingTool(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}
