// Package crashpoint names the points of publish, unpublish and reconcile just after each step
// that changes the node (Step), in the order an operation reaches them (PublishSteps,
// UnpublishSteps, ReconcileSteps). The crash tests kill the driver at each one and prove that a
// restart recovers; the driver marks them with Reached(points, step) where each step ends.
//
// The contract: only a binary built with the build tag `crashpoints` (on.go, built by the crash
// tests) acts on them: armed by the environment variable SRCSI_TEST_CRASH_AT=<step>, it kills
// itself with SIGKILL at that step. In the production binary (off.go) Points is empty and Reached
// does nothing and is compiled away, so no environment can make it kill itself. It imports
// nothing of the driver's; the root imports it.
package crashpoint
