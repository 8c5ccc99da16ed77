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

// The steps of each operation, in order.
var (
	PublishSteps   = []Step{PublishDir, PublishTmpfs, PublishData, PublishRecord, PublishTarget, PublishBind}
	UnpublishSteps = []Step{UnpublishBind, UnpublishTarget, UnpublishTmpfs, UnpublishDir}
	ReconcileSteps = []Step{ReconcileCopies, ReconcileData, ReconcileRecord}
)
