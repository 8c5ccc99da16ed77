package main

// Crash steps name the points of publish, unpublish and reconcile just after each step that
// changes the node, in the order an operation reaches them. The crash tests kill the driver at
// each one and prove that a restart recovers; the code marks them with d.crash.reached(step).
// Only a binary built with the build tag `crashpoints` (crashpoint_on.go, built by the crash
// tests) acts on them; in the production binary reached is an empty function (crashpoint_off.go).

type crashStep string

const (
	stepPublishDir    crashStep = "publish:dir"
	stepPublishTmpfs  crashStep = "publish:tmpfs"
	stepPublishData   crashStep = "publish:data"
	stepPublishRecord crashStep = "publish:record"
	stepPublishTarget crashStep = "publish:target"
	stepPublishBind   crashStep = "publish:bind"

	stepUnpublishBind   crashStep = "unpublish:bind"
	stepUnpublishTarget crashStep = "unpublish:target"
	stepUnpublishTmpfs  crashStep = "unpublish:tmpfs"
	stepUnpublishDir    crashStep = "unpublish:dir"

	stepReconcileCopies crashStep = "reconcile:copies"
	stepReconcileData   crashStep = "reconcile:data"
	stepReconcileRecord crashStep = "reconcile:record"
)

// The steps of each operation, in order.
var (
	publishSteps   = []crashStep{stepPublishDir, stepPublishTmpfs, stepPublishData, stepPublishRecord, stepPublishTarget, stepPublishBind}
	unpublishSteps = []crashStep{stepUnpublishBind, stepUnpublishTarget, stepUnpublishTmpfs, stepUnpublishDir}
	reconcileSteps = []crashStep{stepReconcileCopies, stepReconcileData, stepReconcileRecord}
)
