#!/usr/bin/env bash
# `make test-swap [SWAP_FROM=REV]`: test/e2e/swap on a one-node cluster that it brings up and
# always tears down: the driver's binary swapped under running pods, both ways, between the
# release of REV (default ffc900b; a commit of this repository, its Go sources released with this
# tree's recipe and chart) and this tree's release. Not part of `make test`: it builds another
# commit. The log: _output/test-swap.log. KUBE_VERSION=1.NN picks the minor (default the newest).
# Needs root; one cluster per machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
# shellcheck source=hack/lib/goenv.sh
source hack/lib/goenv.sh
[[ $(id -u) == 0 ]] || { echo "make test-swap needs root (it mounts file systems and runs a kubelet)" >&2; exit 1; }
SWAP_FROM=${SWAP_FROM:-ffc900b}
git rev-parse --verify --quiet "$SWAP_FROM^{commit}" >/dev/null ||
	{ echo "SWAP_FROM=$SWAP_FROM is not a commit of this repository" >&2; exit 2; }
minor=$(kube_minor)
mkdir -p _output

# The modules first, this tree's and test/'s and REV's: there is no route out of the cluster's
# network namespace, where both releases are built.
rev_mod=$(mktemp -d)
hack/cluster.sh down >/dev/null 2>&1 || true
trap 'hack/cluster.sh down; rm -rf "$rev_mod"' EXIT
start=$(date +%s)
go mod download
go -C test mod download
git archive "$SWAP_FROM" go.mod go.sum | tar -x -C "$rev_mod"
go -C "$rev_mod" mod download
KUBE_VERSION=$minor NODES=1 hack/cluster.sh up
echo "cluster of 1 node (Kubernetes $minor) up in $(($(date +%s) - start)) s"
set +e
KUBE_VERSION=$minor hack/cluster.sh exec -- env \
	DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi" \
	KUBECTL="$(kube_bin_dir "$ROOT" "$minor")/kubectl" \
	HELM="$ROOT/_output/bin/helm" \
	SWAP_FROM="$SWAP_FROM" \
	GOGC="$BUILD_GOGC" \
	go -C test test -exec "$GO_TEST_EXEC" -count=1 -timeout 30m -v -run '^TestSwapDriverBinaries$' ./e2e/swap 2>&1 | tee _output/test-swap.log
status=${PIPESTATUS[0]}
set -e
hack/cluster.sh down && hack/cluster.sh check-down || status=1
echo "test-swap ($SWAP_FROM and this tree) finished after $(($(date +%s) - start)) s"
exit "$status"
