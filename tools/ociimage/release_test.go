package main

// Specification of `make release VERSION=v0.1.0` without REGISTRY (hack/release.sh), run from
// the repository's root into a temporary RELEASE_OUT: the release directory is complete, its
// manifests and chart pin the image by the layout's index digest, image-subjects lists the
// layout's blobs with their sums, the SBOMs match the images,
// SHA256SUMS lists exactly the release's assets by the names a GitHub release gives them (so
// `sha256sum --check SHA256SUMS` passes in a directory of the downloaded assets), the release notes are the version's section of the changelog (testdata/CHANGELOG.md:
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
		"shared-resource-csi-0.1.0.tgz", "RELEASE_NOTES.md", "SHA256SUMS", "shared-resource.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("release lacks %s: %v", f, err)
		}
	}
	for _, p := range platforms {
		if _, err := os.Stat(filepath.Join(out, sbomFileName("shared-resource-csi", p))); err != nil {
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
	// image-subjects: every blob of the layout (the index, each platform's manifest, config and
	// layers), by its path there, with its sum, which is the digest it is named by.
	blobs, err := filepath.Glob(filepath.Join(out, "oci", "blobs", "sha256", "*"))
	if err != nil || len(blobs) == 0 {
		t.Fatalf("the layout's blobs: %v, %v", blobs, err)
	}
	var subjects strings.Builder
	for _, path := range blobs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		if filepath.Base(path) != hex.EncodeToString(h[:]) {
			t.Errorf("the layout's blob %s has the sum %x", path, h)
		}
		subjects.WriteString(hex.EncodeToString(h[:]) + "  oci/blobs/sha256/" + filepath.Base(path) + "\n")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "image-subjects")); string(b) != subjects.String() {
		t.Errorf("image-subjects is\n%s\nwant each blob of the layout by its path:\n%s", b, subjects.String())
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

	checkSums(t, out, releaseAssets(nil))

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

// releaseAssets is what a GitHub release of v0.1.0 (all platforms) attaches besides SHA256SUMS
// and its signature, by name: the files hack/release.sh writes at the top of the release
// directory for it, and extra.
func releaseAssets(extra []string) []string {
	assets := []string{"deploy.yaml", "cluster-wide-read.yaml", "shared-resource-csi-0.1.0.tgz", "shared-resource.yaml"}
	for _, p := range platforms {
		assets = append(assets, sbomFileName("shared-resource-csi", p), "kubectl-shared_resource-"+strings.ReplaceAll(p, "/", "-")+".tar.gz")
	}
	return append(assets, extra...)
}

// checkSums checks that out's SHA256SUMS lists each of assets, by that name, with its file's sum,
// and nothing else; and that `sha256sum --check SHA256SUMS`, with no flag to skip what is missing, passes
// in a directory holding only those files and SHA256SUMS, as a user who downloaded the release's
// assets has them (a GitHub release's assets have names, no directories).
func checkSums(t *testing.T, out string, assets []string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, a := range assets {
		if want[a] {
			t.Fatalf("two of the release's assets are named %s", a)
		}
		want[a] = true
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q is not \"SUM  NAME\"", line)
		}
		switch {
		case listed[name]:
			t.Errorf("SHA256SUMS lists %s twice", name)
		case strings.Contains(name, "/"):
			t.Errorf("SHA256SUMS lists %s, a path no release asset has (assets have names, no directories)", name)
		case !want[name]:
			t.Errorf("SHA256SUMS lists %s, which is not one of the release's assets", name)
		default:
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Errorf("SHA256SUMS lists %s: %v", name, err)
			} else if h := sha256.Sum256(b); sum != hex.EncodeToString(h[:]) {
				t.Errorf("SHA256SUMS lists %s as %s, it is %x", name, sum, h)
			}
		}
		listed[name] = true
	}
	for _, a := range assets {
		if !listed[a] {
			t.Errorf("SHA256SUMS does not list the asset %s", a)
		}
	}

	// The downloaded assets, flat, and sha256sum itself.
	downloads := t.TempDir()
	for _, name := range append(assets, "SHA256SUMS") {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(downloads, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := exec.Command("sha256sum", "--check", "SHA256SUMS")
	check.Dir = downloads
	if b, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum --check SHA256SUMS in a directory of the downloaded assets: %v\n%s", err, b)
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
	// The signatures are assets too: SHA256SUMS lists them (not its own).
	checkSums(t, out, releaseAssets([]string{"cosign.pub", "index.sig", "shared-resource-csi-0.1.0.tgz.sig"}))
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
