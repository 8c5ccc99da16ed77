package framework

// Specification of ReadReadmeInstall: README.md's install lines are found as the pod suite runs
// them, and they agree with each other (the helm line installs the chart version the make line
// releases, from the registry it pushes to), without a cluster. The pod suite runs them
// (TestPodsInstalledFromTheRegistry).

import (
	"os"
	"strings"
	"testing"
)

func TestReadmeInstallLinesAgree(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	in, err := ReadReadmeInstall()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(in.Helm, " --version "+strings.TrimPrefix(in.Version, "v")) {
		t.Errorf("README.md's helm line %q does not install the chart version `make release VERSION=%s` packages (%s)",
			in.Helm, in.Version, strings.TrimPrefix(in.Version, "v"))
	}
	// A version without a CHANGELOG section of its own must be a pre-release, which
	// hack/release.sh gives the notes of [Unreleased].
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "\n## ["+strings.TrimPrefix(in.Version, "v")+"]") && !strings.Contains(in.Version, "-") {
		t.Errorf("README.md releases %s, which has no CHANGELOG.md section and is not a pre-release: make release refuses it", in.Version)
	}
}
