package main

// Specification of the refusal of flags (flagcheck.go): a flag value the driver cannot run with,
// an unknown flag or a stray argument exits 2 and says, through klog on stderr (what `kubectl
// logs` shows of a crash-looping pod), which flag, the value given and what is allowed. --help
// lists the flags on stdout and exits 0.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mainArgsEnv, set in a child process of this test binary, makes the test below run main() with
// these arguments (separated by the ASCII unit separator, 0x1f) instead of testing.
const mainArgsEnv = "SHARED_RESOURCE_CSI_TEST_MAIN_ARGS"

// runMain runs main() with args in a child process (main exits) and returns its exit code, stdout
// and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRefusedFlagsExitTwoSayingWhatIsAllowed$", "-test.count=1")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\x1f"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("running main %q: %v", args, err)
	return 0, "", ""
}

func TestRefusedFlagsExitTwoSayingWhatIsAllowed(t *testing.T) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"shared-resource-csi"}, strings.Split(args, "\x1f")...)
		main()
		return
	}
	for _, tc := range []struct {
		args []string
		want []string // in stderr, besides the refusal itself
	}{
		{[]string{"--relist-spread=2"}, []string{"--relist-spread=2", "between 0 and 1"}},
		{[]string{"--health-max-connections=0"}, []string{"--health-max-connections=0", "at least 1"}},
		{[]string{"--node-id=n", "stray"}, []string{`\"stray\"`, "flags only"}},
		{[]string{"--relist-interval=0s"}, []string{"--relist-interval=0s", "positive"}},
		{[]string{"--kube-api-burst=0"}, []string{"--kube-api-burst=0", "at least 1"}},
		{[]string{"--relist-spread=half"}, []string{`\"half\"`, "relist-spread", "0 to 1", `default \"0.5\"`}},
		{[]string{"--no-such-flag"}, []string{"no-such-flag", "--help"}},
		// The flag package words a bad boolean differently ("for -version", no "flag").
		{[]string{"--version=maybe"}, []string{`\"maybe\"`, "--version is print the version", `default \"false\"`}},
	} {
		code, _, stderr := runMain(t, tc.args...)
		if code != 2 {
			t.Errorf("%q: exit code %d, want 2", tc.args, code)
		}
		for _, w := range append([]string{"Refusing to start"}, tc.want...) {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr does not say %q:\n%s", tc.args, w, stderr)
			}
		}
	}
	code, stdout, _ := runMain(t, "--help")
	if code != 0 || !strings.Contains(stdout, "-relist-spread float") {
		t.Errorf("--help: exit code %d, want 0 with the flags on stdout:\n%s", code, stdout)
	}
}
