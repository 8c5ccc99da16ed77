#!/usr/bin/env bash
# Runs the whole test suite against a local cluster that it brings up and always tears down.
# Called by `make test` (after build and tools); needs root.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[[ $(id -u) == 0 ]] || { echo "make test needs root (it mounts file systems and runs a kubelet)" >&2; exit 1; }

# A run killed earlier may have left a cluster behind.
hack/cluster.sh down >/dev/null 2>&1 || true
trap 'hack/cluster.sh down' EXIT
start=$(date +%s)
hack/cluster.sh up
echo "cluster up in $(( $(date +%s) - start )) s"

# The crash tests run the driver's test build, with its crash points compiled in (crashsteps.go).
CGO_ENABLED=0 go build -trimpath -tags crashpoints -o _output/bin/shared-resource-csi-crashpoints .

# The tests run inside the cluster's network namespace, where the API server is reachable.
# Modules are downloaded first: there is no route out of the namespace. -tags integration: the
# suites that need the cluster or root, besides the unit tests (which alone are `go test ./...`).
go mod download
set +e
hack/cluster.sh exec -- env \
	DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi" \
	CRASH_DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi-crashpoints" \
	KUBECTL="$ROOT/_output/bin/kubectl" \
	HELM="$ROOT/_output/bin/helm" \
	go test -tags integration -count=1 -timeout 40m -parallel 4 -v ${TEST_ARGS:-} . ./internal/... 2>&1 | tee _output/test.log
status=${PIPESTATUS[0]}

# Kubernetes' storage e2e suite (External Storage, CSI ephemeral in-line) against the driver the
# pod suite deployed. Not when TEST_ARGS picks tests: the pod suite may not have run.
if [[ -z ${TEST_ARGS:-} ]]; then
	hack/cluster.sh exec -- hack/e2e-storage.sh
	e2e_status=$?
	((status != 0)) || status=$e2e_status
else
	echo "TEST_ARGS set: not running the storage e2e suite (hack/e2e-storage.sh)"
fi
echo "tests finished in $(( $(date +%s) - start )) s"
exit "$status"
