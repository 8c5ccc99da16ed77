// Package matrixtests reads hack/matrixtests/matrix.txt, the tests hack/test.sh runs on the older
// Kubernetes minors, and checks that each names a test that exists: a list of names in a regular
// expression would otherwise drop a renamed or removed test from those runs without a word.
package matrixtests

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Entry is one line of the list: a package directory of test/ and a test in it.
type Entry struct {
	Line    int
	Package string
	Test    string
}

var testName = regexp.MustCompile(`^Test[A-Z0-9_][A-Za-z0-9_]*$`)

// Read parses the list: "PACKAGE TEST" per line; blank lines and # comments are skipped.
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var entries []Entry
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || !testName.MatchString(fields[1]) || filepath.IsAbs(fields[0]) ||
			strings.Contains(fields[0], "..") {
			return nil, fmt.Errorf("%s:%d: want \"PACKAGE TestName\" (a package directory of test/ and a test function), got %q", path, n, line)
		}
		entries = append(entries, Entry{Line: n, Package: fields[0], Test: fields[1]})
	}
	return entries, s.Err()
}

// Tests returns the names of the top-level Test functions declared in dir's _test.go files,
// whatever their build tags.
func Tests(dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no _test.go file in %s", dir)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				names[fn.Name.Name] = true
			}
		}
	}
	return names, nil
}

// Missing returns, one message each, the entries whose test is not declared in its package under
// testRoot (test/), naming the line to fix.
func Missing(list, testRoot string, entries []Entry) ([]string, error) {
	found := map[string]map[string]bool{}
	var missing []string
	for _, e := range entries {
		if found[e.Package] == nil {
			names, err := Tests(filepath.Join(testRoot, e.Package))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", list, e.Line, err)
			}
			found[e.Package] = names
		}
		if !found[e.Package][e.Test] {
			missing = append(missing, fmt.Sprintf("%s:%d: no test %s in test/%s: renamed or removed? Name it here as it is now, or drop the line", list, e.Line, e.Test, e.Package))
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// Regexp is the -run expression that selects exactly the listed tests.
func Regexp(entries []Entry) string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Test
	}
	return "^(" + strings.Join(names, "|") + ")$"
}
