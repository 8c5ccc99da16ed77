// Package makehelp specifies `make help` (hack/make-help.awk): every target a contributor can
// name, each .PHONY target of the Makefile, is listed with what it does.
package makehelp

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// phonyTargets are the targets the Makefile's .PHONY lines declare.
func phonyTargets(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindAllStringSubmatch(string(b), -1) {
		targets = append(targets, strings.Fields(m[1])...)
	}
	if len(targets) == 0 {
		t.Fatal("the Makefile declares no .PHONY target")
	}
	return targets
}

func TestMakeHelpListsEveryPhonyTarget(t *testing.T) {
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", "../..", "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") {
			listed[f[0]] = strings.Join(f[1:], " ")
		}
	}
	for _, target := range phonyTargets(t) {
		if listed[target] == "" {
			t.Errorf("make help does not list %q: give it a `## %s: what it does.` line above its rule in the Makefile", target, target)
		}
	}
	if !strings.Contains(string(out), "`make` alone runs build") {
		t.Errorf("make help does not say what `make` alone does:\n%s", out)
	}
}
