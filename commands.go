package main

// The binary's subcommands: `shared-resource-csi NAME ARGS...` runs NAME instead of the driver.
// The driver itself (no subcommand) takes flags only. One table says every subcommand, what it
// is for in one line, and what runs it: `help` and `--help` list it, and main dispatches through
// it, so a new subcommand is one row here.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/shared-resource/csi-driver/internal/admin"
	"github.com/shared-resource/csi-driver/internal/podcmd"
)

// driverBinary is the binary's name, as usage messages show it.
const driverBinary = "shared-resource-csi"

// subcommand is one mode of the binary other than the driver.
type subcommand struct {
	name    string
	summary string // one line, for `help`
	// run runs the subcommand with the arguments after its name and returns the process's
	// exit code; ctx ends on SIGTERM or SIGINT.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// subcommands is the table, in the order `help` lists it.
func subcommands() []subcommand {
	return []subcommand{
		{podcmd.WatchCommand, "a sidecar: exit 42 (restart the pod's containers in place) or signal a process when the files a pod sees in a share change",
			func(ctx context.Context, args []string, _, stderr io.Writer) int {
				return podcmd.Watch(ctx, args, stderr)
			}},
		{podcmd.EnvFileCommand, "in a pod (an init container): a share's files as an env file for valueFrom.fileKeyRef",
			func(_ context.Context, args []string, _, stderr io.Writer) int {
				return podcmd.EnvFile(args, stderr)
			}},
		{admin.DiagnoseCommand, "for an admin: why a pod's (or a Deployment's pods') shared volumes work or not, and the fix",
			func(_ context.Context, args []string, stdout, stderr io.Writer) int {
				return admin.Run(adminDriver(), admin.DiagnoseCommand, args, stdout, stderr)
			}},
		{admin.WhoUsesCommand, "for an admin: the pods that mount a share, or a Secret or ConfigMap through its shares",
			func(_ context.Context, args []string, stdout, stderr io.Writer) int {
				return admin.Run(adminDriver(), admin.WhoUsesCommand, args, stdout, stderr)
			}},
		{"help", "list the subcommands and the driver's flags; `help NAME` shows a subcommand's flags", runHelp},
	}
}

// findSubcommand is the subcommand named name, if there is one.
func findSubcommand(name string) (subcommand, bool) {
	for _, c := range subcommands() {
		if c.name == name {
			return c, true
		}
	}
	return subcommand{}, false
}

// subcommandNames lists the subcommands' names, for messages.
func subcommandNames() string {
	var names []string
	for _, c := range subcommands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

// runSubcommand runs c with args, stopping it on SIGTERM or SIGINT, and returns its exit code.
func runSubcommand(c subcommand, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return c.run(ctx, args, stdout, stderr)
}

// kubectlPluginName is the binary's name as a kubectl plugin: kubectl finds
// kubectl-shared_resource on $PATH for `kubectl shared-resource ...`.
const kubectlPluginName = "kubectl-shared_resource"

// runPlugin is the binary run as the kubectl plugin (its name kubectl-shared_resource):
// `kubectl shared-resource COMMAND ARGS...` runs the subcommand COMMAND; without one, or with
// another word, it prints the plugin's usage and returns 2.
func runPlugin(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if c, ok := findSubcommand(args[0]); ok && c.name != "help" {
			return runSubcommand(c, args[1:], stdout, stderr)
		}
		if args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(stderr, "unknown command %q\n", args[0])
		}
	}
	fmt.Fprint(stderr, admin.Usage)
	return 2
}

// printUsage writes what `--help` and `help` show: how to run the driver, the subcommands, and
// the driver's flags (fs).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage:\n  %s [FLAGS]          run the driver (--role=node, the default: the node plugin; --role=status: the status controller)\n", driverBinary)
	fmt.Fprintf(w, "  %s COMMAND [ARGS]   run a subcommand instead\n\nCommands:\n", driverBinary)
	for _, c := range subcommands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\n`%s COMMAND --help` shows a subcommand's flags.\n\nThe driver's flags:\n", driverBinary)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// runHelp is `shared-resource-csi help [COMMAND]`.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fs, _ := newFlagSet(&options{})
		printUsage(stdout, fs)
		return 0
	}
	c, ok := findSubcommand(args[0])
	if !ok || c.name == "help" {
		fmt.Fprintf(stderr, "%s help: no subcommand %q; the subcommands are %s\n", driverBinary, args[0], subcommandNames())
		return 2
	}
	// What was asked for goes to stdout, though a subcommand's own --help writes to stderr.
	return c.run(ctx, []string{"--help"}, stdout, stdout)
}
