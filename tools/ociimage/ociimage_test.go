package main

// Specification of ociimage, run on real static Go binaries of all four platforms: this tool's
// own main package cross-compiled (it links real modules, so its SBOM has something to list).
// The same binaries and SOURCE_DATE_EPOCH give the same index digest, another epoch another
// one; each platform's image holds exactly its binary, static, at /NAME, its entrypoint; each
// SBOM lists exactly the modules `go version -m` reports for the binary.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

var platforms = []string{"linux/amd64", "linux/arm64", "linux/ppc64le", "linux/s390x"}

var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
)

// fixtures builds this package for every platform (CGO_ENABLED=0, as `make release` builds the
// driver) once per test run; it returns the binaries by platform and the host's.
func fixtures(t *testing.T) (map[string]string, string) {
	t.Helper()
	fixtureOnce.Do(func() {
		fixtureDir, fixtureErr = os.MkdirTemp("", "ociimage-fixtures")
		if fixtureErr != nil {
			return
		}
		for _, p := range platforms {
			arch := strings.TrimPrefix(p, "linux/")
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(fixtureDir, arch, "fixture"), ".")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				fixtureErr = &buildError{p, err, out}
				return
			}
		}
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	bins := map[string]string{}
	for _, p := range platforms {
		bins[p] = filepath.Join(fixtureDir, strings.TrimPrefix(p, "linux/"), "fixture")
	}
	return bins, filepath.Join(fixtureDir, runtime.GOARCH, "fixture")
}

type buildError struct {
	platform string
	err      error
	out      []byte
}

func (e *buildError) Error() string {
	return "go build " + e.platform + ": " + e.err.Error() + "\n" + string(e.out)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

// runTool runs the host's build of ociimage (the fixture is this command) into a new layout and
// returns the layout's directory, the SBOM directory and the digest it printed.
func runTool(t *testing.T, epoch string) (layoutDir, sbomDir, digest string) {
	t.Helper()
	bins, tool := fixtures(t)
	dir := t.TempDir()
	layoutDir, sbomDir = filepath.Join(dir, "oci"), filepath.Join(dir, "sbom")
	args := []string{"-out", layoutDir, "-sbom-dir", sbomDir, "-name", "fixture", "-digest-file", filepath.Join(dir, "digest"),
		"-version", "v0.0.1-test", "-revision", "0123456789abcdef0123456789abcdef01234567"}
	for _, p := range platforms {
		args = append(args, "-binary", p+"="+bins[p])
	}
	cmd := exec.Command(tool, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+epoch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ociimage: %v\n%s", err, out)
	}
	t.Logf("ociimage:\n%s", out)
	b, err := os.ReadFile(filepath.Join(dir, "digest"))
	if err != nil {
		t.Fatal(err)
	}
	digest = strings.TrimSpace(string(b))
	if !strings.Contains(string(out), "index\t"+digest+"\n") {
		t.Errorf("printed %q, want the index digest %s", out, digest)
	}
	return layoutDir, sbomDir, digest
}

// layoutIndex is the one index a layout written by ociimage holds.
func layoutIndex(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("layout index.json lists %d manifests, want 1 (the image index)", len(m.Manifests))
	}
	idx, err := root.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestSameInputsGiveTheSameIndexDigest(t *testing.T) {
	dir1, _, d1 := runTool(t, "1700000000")
	dir2, _, d2 := runTool(t, "1700000000")
	if d1 != d2 {
		t.Errorf("two builds of the same binaries: index %s and %s", d1, d2)
	}
	for _, dir := range []string{dir1, dir2} {
		got, err := layoutIndex(t, dir).Digest()
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != d1 {
			t.Errorf("layout %s holds index %s, the tool printed %s", dir, got, d1)
		}
	}
	// The epoch reaches the images: were it ignored (a wall clock, or nothing), reproducibility
	// above would prove nothing about SOURCE_DATE_EPOCH.
	if _, _, d3 := runTool(t, "1700000001"); d3 == d1 {
		t.Errorf("another SOURCE_DATE_EPOCH gave the same index %s", d3)
	}
}

func TestEachImageHoldsItsPlatformsStaticBinaryAlone(t *testing.T) {
	bins, _ := fixtures(t)
	dir, _, _ := runTool(t, "1700000000")
	idx := layoutIndex(t, dir)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, desc := range m.Manifests {
		plat := desc.Platform.OS + "/" + desc.Platform.Architecture
		got = append(got, plat)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS+"/"+cfg.Architecture != plat {
			t.Errorf("%s: config says %s/%s", plat, cfg.OS, cfg.Architecture)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{"/fixture"}) || cfg.Created.Unix() != 1700000000 {
			t.Errorf("%s: entrypoint %q created %v", plat, cfg.Config.Entrypoint, cfg.Created)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers (%v), want 1", plat, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		hdr, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Errorf("%s: the layer holds more than one entry (%v)", plat, err)
		}
		rc.Close()
		if hdr.Name != "fixture" || hdr.Mode != 0o755 || hdr.Uid != 0 || hdr.ModTime.Unix() != 1700000000 {
			t.Errorf("%s: layer entry %q mode %o uid %d mtime %v", plat, hdr.Name, hdr.Mode, hdr.Uid, hdr.ModTime)
		}
		want, err := os.ReadFile(bins[plat])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(content, want) {
			t.Errorf("%s: the image's binary is not %s", plat, bins[plat])
		}
		// No PT_INTERP, no DT_NEEDED, and the ELF machine of plat.
		if err := checkStaticBinary(content, *desc.Platform); err != nil {
			t.Errorf("%s: %v", plat, err)
		}
	}
	if !slices.Equal(got, platforms) {
		t.Errorf("index platforms %q, want %q", got, platforms)
	}
}

// The check the tool makes before building fails on what must not go into an image: a
// dynamically linked binary (the host's ls has PT_INTERP) and another platform's binary.
func TestStaticCheckRefusesDynamicOrForeignBinaries(t *testing.T) {
	bins, _ := fixtures(t)
	ls, err := exec.LookPath("ls")
	if err != nil {
		missingTool(t, "no ls to serve as a dynamically linked binary")
	}
	b, err := os.ReadFile(ls)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStaticBinary(b, v1.Platform{OS: "linux", Architecture: runtime.GOARCH}); err == nil || !strings.Contains(err.Error(), "PT_INTERP") {
		t.Errorf("checkStaticBinary(%s) = %v, want a PT_INTERP error", ls, err)
	}
	arm, err := os.ReadFile(bins["linux/arm64"])
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStaticBinary(arm, v1.Platform{OS: "linux", Architecture: "s390x"}); err == nil {
		t.Error("an arm64 binary passed as s390x")
	}
}

// goVersionM is the modules `go version -m` reports for bin: path@version of the main module
// ("mod") and of each dependency ("dep"), a replaced one as its replacement ("=>").
func goVersionM(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "mod", "dep":
			v := ""
			if len(f) > 2 {
				v = f[2]
			}
			mods = append(mods, f[1]+"@"+v)
		case "=>":
			v := ""
			if len(f) > 2 {
				v = f[2]
			}
			mods[len(mods)-1] = f[1] + "@" + v
		}
	}
	return mods
}

func TestSBOMListsTheModulesGoVersionMReports(t *testing.T) {
	bins, _ := fixtures(t)
	_, sbomDir, _ := runTool(t, "1700000000")
	for _, p := range platforms {
		b, err := os.ReadFile(filepath.Join(sbomDir, sbomFileName("fixture", p)))
		if err != nil {
			t.Fatal(err)
		}
		var doc spdxDocument
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, pkg := range doc.Packages {
			got = append(got, pkg.Name+"@"+pkg.VersionInfo)
		}
		want := goVersionM(t, bins[p])
		if len(want) < 3 {
			t.Fatalf("%s: go version -m reports only %q: the fixture should link real modules", p, want)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: SBOM packages\n%q\ngo version -m\n%q", p, got, want)
		}
		if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2023-11-14T22:13:20Z" {
			t.Errorf("%s: spdxVersion %q created %q", p, doc.SPDXVersion, doc.CreationInfo.Created)
		}
	}
}
