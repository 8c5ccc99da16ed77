package main

// Crash points let the crash tests kill the driver at an exact step of an operation, with the
// same SIGKILL an OOM kill or a node problem would deliver, so recovery is proven step by step.
// They are armed only by the environment variable SRCSI_TEST_CRASH_AT, which no manifest sets;
// unarmed, each call is one string comparison.

import (
	"os"
	"syscall"

	"k8s.io/klog/v2"
)

const crashEnv = "SRCSI_TEST_CRASH_AT"

// Steps, in the order operations reach them. Each names the state just after the step.
var (
	publishSteps   = []string{"publish:dir", "publish:tmpfs", "publish:data", "publish:record", "publish:target", "publish:bind"}
	unpublishSteps = []string{"unpublish:bind", "unpublish:target", "unpublish:tmpfs", "unpublish:dir"}
	reconcileSteps = []string{"reconcile:copies", "reconcile:data", "reconcile:record"}
)

type crashPoints struct{ at string }

func (c crashPoints) reached(step string) {
	if c.at != "" && c.at == step {
		klog.InfoS("Test crash point reached; killing the process", "step", step)
		klog.Flush()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the signal is fatal
	}
}
