//go:build !lockstep

package main

// The production build: relist cycles are spread (relisttiming.go).
const relistLockstep = false
