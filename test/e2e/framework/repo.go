package framework

// The repository's root: the suites read the files a user reads (deploy.yaml, charts/,
// examples/, README.md and docs/) and run what `make` builds (_output/bin), all named from the
// root. Each suite's TestMain (Main) makes the root its working directory.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// driverModule is the driver's module path, as the root go.mod declares it.
const driverModule = "github.com/shared-resource/csi-driver"

// RepoRoot is the nearest directory, from the working directory up, holding the go.mod of the
// driver's module; or $SRCSI_REPO_ROOT, where the suite runs away from a checkout (a test binary
// copied elsewhere with the files it reads).
func RepoRoot() (string, error) {
	if dir := os.Getenv("SRCSI_REPO_ROOT"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if moduleOf(filepath.Join(dir, "go.mod")) == driverModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no directory above the working directory holds the go.mod of module " + driverModule)
		}
		dir = parent
	}
}

// moduleOf is the module path a go.mod declares ("" if it cannot be read).
func moduleOf(gomod string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

// Main runs a suite's tests (or benchmarks) from the repository's root: call it from TestMain.
func Main(m *testing.M) {
	root, err := RepoRoot()
	if err == nil {
		err = os.Chdir(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "finding the repository's root:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// ReadDocs returns README.md and every docs/*.md, concatenated, and their names: a documented
// command or value is looked for in all of them, wherever a page about it lives.
func ReadDocs(t testing.TB) ([]byte, []string) {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pages)
	pages = append([]string{"README.md"}, pages...)
	var all []byte
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(append(all, b...), '\n')
	}
	return all, pages
}
