package main

// Specification of the binary's subcommands (commands.go): `help` and `--help` list every
// subcommand of the table with its summary, `help NAME` shows that subcommand's flags, and main
// runs a subcommand by its name rather than refusing it as a stray argument.

import (
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/podcmd"
)

func TestHelpListsEverySubcommand(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, stdout, stderr := runMain(t, args...)
		if code != 0 {
			t.Errorf("%q: exit code %d, want 0\n%s", args, code, stderr)
		}
		for _, c := range subcommands() {
			if !strings.Contains(stdout, "  "+c.name+" ") || !strings.Contains(stdout, c.summary) {
				t.Errorf("%q does not list the subcommand %q with its summary %q:\n%s", args, c.name, c.summary, stdout)
			}
		}
		if !strings.Contains(stdout, "-relist-interval duration") {
			t.Errorf("%q does not list the driver's flags:\n%s", args, stdout)
		}
	}
	// help NAME: the subcommand's own flags, on stdout.
	code, stdout, _ := runMain(t, "help", podcmd.WatchCommand)
	if code != 0 || !strings.Contains(stdout, "-exit-code int") {
		t.Errorf("help %s: exit code %d, want 0 with its flags on stdout:\n%s", podcmd.WatchCommand, code, stdout)
	}
	code, _, stderr := runMain(t, "help", "no-such-command")
	if code != 2 || !strings.Contains(stderr, subcommandNames()) {
		t.Errorf("help no-such-command: exit code %d, want 2 naming the subcommands there are:\n%s", code, stderr)
	}
	// A stray argument is refused naming the subcommands (it may have been meant as one).
	code, _, stderr = runMain(t, "--node-id=n", "wach")
	if code != 2 || !strings.Contains(stderr, "the subcommands are "+subcommandNames()) {
		t.Errorf("a stray argument: exit code %d, want 2 naming the subcommands:\n%s", code, stderr)
	}
}

// Every row of the table is reached by its name: main runs it (its own usage error, exit 2 for
// watch without --dir) instead of the driver refusing an unexpected argument.
func TestEverySubcommandRunsByItsName(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range subcommands() {
		if c.name == "" || c.summary == "" || c.run == nil || strings.Contains(c.summary, "\n") {
			t.Errorf("subcommand %q: a name, a one-line summary and a run func are required", c.name)
		}
		if seen[c.name] {
			t.Errorf("subcommand %q is in the table twice", c.name)
		}
		seen[c.name] = true
		_, stdout, stderr := runMain(t, c.name, "--help")
		if strings.Contains(stderr, "Refusing to start") || strings.Contains(stdout+stderr, "The driver's flags:") && c.name != "help" {
			t.Errorf("%s --help ran the driver, not the subcommand:\n%s%s", c.name, stdout, stderr)
		}
	}
}
