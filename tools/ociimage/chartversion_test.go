package main

// Specification of the chart version hack/manifests.sh derives from the tree's version (git
// describe): a release tag's SemVer without its "v"; "dev" (the committed chart's, an unstamped
// build's) 0.0.0-dev; anything else (a bare commit, commits past a tag, a dirty tree) a 0.0.0-dev
// pre-release, which SemVer 2 accepts and sorts below every release. make release depends on
// it: helm refuses to package a chart whose version is not SemVer.

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// semver2 is the regular expression semver.org gives for SemVer 2.0.0.
var semver2 = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

func TestChartVersionOfTheTreesVersion(t *testing.T) {
	for describe, want := range map[string]string{
		"v0.1.0":              "0.1.0",
		"v1.2.3-rc.1":         "1.2.3-rc.1",
		"2cf9b0c":             "0.0.0-dev.2cf9b0c",
		"0123456":             "0.0.0-dev.g0123456", // all digits with a leading zero is not SemVer
		"v0.1.0-3-gabc1234":   "0.0.0-dev.v0-1-0-3-gabc1234",
		"v0.1.0-dirty":        "0.0.0-dev.v0-1-0-dirty",
		"2cf9b0c-dirty":       "0.0.0-dev.2cf9b0c-dirty",
		"v0.1.0-3-gabc-dirty": "0.0.0-dev.v0-1-0-3-gabc-dirty",
		"dev":                 "0.0.0-dev", // the committed chart: an unstamped build
	} {
		out, err := exec.Command("../../hack/manifests.sh", "--chart-version", describe).Output()
		if err != nil {
			t.Fatalf("manifests.sh --chart-version %s: %v", describe, err)
		}
		got := strings.TrimSpace(string(out))
		if got != want {
			t.Errorf("chart version of %s: %q, want %q", describe, got, want)
		}
		if !semver2.MatchString(got) {
			t.Errorf("chart version of %s: %q is not SemVer 2", describe, got)
		}
	}
}
