//go:build !crashpoints

package main

// The production build: no crash points (see crashsteps.go); reached compiles to nothing.

type crashPoints struct{}

func newCrashPoints() crashPoints { return crashPoints{} }

func (crashPoints) reached(crashStep) {}
