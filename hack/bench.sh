#!/usr/bin/env bash
# `make bench`: runs the benchmarks (test/bench, and the root's BenchmarkTmpfsWrite in
# tmpfs_root_test.go, build tag root) against a local control plane (kube-apiserver
# + etcd; no kubelet is needed: the benchmarks play the kubelet) that it brings up and always
# tears down, then writes BENCHMARKS.md with tools/benchtable. Needs root (the driver mounts).
#
#   BENCH_COUNT=N    runs of each benchmark; the table shows median, min and max (default 5)
#   BENCH_FILTER=RE  only the benchmarks matching RE (go test -bench syntax; default: all)
#   BENCH_SMOKE=1    every scenario shrunk and run once: a check that they all work, for CI
#
# Only a full run (no filter, no smoke) that succeeds replaces BENCHMARKS.md; every run leaves
# its raw output, table and details.md (every metric, the figures beside the committed
# BENCHMARKS.md's) in _output/bench.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[[ $(id -u) == 0 ]] || { echo "make bench needs root (the driver mounts file systems)" >&2; exit 1; }
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
# shellcheck source=hack/lib/goenv.sh
source hack/lib/goenv.sh
# The control plane of KUBE_VERSION's minor (default the newest), as `make up` and `make test`.
KBIN=$(kube_bin_dir "$ROOT" "$(kube_minor)")
[[ -x _output/bin/shared-resource-csi && -x $KBIN/kubectl ]] || {
	echo "missing _output/bin/shared-resource-csi or $KBIN/kubectl: run make build tools (make bench does)" >&2
	exit 1
}

OUT=$ROOT/_output/bench
mkdir -p "$OUT"
start=$(date +%s)
count=${BENCH_COUNT:-5}
filter=${BENCH_FILTER:-.}
[[ -n ${BENCH_SMOKE:-} ]] && count=1

# Built before the cluster's network namespace is entered: there is no route out of it.
echo "building the benchmarks..."
GOGC=$BUILD_GOGC go -C test test -vet=off -c -o "$OUT/bench.test" ./bench
GOGC=$BUILD_GOGC go test -tags root -vet=off -c -o "$OUT/root.test" .
(cd tools && GOGC=$BUILD_GOGC go build -trimpath -o "$OUT/benchtable" ./benchtable)

# A run killed earlier may have left a cluster behind.
hack/cluster.sh down >/dev/null 2>&1 || true
trap 'hack/cluster.sh down' EXIT
hack/cluster.sh up --control-plane-only

# -benchtime 1x: each run of a benchmark is one whole scenario (see test/bench/bench_test.go).
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# Every benchmark but the fleet -count N times, then the fleet (BenchmarkFleet, test/bench/fleet_test.go)
# once: one run of it is several minutes, and its figures are rates over many requests.
# bench BINARY ARGS...: BINARY is bench.test (test/bench) or root.test (the root's, build tag
# root: BenchmarkTmpfsWrite).
bench() {
	local binary=$1
	shift
	local args=(-test.run '^$' -test.benchtime 1x -test.timeout 60m "$@")
	hack/cluster.sh exec -- env \
		DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi" \
		KUBECTL="$KBIN/kubectl" \
		BENCH_SMOKE="${BENCH_SMOKE:-}" \
		"$OUT/$binary" "${args[@]}"
}
fleet_filter=$filter
[[ $filter == . ]] && fleet_filter='^BenchmarkFleet$'
set +e
{
	bench root.test -test.bench "$filter" -test.count "$count"
	s0=$?
	bench bench.test -test.bench "$filter" -test.count "$count" -test.skip '^BenchmarkFleet$'
	s1=$?
	s2=0
	if [[ $fleet_filter == *Fleet* ]]; then
		bench bench.test -test.count 1 -test.bench "$fleet_filter"
		s2=$?
	fi
	exit $((s0 | s1 | s2))
} | tee "$OUT/raw.txt"
status=${PIPESTATUS[0]}
set -e
wall=$(($(date +%s) - start))
load="$load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after (wall times depend on what else runs)"
echo "benchmarks finished in ${wall} s (exit status $status)"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit="$commit (with uncommitted changes)"
command="make bench" smoke=false
[[ -n ${BENCH_SMOKE:-} ]] && command="BENCH_SMOKE=1 make bench" smoke=true
# What the benchmarks ran against: the API server and etcd (they play the kubelet: no kubelet or
# container runtime is involved), and the committed BENCHMARKS.md as the run to compare with.
platform="Kubernetes $("$KBIN/kube-apiserver" --version | awk '{print $2}') (kube-apiserver), etcd $("$KBIN/etcd" --version | awk '/etcd Version/ {print $3}')"
"$OUT/benchtable" -in "$OUT/raw.txt" -out "$OUT/BENCHMARKS.md" -details "$OUT/details.md" -commit "$commit" \
	-wall "$((wall / 60)) min $((wall % 60)) s" -command "$command" -smoke="$smoke" -load "$load" \
	-nodes "$ROOT/_output/nodes-api.txt" -platform "$platform" -baseline BENCHMARKS.md
if ((status == 0)) && [[ -z ${BENCH_SMOKE:-} && $filter == . ]]; then
	cp "$OUT/BENCHMARKS.md" BENCHMARKS.md
	echo "wrote BENCHMARKS.md; beside the previous run: $OUT/details.md"
else
	echo "wrote $OUT/BENCHMARKS.md (BENCHMARKS.md is only replaced by a full, successful run)"
fi
exit "$status"
