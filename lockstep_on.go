//go:build lockstep

package main

// A benchmark build (go build -tags lockstep): the relist runs at start-up and then every
// interval on the dot, as before relisttiming.go, so that the fleet benchmark can measure what
// a simultaneous restart of every node did to the API server before cycles were spread
// (run with --relist-spread=0 for the whole of the old behaviour). The production binary has
// none of this.
const relistLockstep = true
