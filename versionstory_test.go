package main

// Specification of the version the tree tells: one story in CHANGELOG.md, the READMEs, the chart,
// deploy.yaml and --version. The committed chart is the unreleased one: its appVersion and image
// tag are an unstamped binary's --version ("dev") and its version what hack/manifests.sh makes of
// that; releases stamp a copy (`make release`). Until CHANGELOG.md has a released section, both
// READMEs say no release is published, and nothing names an upgrade from a release that does not
// exist. Files only, and hack/manifests.sh for the version mapping.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const noReleaseYet = "No release is published yet"

func TestTreeTellsOneVersionStory(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &chart)
	tag, _ := valueAt(t, "image.tag").(string)

	if chart.AppVersion != version || tag != version {
		t.Errorf("the committed chart's appVersion %q and image.tag %q, want an unstamped build's --version %q (releases stamp a copy)",
			chart.AppVersion, tag, version)
	}
	out, err := exec.Command("hack/manifests.sh", "--chart-version", chart.AppVersion).Output()
	if err != nil {
		t.Fatalf("hack/manifests.sh --chart-version: %v", err)
	}
	if want := strings.TrimSpace(string(out)); chart.Version != want {
		t.Errorf("Chart.yaml version %q, want %q, what hack/manifests.sh makes of appVersion %q", chart.Version, want, chart.AppVersion)
	}
	deploy, err := os.ReadFile("deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	images := regexp.MustCompile(`(?m)^\s+image: (\S+)$`).FindAllStringSubmatch(string(deploy), -1)
	for _, im := range images {
		if !strings.HasSuffix(im[1], ":"+tag) {
			t.Errorf("deploy.yaml runs %s, not the chart's tag %q", im[1], tag)
		}
	}
	if len(images) == 0 {
		t.Error("deploy.yaml names no image")
	}

	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	var released []string
	for _, m := range regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatch(string(changelog), -1) {
		if m[1] != "Unreleased" {
			released = append(released, m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^### Upgrading from (.*)$`).FindAllStringSubmatch(string(changelog), -1) {
		if v := regexp.MustCompile(`\d+\.\d+\.\d+\S*`).FindString(m[1]); v != "" && !strings.Contains(string(changelog), "## ["+v+"]") {
			t.Errorf("CHANGELOG.md tells how to upgrade from %s, which has no section (was never released)", v)
		}
	}
	for _, readme := range []string{"README.md", chartReadme} {
		b, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		says := strings.Contains(string(b), noReleaseYet)
		if len(released) == 0 && !says {
			t.Errorf("%s does not say %q, and CHANGELOG.md has no released section", readme, noReleaseYet)
		}
		if len(released) > 0 && says {
			t.Errorf("%s says %q, but CHANGELOG.md has released %v", readme, noReleaseYet, released)
		}
	}
}

// readYAML decodes the YAML file into v.
func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
