//go:build crashpoints

package main

// The crash points of a test build (go build -tags crashpoints): armed by the environment
// variable SRCSI_TEST_CRASH_AT=<step>, the driver kills itself with SIGKILL, as an OOM kill or a
// node problem would, when it reaches that step. The production binary has none of this.

import (
	"os"
	"syscall"

	"k8s.io/klog/v2"
)

type crashPoints struct{ at crashStep }

func newCrashPoints() crashPoints { return crashPoints{at: crashStep(os.Getenv(crashEnv))} }

func (c crashPoints) reached(step crashStep) {
	if c.at != "" && c.at == step {
		klog.InfoS("Test crash point reached; killing the process", "step", step)
		klog.Flush()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the signal is fatal
	}
}
