package main

// Specification of the flags (main.go): verbosity is capped, by --v and by every --vmodule
// entry, below the level at which client-go logs request and response bodies.

import (
	"testing"

	"k8s.io/klog/v2"
)

func TestVerbosityIsCappedForEveryFile(t *testing.T) {
	if _, err := parseFlags([]string{"--v=10", "--vmodule=*=9,kube*=3,fetch=8"}); err != nil {
		t.Fatal(err)
	}
	if klog.V(maxVerbosity + 1).Enabled() {
		t.Errorf("--v=10 left verbosity above %d", maxVerbosity)
	}
	if got, want := capVModule("*=9,kube*=3,fetch=8"), "*=5,kube*=3,fetch=5"; got != want {
		t.Errorf("capVModule = %q, want %q", got, want)
	}
	// In this very file (matched by *=9, capped to 5), level 6 is off and 5 on.
	if klog.V(6).Enabled() || !klog.V(5).Enabled() {
		t.Errorf("after --vmodule=*=9: V(6) %v, V(5) %v; want off, on", klog.V(6).Enabled(), klog.V(5).Enabled())
	}
	// Put klog back for the other tests.
	if _, err := parseFlags([]string{"--v=0", "--vmodule="}); err != nil {
		t.Fatal(err)
	}
}
