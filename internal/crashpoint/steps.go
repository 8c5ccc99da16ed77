package crashpoint

// Step names a point of publish, unpublish or reconcile just after a step that changes the node.
type Step string

// The crash points, named operation:step; the crash tests arm them by these names.
const (
	PublishDir    Step = "publish:dir"
	PublishTmpfs  Step = "publish:tmpfs"
	PublishData   Step = "publish:data"
	PublishRecord Step = "publish:record"
	PublishTarget Step = "publish:target"
	PublishBind   Step = "publish:bind"

	UnpublishBind   Step = "unpublish:bind"
	UnpublishTarget Step = "unpublish:target"
	UnpublishTmpfs  Step = "unpublish:tmpfs"
	UnpublishDir    Step = "unpublish:dir"

	ReconcileCopies Step = "reconcile:copies"
	ReconcileData   Step = "reconcile:data"
	ReconcileRecord Step = "reconcile:record"
)

// The steps of each operation, in the order it reaches them. Each call returns a new slice: what
// one caller does with its copy changes no other's.

// PublishSteps returns the steps of a publish.
func PublishSteps() []Step {
	return []Step{PublishDir, PublishTmpfs, PublishData, PublishRecord, PublishTarget, PublishBind}
}

// UnpublishSteps returns the steps of an unpublish.
func UnpublishSteps() []Step {
	return []Step{UnpublishBind, UnpublishTarget, UnpublishTmpfs, UnpublishDir}
}

// ReconcileSteps returns the steps of a reconcile.
func ReconcileSteps() []Step {
	return []Step{ReconcileCopies, ReconcileData, ReconcileRecord}
}
