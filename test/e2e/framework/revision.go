package framework

// Another commit's driver in the cluster's registry: the binary a node would run after an upgrade
// from, or a rollback to, that commit's release, beside this tree's (test/e2e/swap).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// releaseRecipe is what of this tree makes a release out of a tree's Go sources: the script
// `make release` runs, what it calls, the chart it packages and the licence the image carries.
// An older commit's Go sources are released with these, so that the binary is the only thing
// that differs from this tree's release: same build flags, same image layout, same chart.
var releaseRecipe = []string{
	"hack/release.sh",
	"hack/manifests.sh",
	"hack/deploy-header.yaml",
	"hack/lib",
	"charts/shared-resource-csi",
	"LICENSE",
}

// ReleaseRevision releases the driver of rev, a commit of this repository, into the cluster's
// registry as v0.1.0-rev.g<its short hash>: a temporary `git worktree` of rev, this tree's
// releaseRecipe copied over its own, and `make release`'s script run there with this tree's helm,
// ociimage and cosign (as `make release` runs it, for the node's platform only). The chart it
// pushes is this tree's, naming the image built from rev's sources. rev's modules must be in the
// module cache: the cluster's network namespace has no route out (make test-swap downloads them).
func (s *PodSuite) ReleaseRevision(rev string) (*testRelease, error) {
	reg, ca := os.Getenv("SRCSI_REGISTRY"), os.Getenv("SRCSI_REGISTRY_CA")
	if reg == "" || ca == "" {
		return nil, fmt.Errorf("$SRCSI_REGISTRY or $SRCSI_REGISTRY_CA is not set: the cluster has no registry (hack/cluster.sh up without --no-registry)")
	}
	root, err := os.Getwd() // the repository's root (Main)
	if err != nil {
		return nil, err
	}
	short, err := exec.Command("git", "rev-parse", "--short=12", "--verify", rev+"^{commit}").Output()
	if err != nil {
		return nil, fmt.Errorf("%q is not a commit of this repository: git rev-parse: %v", rev, err)
	}
	rel := &testRelease{Version: "v0.1.0-rev.g" + strings.TrimSpace(string(short)), Repo: reg + "/" + registryPath + "/shared-resource-csi"}
	tmp, err := os.MkdirTemp("", "srcsi-revision")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if out, err := exec.Command("git", "worktree", "add", "--detach", tree, rev).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git worktree add %s %s: %v\n%s", tree, rev, err, out)
	}
	defer func() {
		if out, err := exec.Command("git", "worktree", "remove", "--force", tree).CombinedOutput(); err != nil {
			fmt.Printf("git worktree remove %s: %v\n%s", tree, err, out)
		}
	}()
	for _, p := range releaseRecipe {
		if err := os.RemoveAll(filepath.Join(tree, p)); err != nil {
			return nil, err
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(root, p), filepath.Join(tree, p)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("copying this tree's %s over %s's: %v\n%s", p, rev, err, out)
		}
	}
	changelog, err := testChangelog(tmp, rel.Version, "The driver of "+rev+", released with this tree's recipe and chart (test/e2e/swap).")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "_output", "bin")
	// The environment `make release REGISTRY=...` gives the script (PUSH=1: REGISTRY was given),
	// with the tools `make test-swap` built in this tree. GOPROXY=off: a module missing from the
	// cache fails at once, naming it.
	env := []string{"VERSION=" + rel.Version, "REGISTRY=" + reg + "/" + registryPath, "PUSH=1", "CHANGELOG=" + changelog,
		"HELM=" + filepath.Join(bin, "helm"), "OCIIMAGE=" + filepath.Join(bin, "ociimage"), "COSIGN=" + filepath.Join(bin, "cosign"),
		"GOPROXY=off", "GOTOOLCHAIN=local"}
	if err := runRelease(rel, ca, tree, env, "sh", "-c", `OUT="$RELEASE_OUT" exec hack/release.sh`); err != nil {
		return nil, fmt.Errorf("releasing %s with this tree's recipe: %w", rev, err)
	}
	fmt.Printf("swap: %s (%s) released to %s in %v with this tree's recipe and chart\n", rel.Version, rev, rel.Repo, rel.took.Round(100*time.Millisecond))
	return rel, nil
}

// RollTo rolls the driver to rel with `helm upgrade` to rel's chart, as a user upgrades or rolls
// back, keeping the values set so far; WaitDriver then waits for rel's image.
func (s *PodSuite) RollTo(rel *testRelease) error {
	s.Release, s.Image, s.chart = rel, rel.Image(), rel.chartArgs(os.Getenv("SRCSI_REGISTRY"), os.Getenv("SRCSI_REGISTRY_CA"))
	return s.helmUpgrade()
}
