#!/usr/bin/env bash
# `make soak`: the soak tier (test/e2e/soak) on a local cluster of NODES nodes (default 3) that it
# brings up and always tears down: a seeded workload of consumers, shares, grants and source
# updates for DURATION while faults are injected, then every read every consumer made is checked
# (docs/reliability.md). Prints the figures and the violations; what a failed run needs to be
# understood stays in _output/soak/<time>-seed<SEED>/ (report.txt, history.json, the readers'
# logs, the drivers' logs, metrics.tsv and its plot metrics.svg, the seed).
#   DURATION (default 3m; `make soak DURATION=1h`), SEED (default: drawn, printed), NODES (default 3),
#   KUBE_VERSION=1.NN (default the newest supported minor).
# Needs root; one cluster per machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
# shellcheck source=hack/lib/goenv.sh
source hack/lib/goenv.sh
[[ $(id -u) == 0 ]] || { echo "make soak needs root (it mounts file systems and runs kubelets)" >&2; exit 1; }
DURATION=${DURATION:-3m}
SEED=${SEED:-$((RANDOM * 32768 + RANDOM))}
NODES=${NODES:-3}
minor=$(kube_minor)
out=_output/soak/$(date -u +%Y%m%d-%H%M%S)-seed$SEED
mkdir -p "$out"

hack/cluster.sh down >/dev/null 2>&1 || true
trap 'hack/cluster.sh down' EXIT
start=$(date +%s)
go -C test mod download
KUBE_VERSION=$minor NODES=$NODES hack/cluster.sh up
echo "cluster of $NODES nodes (Kubernetes $minor) up in $(($(date +%s) - start)) s"
set +e
KUBE_VERSION=$minor hack/cluster.sh exec -- env \
	DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi" \
	KUBECTL="$(kube_bin_dir "$ROOT" "$minor")/kubectl" \
	HELM="$ROOT/_output/bin/helm" \
	SOAK_DURATION="$DURATION" SOAK_SEED="$SEED" SOAK_OUT="$ROOT/$out" \
	go -C test test -count=1 -timeout 0 -v -run '^TestSoak$' ./e2e/soak 2>&1 | tee "$out/test.log"
status=${PIPESTATUS[0]}
set -e
hack/cluster.sh down && hack/cluster.sh check-down || status=1
if [[ -s $out/metrics.tsv ]]; then
	go -C tools run ./soakplot -in "$ROOT/$out/metrics.tsv" -history "$ROOT/$out/history.json" -out "$ROOT/$out/metrics.svg" ||
		echo "plotting $out/metrics.tsv failed" >&2
fi
echo "soak (seed $SEED, $DURATION) finished after $(($(date +%s) - start)) s: $out"
exit "$status"
