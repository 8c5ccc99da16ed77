package main

// Specification of the kubectl plugin `make release` ships: an archive per platform and krew's
// manifest of them (shared-resource.yaml), checked by krew itself, built from the Go module
// proxy (hack/build-tools.sh krew): its manifest validation (validate-krew-manifest) accepts the
// manifest, and `kubectl krew install --manifest --archive` installs the host platform's archive,
// after checking it against the manifest's sha256; a real kubectl (the local cluster's, built by
// `make tools-main`) then finds the installed plugin on $PATH (krew's bin dir alone) and runs
// `kubectl shared-resource diagnose --help` through it, with no cluster.

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// krewManifest is the part of krew's Plugin (sigs.k8s.io/krew/pkg/index) this test reads.
type krewManifest struct {
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Version   string `yaml:"version"`
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			URI    string `yaml:"uri"`
			Sha256 string `yaml:"sha256"`
			Bin    string `yaml:"bin"`
		} `yaml:"platforms"`
	} `yaml:"spec"`
}

func TestMakeReleaseWritesAKrewPluginThatKrewInstalls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a whole release")
	}
	krew, err := filepath.Abs("../../_output/bin/kubectl-krew")
	if err != nil {
		t.Fatal(err)
	}
	validate, _ := filepath.Abs("../../_output/bin/validate-krew-manifest")
	for _, tool := range []string{krew, validate} {
		if _, err := os.Stat(tool); err != nil {
			missingTool(t, "no "+tool+": run `hack/build-tools.sh krew`")
		}
	}
	kubectl := kubectlBinary(t)
	// The host's platform, another krew runs on, and one it does not.
	other := "arm64"
	if runtime.GOARCH == other {
		other = "amd64"
	}
	out := makeRelease(t, "PLATFORMS=linux/"+runtime.GOARCH+" linux/"+other+" linux/s390x")
	manifest := filepath.Join(out, "shared-resource.yaml")

	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", manifest, err)
	}
	if m.Metadata.Name != "shared-resource" || m.Spec.Version != "v0.1.0" || len(m.Spec.Platforms) != 2 {
		t.Errorf("krew manifest: name %q, version %q, %d platforms; want shared-resource, v0.1.0, 2 (%s and %s; krew does not run on s390x)",
			m.Metadata.Name, m.Spec.Version, len(m.Spec.Platforms), runtime.GOARCH, other)
	}
	if _, err := os.Stat(filepath.Join(out, "kubectl-shared_resource-linux-s390x.tar.gz")); err != nil {
		t.Errorf("the release lacks the s390x plugin archive (for installing by hand): %v", err)
	}
	for _, p := range m.Spec.Platforms {
		archive := "kubectl-shared_resource-linux-" + p.Selector.MatchLabels["arch"] + ".tar.gz"
		if want := "https://github.com/shared-resource/csi-driver/releases/download/v0.1.0/" + archive; p.URI != want {
			t.Errorf("platform %v: uri %s, want %s", p.Selector.MatchLabels, p.URI, want)
		}
		if _, err := os.Stat(filepath.Join(out, archive)); err != nil {
			t.Errorf("the release lacks %s, which the manifest names: %v", archive, err)
		}
	}

	// krew's own validation of a manifest (what krew-index runs on a submitted plugin); it cannot
	// download the archives here, so installing is the next step's.
	if b, err := exec.Command(validate, "-manifest", manifest, "-skip-install").CombinedOutput(); err != nil {
		t.Fatalf("validate-krew-manifest refuses the manifest: %v\n%s", err, b)
	}

	// krew installs the host's archive from the manifest into a krew root of the test's own.
	root := t.TempDir()
	// An environment of its own, nothing of the caller's: krew, kubectl and the plugin read
	// settings from their environment (kubectl a KUBERC of aliases and default flags).
	env := []string{"KREW_ROOT=" + root, "KREW_NO_UPGRADE_CHECK=1", "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "KUBECTL_KUBERC=false"}
	install := exec.Command(krew, "install", "--manifest="+manifest,
		"--archive="+filepath.Join(out, "kubectl-shared_resource-linux-"+runtime.GOARCH+".tar.gz"))
	install.Env = env
	if b, err := install.CombinedOutput(); err != nil {
		t.Fatalf("kubectl krew install: %v\n%s", err, b)
	}
	// Another platform's archive does not match the host's sha256: krew refuses it.
	wrong := exec.Command(krew, "install", "--manifest="+manifest, "--archive="+filepath.Join(out, "kubectl-shared_resource-linux-"+other+".tar.gz"))
	wrong.Env = slices.Concat(env, []string{"KREW_ROOT=" + t.TempDir()})
	if b, err := wrong.CombinedOutput(); err == nil {
		t.Errorf("kubectl krew install took the %s archive for %s:\n%s", other, runtime.GOARCH, b)
	}
	// kubectl runs a plugin as kubectl-<name, - as _> found on $PATH, with the words after it:
	// with krew's bin dir alone on $PATH, the plugin kubectl finds is the one krew installed.
	bin := filepath.Join(root, "bin")
	kubectlEnv := slices.Concat(env, []string{"PATH=" + bin, "KUBECONFIG=" + filepath.Join(t.TempDir(), "none")})
	run := func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, args...)
		cmd.Env = kubectlEnv
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if list, err := run("plugin", "list"); err != nil || !strings.Contains(list, filepath.Join(bin, "kubectl-shared_resource")) {
		t.Errorf("kubectl plugin list does not show krew's kubectl-shared_resource (%v):\n%s", err, list)
	}
	help, err := run("shared-resource", "diagnose", "--help")
	if err != nil && !strings.Contains(help, "-kubeconfig") {
		t.Fatalf("kubectl shared-resource diagnose --help: %v\n%s", err, help)
	}
	for _, want := range []string{"-kubeconfig", "-output"} {
		if !strings.Contains(help, want) {
			t.Errorf("kubectl shared-resource diagnose --help, installed by krew, lacks %s:\n%s", want, help)
		}
	}
	if usage, _ := run("shared-resource"); !strings.Contains(usage, "Usage: kubectl shared-resource COMMAND") {
		t.Errorf("kubectl shared-resource, installed by krew, is not the plugin:\n%s", usage)
	}
	licence, err := filepath.Glob(filepath.Join(root, "store", "shared-resource", "v0.1.0", "LICENSE"))
	if err != nil || len(licence) != 1 {
		t.Errorf("krew did not install the LICENSE (%v)", err)
	}
}

// kubectlBinary is the kubectl of the newest Kubernetes minor the local cluster builds
// (_output/bin/k8s-1.NN/kubectl, `make tools-main`), or $KUBECTL.
func kubectlBinary(t *testing.T) string {
	t.Helper()
	if k := os.Getenv("KUBECTL"); k != "" {
		return k
	}
	found, _ := filepath.Glob("../../_output/bin/k8s-1.*/kubectl")
	minor := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(p)), "k8s-1."))
		return n
	}
	slices.SortFunc(found, func(a, b string) int { return minor(b) - minor(a) })
	if len(found) == 0 {
		missingTool(t, "no kubectl in _output/bin/k8s-1.*/: run `make tools-main`, or set KUBECTL")
	}
	k, err := filepath.Abs(found[0])
	if err != nil {
		t.Fatal(err)
	}
	return k
}
