//go:build crashpoints

package crashpoint

// The crash points of a test build (go build -tags crashpoints): armed by the environment
// variable SRCSI_TEST_CRASH_AT=<step>, the driver kills itself with SIGKILL, as an OOM kill or a
// node problem would, when it reaches that step. The production binary has none of this.

import (
	"os"
	"syscall"

	"k8s.io/klog/v2"
)

// Points are the crash points armed: the one step SRCSI_TEST_CRASH_AT names, if any.
type Points struct{ at Step }

// crashEnv arms one crash point of a test build: SRCSI_TEST_CRASH_AT=<step>.
const crashEnv = "SRCSI_TEST_CRASH_AT"

// New returns the crash points the environment arms.
func New() Points { return Points{at: Step(os.Getenv(crashEnv))} }

// Reached kills the process with SIGKILL if step is the one c arms.
func Reached(c Points, step Step) {
	if c.at != "" && c.at == step {
		klog.InfoS("Test crash point reached; killing the process", "step", step)
		klog.Flush()
		if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
			// The crash test fails on any death but SIGKILL's: say why, rather than hang.
			klog.ErrorS(err, "Test crash point: the process could not kill itself", "step", step)
			klog.Flush()
			os.Exit(2)
		}
		select {} // never returns: the signal is fatal
	}
}
