package main

// Specification of -push: the index goes to a registry (here go-containerregistry's in-memory
// registry behind a plain-HTTP test server, hence -insecure) with the digest the layout has, and
// every platform's image can be pulled back from it.

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushWritesTheIndexToARegistry(t *testing.T) {
	bins, tool := fixtures(t)
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/team/fixture:v0.0.1-test"

	dir := t.TempDir()
	args := []string{"-out", filepath.Join(dir, "oci"), "-name", "fixture", "-digest-file", filepath.Join(dir, "digest"),
		"-push", ref, "-insecure"}
	for _, p := range platforms {
		args = append(args, "-binary", p+"="+bins[p])
	}
	cmd := exec.Command(tool, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ociimage -push: %v\n%s", err, out)
	}
	want, err := os.ReadFile(filepath.Join(dir, "digest"))
	if err != nil {
		t.Fatal(err)
	}

	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	got, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != strings.TrimSpace(string(want)) {
		t.Errorf("the registry's %s is %s, the layout's index %s", ref, got, want)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != len(platforms) {
		t.Fatalf("the pushed index lists %d images, want %d", len(m.Manifests), len(platforms))
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := img.Layers(); err != nil {
			t.Errorf("%s: %v", d.Platform, err)
		}
	}
}
