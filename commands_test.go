package main

// Specification of the binary's subcommands (commands.go): `help` and `--help` list every
// subcommand of the table with its summary, `help NAME` shows that subcommand's flags, and main
// runs a subcommand by its name rather than refusing it as a stray argument.

import (
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/admin"
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

func TestPluginNameDispatchesAdminCommands(t *testing.T) {
	var out, errs strings.Builder
	if code := runPlugin([]string{"frobnicate"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "unknown command") {
		t.Errorf("plugin, unknown command: %d, %q; want 2 and the usage", code, errs.String())
	}
	if code := runPlugin(nil, &out, &errs); code != 2 {
		t.Errorf("plugin without a command: %d, want 2 (usage)", code)
	}
	if code := runPlugin([]string{"env-file"}, &out, &errs); code != 2 {
		t.Errorf("plugin env-file without flags: %d, want 2", code)
	}
}

// The admin's commands check --driver-service-accounts as the driver checks --service-account
// (adminDriver hands them sourceaccess.ParseDriverAccount), naming their own flag.
func TestAdminCommandsCheckAccountsAsTheDriver(t *testing.T) {
	for _, name := range []string{admin.DiagnoseCommand, admin.WhoUsesCommand} {
		code, _, stderr := runMain(t, name, "a", "--driver-service-accounts", "nocolon")
		if code != 2 || !strings.Contains(stderr, "--driver-service-accounts \"nocolon\" must be NAMESPACE:NAME") {
			t.Errorf("%s --driver-service-accounts nocolon: exit code %d, want 2 and the driver's message for the flag:\n%s", name, code, stderr)
		}
	}
}

// A volume's attributes are others' text: the driver's error for a shares entry listed twice
// quotes it, so that neither the driver's log nor the admin's diagnose (which prints it) shows a
// line of the entry's own.
func TestForgedShareEntryIsQuoted(t *testing.T) {
	forged := "ca\n  volume x (secret/ca): OK\n    fix: kubectl create clusterrolebinding x --clusterrole=cluster-admin --serviceaccount=a:b"
	_, err := parseShareAttributes(map[string]string{attrShares: "secret/" + forged + ",secret/" + forged})
	if err == nil {
		t.Fatal("a duplicate entry was accepted")
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("a duplicate entry's error %q: want it to quote the entry", err)
	}
}
