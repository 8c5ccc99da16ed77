// Package pinnedactions checks that every action a GitHub workflow uses is pinned by a full
// commit SHA. A tag (v4) or a branch is mutable: whoever can move it runs code in the release
// job, which holds the tokens that push and sign. `make check-workflows` (part of `make vet`) and
// `go test ./...` run the check on .github/workflows.
package pinnedactions

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// pinned is what a `uses:` may name: an action or reusable workflow of a repository at a full
// commit SHA (owner/repo[/path]@<40 hex>), an action in this repository (./path), or a container
// image by digest (docker://image@sha256:<64 hex>).
var pinned = regexp.MustCompile(`^(` +
	`[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[^@\s]+)?@[0-9a-f]{40}` +
	`|\./[^@\s]*` +
	`|docker://[^@\s]+@sha256:[0-9a-f]{64}` +
	`)$`)

// versionComment is the `# vX.Y.Z` that says which release a pinned SHA is, on the same line.
var versionComment = regexp.MustCompile(`@[0-9a-f]{40}["']?\s+#\s*v[0-9]+(\.[0-9]+){0,2}\b`)

// Problem is one `uses:` the check refuses.
type Problem struct {
	File, Uses, Why string
}

func (p Problem) String() string { return fmt.Sprintf("%s: uses: %s: %s", p.File, p.Uses, p.Why) }

// Check returns the problems of one workflow file's contents: every `uses:` value (in steps and
// in jobs, found by parsing the YAML, wherever it is) that is not pinned, and every pinned one
// whose line lacks its `# vX.Y.Z` comment.
func Check(file string, content []byte) ([]Problem, error) {
	var doc any
	if err := yaml.Unmarshal(content, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var uses []string
	collectUses(doc, &uses)
	var problems []Problem
	for _, u := range uses {
		switch {
		case !pinned.MatchString(u):
			problems = append(problems, Problem{file, u, "not pinned: name a full commit SHA (owner/repo@<40 hex> # vX.Y.Z), a local ./action or docker://image@sha256:..."})
		case strings.HasPrefix(u, "./") || strings.HasPrefix(u, "docker://"):
		case !hasVersionComment(content, u):
			problems = append(problems, Problem{file, u, "pinned, but its line has no `# vX.Y.Z` comment saying which release the SHA is"})
		}
	}
	return problems, nil
}

// collectUses appends the string value of every "uses" key in the parsed document.
func collectUses(node any, out *[]string) {
	switch n := node.(type) {
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s, ok := n[k].(string); ok && k == "uses" {
				*out = append(*out, s)
				continue
			}
			collectUses(n[k], out)
		}
	case []any:
		for _, v := range n {
			collectUses(v, out)
		}
	}
}

// hasVersionComment says whether every line naming u carries a version comment.
func hasVersionComment(content []byte, u string) bool {
	found := false
	for _, line := range strings.Split(string(content), "\n") {
		if !strings.Contains(line, "uses:") || !strings.Contains(line, u) {
			continue
		}
		found = true
		if !versionComment.MatchString(line) {
			return false
		}
	}
	return found
}

// CheckDir checks every workflow (*.yaml, *.yml) in dir.
func CheckDir(dir string) (problems []Problem, files int, err error) {
	var names []string
	for _, pattern := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return nil, 0, err
		}
		names = append(names, m...)
	}
	sort.Strings(names)
	for _, name := range names {
		content, err := os.ReadFile(name)
		if err != nil {
			return nil, 0, err
		}
		p, err := Check(filepath.Base(name), content)
		if err != nil {
			return nil, 0, err
		}
		problems = append(problems, p...)
	}
	return problems, len(names), nil
}
