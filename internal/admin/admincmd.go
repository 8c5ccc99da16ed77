package admin

// The admin's subcommands `diagnose` (diagnose.go) and `who-uses` (whouses.go): their flags, and
// how a run ends (its output and exit code).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
)

// The subcommands' names: `shared-resource-csi diagnose ...`, `shared-resource-csi who-uses ...`.
const (
	DiagnoseCommand = "diagnose"
	WhoUsesCommand  = "who-uses"
)

const (
	diagnoseCommand = DiagnoseCommand
	whoUsesCommand  = WhoUsesCommand
	// diagnoseExitProblem is diagnose's exit code when a verdict is not OK (0: all OK).
	diagnoseExitProblem = 3
)

// Usage is the usage of the binary run as the kubectl plugin (or without a command).
const Usage = `Usage: kubectl shared-resource COMMAND (or shared-resource-csi COMMAND)
  diagnose POD|deployment/NAME [-n NS] [-o json]   why a pod's shared volumes do or do not work, and the fix
  who-uses sharedsecret/NAME|sharedconfigmap/NAME|secret/NAME|configmap/NAME [-n NS] [-o json]
                                                   the pods that mount a share, or a source through its shares
  env-file --dir DIR --out FILE [--key KEY[=NAME]]... [--prefix P]
                                                   (in a pod) a share's files as an env file for fileKeyRef
Flags of diagnose and who-uses: --kubeconfig, --context, -n/--namespace, -o/--output text|json,
--driver-namespace, --driver-service-accounts.
`

func parseAdminFlags(d Driver, name string, args []string, usage io.Writer) (*adminOptions, string, error) {
	o := &adminOptions{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config), as kubectl")
	fs.StringVar(&o.kubeContext, "context", "", "the kubeconfig context to use (default: its current context)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the pod or Deployment (diagnose), or of the Secret/ConfigMap (who-uses); default: the context's")
	fs.StringVar(&o.namespace, "n", "", "short for --namespace")
	fs.StringVar(&o.output, "output", "text", "text (for people) or json (for scripts)")
	fs.StringVar(&o.output, "o", "text", "short for --output")
	fs.StringVar(&o.driverNS, "driver-namespace", "csi-sharedresource", "the namespace the driver is installed in")
	fs.StringVar(&o.driverAccounts, "driver-service-accounts", "csi-sharedresource:shared-resource-csi-driver,csi-sharedresource:shared-resource-csi-status",
		"the driver's service accounts, NAMESPACE:NAME,...: the node plugin's first (it is the one checked), then the status controller's")
	// Flags may come after the target, as kubectl takes them.
	var target []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, "", err
		}
		if fs.NArg() == 0 {
			break
		}
		target = append(target, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(target) != 1:
		return nil, "", fmt.Errorf("want one target, got %d: %s", len(target), strings.Join(target, " "))
	case o.output != "text" && o.output != "json":
		return nil, "", fmt.Errorf("-o %q: text or json", o.output)
	}
	if err := d.CheckAccounts(o.driverAccounts); err != nil {
		return nil, "", errors.New(strings.Replace(err.Error(), "--service-account", "--driver-service-accounts", 1))
	}
	return o, target[0], nil
}

// Run runs diagnose or who-uses (name) with args and returns the exit code: 0 (diagnose: every
// verdict OK), 3 (diagnose: a verdict is not OK), 1 a failure, 2 a bad flag.
func Run(d Driver, name string, args []string, stdout, stderr io.Writer) int {
	o, target, err := parseAdminFlags(d, name, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		printFailure(stderr, name, err, nil)
		return 2
	}
	a, ns, err := newAdminClient(d, o.kubeconfig, o.kubeContext)
	if err != nil {
		printFailure(stderr, name, err, nil)
		return 1
	}
	if o.namespace == "" {
		o.namespace = ns
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	var report any
	code := 0
	switch name {
	case diagnoseCommand:
		rep, err := runDiagnose(ctx, a, o, target)
		if err != nil {
			printFailure(stderr, name, err, a.lacked)
			return 1
		}
		for _, p := range rep.Pods {
			for _, s := range p.Shares {
				if s.Verdict != verdictOK {
					code = diagnoseExitProblem
				}
			}
		}
		report = rep
		printDiagnose(&out, rep)
	case whoUsesCommand:
		rep, err := runWhoUses(ctx, a, o, target)
		if err != nil {
			printFailure(stderr, name, err, a.lacked)
			return 1
		}
		report = rep
		printWhoUses(&out, rep)
	}
	if o.output == "json" {
		if err := printJSON(stdout, report); err != nil {
			return 1
		}
		return code
	}
	fmt.Fprint(stdout, out.String())
	return code
}

// printFailure writes why a command failed, and the permissions the caller lacked, to stderr.
// An error may carry others' text (a Deployment's selector, an API server's message naming an
// object), so it is printed as the report is: through printable, one line each.
func printFailure(w io.Writer, name string, err error, lacked []string) {
	fmt.Fprintf(w, "%s: %s\n", name, printable(err.Error()))
	if len(lacked) > 0 {
		fmt.Fprintf(w, "you may not: %s\n", printable(strings.Join(lacked, "; ")))
	}
}

// printJSON writes the report as indented JSON, in which every character a terminal does not
// print as itself is a JSON escape: the encoder escapes the C0 controls but writes C1 controls
// (U+009B, a CSI to many terminals) and format characters (U+202E) as they are, and the report
// holds others' text. The values decode the same: an escape is the character, to a script.
func printJSON(w io.Writer, report any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(report); err != nil {
		return err
	}
	var out strings.Builder
	for _, r := range buf.String() {
		switch {
		case r == '\n' || r == ' ' || unicode.IsPrint(r):
			// The encoder escapes a line break inside a string: one here is the indent's.
			out.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, "\\u%04x\\u%04x", r1, r2)
		default:
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}
