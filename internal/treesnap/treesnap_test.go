package treesnap

// Specification of a tree's description and its diff: every kind of change to an entry shows,
// and an unchanged tree shows none.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDiffShowsEveryChange(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	take := func() map[string]string {
		s, err := Take(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write("a", "1")
	write("b", "2")
	if err := os.Symlink("a", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	before := take()
	if d := Diff(before, take()); d != "" {
		t.Fatalf("an unchanged tree differs: %s", d)
	}
	time.Sleep(10 * time.Millisecond) // a later mtime for the directory
	write("a", "changed")
	os.Remove(filepath.Join(dir, "b"))
	write("c", "3")
	if err := os.Chmod(filepath.Join(dir, "c"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := Diff(before, take())
	for _, want := range []string{"changed a:", "removed b (", "added c (-rw-------", "changed .:"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff %q does not show %q", d, want)
		}
	}
	if strings.Contains(d, " l") {
		t.Errorf("the unchanged symlink shows as changed: %q", d)
	}
	gone, err := Take(filepath.Join(dir, "missing"), false)
	if err != nil || gone["."] != "absent" {
		t.Errorf("a missing root: %v, %v", gone, err)
	}
}
