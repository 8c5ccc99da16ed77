package matrixtests

// Specification of the older minors' test selection (matrix.txt, run by hack/test.sh): every line
// names a test that exists in its package (TestMatrixNamesExistingTests), and a name that does
// not exist fails, naming its line (TestMissingTestIsNamed).

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestMatrixNamesExistingTests(t *testing.T) {
	entries, err := Read("matrix.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 10 {
		t.Fatalf("matrix.txt lists %d tests, want the install-level set (16 when it was written)", len(entries))
	}
	missing, err := Missing("matrix.txt", "../../test", entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Error(m)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.Test] {
			t.Errorf("matrix.txt:%d: %s is listed twice", e.Line, e.Test)
		}
		seen[e.Test] = true
	}
}

func TestMissingTestIsNamed(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "e2e", "fake")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "//go:build linux\n\npackage fake\n\nimport \"testing\"\n\nfunc TestThere(t *testing.T) {}\n\nfunc helperTestNot(t *testing.T) {}\n"
	if err := os.WriteFile(filepath.Join(pkg, "fake_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(dir, "matrix.txt")
	if err := os.WriteFile(list, []byte("# comment\n\ne2e/fake TestThere\ne2e/fake TestRenamedAway\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := Read(list)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := Missing(list, dir, entries)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 1 || !strings.Contains(missing[0], "matrix.txt:4: no test TestRenamedAway in test/e2e/fake") {
		t.Fatalf("missing = %q, want one message naming TestRenamedAway on line 4", missing)
	}
	re := regexp.MustCompile(Regexp(entries))
	for name, want := range map[string]bool{"TestThere": true, "TestRenamedAway": true, "TestThereToo": false, "XTestThere": false} {
		if re.MatchString(name) != want {
			t.Errorf("%s matches %s: %v, want %v", Regexp(entries), name, !want, want)
		}
	}
}

func TestReadRefusesMalformedLines(t *testing.T) {
	for _, line := range []string{"TestOnlyAName", "e2e/api TestA extra", "e2e/api notATest", "../x TestA", "/abs TestA", "e2e/api Test.*"} {
		list := filepath.Join(t.TempDir(), "matrix.txt")
		if err := os.WriteFile(list, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(list); err == nil {
			t.Errorf("Read accepted %q", line)
		}
	}
}
