package main

// Specification of --version: the binary built as `make build` builds it prints the version and
// commit it was stamped with and the Go version that built it, and exits 0 without starting the
// driver (no socket, no API server).

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestVersionFlagPrintsStampedVersionCommitAndGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// Values no default could produce, so the test fails if the stamping does not reach the binary.
	const stampVersion, stampCommit = "v9.8.7-test.1", "0123456789abcdef0123456789abcdef01234567"
	bin := filepath.Join(t.TempDir(), "shared-resource-csi")
	build := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-X main.version="+stampVersion+" -X main.commit="+stampCommit, "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = []string{} // no NODE_NAME, no KUBECONFIG: --version must need none of them
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v (want exit 0)\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		"shared-resource-csi " + stampVersion + "\n",
		"commit: " + stampCommit + "\n",
		"go: " + runtime.Version() + " ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("--version printed %q, want it to contain %q", got, want)
		}
	}
}

// An unstamped build names no made-up commit: "unknown" unless Go recorded vcs.revision.
func TestVersionTextUnstamped(t *testing.T) {
	if commit != "" {
		t.Skip("test binary was stamped")
	}
	txt := versionText()
	if !strings.HasPrefix(txt, "shared-resource-csi "+version+"\n") || !strings.Contains(txt, "go: "+runtime.Version()) {
		t.Errorf("versionText() = %q", txt)
	}
}
