#!/usr/bin/env bash
# Runs the whole test suite against local clusters that it brings up and always tears down:
# `make test`, everything CI runs (.ci/run). Needs root. First it builds what the phases run (make
# vet tools-main build tools-test ...: the linters run there). The suites, by what they need
# (test/README.md): the root's tests of the mount code (build tag root) and test/ (its own Go
# module): e2e/api, e2e/pods, e2e/nodes, manifests. Phases, each on a cluster of its own:
#   1. the newest supported minor, one node: the root module's tests with the tag root (the unit
#      tests and the mount tests), then test/'s e2e/api, e2e/pods, manifests and e2e/framework;
#   2. the newest minor, three nodes (NODES=3): the multi-node suite (test/e2e/nodes), then a short
#      soak (test/e2e/soak: SOAK_DURATION, default 2m; `make soak` runs longer ones);
#   3. a smoke of every benchmark (BENCH_SMOKE=1 hack/bench.sh) on a control plane; then every
#      fuzz target (hack/fuzz.sh) in the background, beside the older minors' phases;
#   4. each older supported minor (hack/lib/versions.sh), one node: the tests that prove a user's
#      install works there (hack/matrixtests/matrix.txt: packages of test/ and test names, checked
#      to exist before any cluster starts). Their binaries build in the background from the start.
# Beside them all, from the start, in the background: the next minor before it ships
# (hack/kube-next.sh: the driver's unit tests against its pre-release client libraries, and
# env-file's output read by its kubelet's parser; no cluster).
# After each phase `down` must leave nothing behind (hack/cluster.sh check-down).
# A phase that needs no kubelet, for hosts that cannot run this harness's nodes (cgroup v2):
#   0. `make test-api` (TEST_NODES=0): a control plane alone (hack/cluster.sh up
#      --control-plane-only: etcd, API server, controller manager; no kubelet, no container
#      runtime, no cgroups): the root module's tests with the tag root, and test/'s e2e/api,
#      manifests and e2e/framework: every suite but the pod and node suites.
# KUBE_VERSION=1.NN: phases 1 and 2 on that minor only: no benchmarks, fuzzing or matrix.
# TEST_ARGS: more `go test` flags for the phases (with TEST_ARGS, phases 3 and 4 are skipped). A
# -run in it picks the phase: the three-node one if it names TestNodes, else the one-node one.
# TEST_PACKAGES: the one-node (or control-plane) phase's packages of test/ (default below).
# TEST_NODES: the phases to run on the main minor ("1 3" by default, or as the -run picks; 0: the
# control-plane phase); set, phases 3 and 4 are skipped.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
# shellcheck source=hack/lib/goenv.sh
source hack/lib/goenv.sh
main_minor=$(kube_minor)
# Each test binary runs through GO_TEST_EXEC (gotest, below): an -exec of the caller's would run
# them with the build's GOGC.
case " ${TEST_ARGS:-} " in
*" -exec"*) echo "TEST_ARGS may not set -exec: the test binaries run through hack/lib/goenv.sh's GO_TEST_EXEC" >&2; exit 2 ;;
esac
# The host first, in a second, before anything is built: what it lacks, if anything, is listed.
if [[ ${TEST_NODES:-} == 0 ]]; then
	hack/cluster.sh check-host --control-plane-only
else
	hack/cluster.sh check-host
fi
# A whole run: no minor asked for, no tests or phases picked. Only a whole run has the benchmarks'
# and fuzz targets' phase, the older minors' (the matrix) and the next minor's.
whole_run=0 matrix=()
if [[ -z ${KUBE_VERSION:-} && -z ${TEST_ARGS:-} && -z ${TEST_NODES:-} ]]; then
	whole_run=1 matrix=("${KUBE_MINORS[@]:1}")
else
	echo "KUBE_VERSION, TEST_ARGS or TEST_NODES set: no benchmarks, fuzzing or older minors in this run"
fi
# What proves a user's install works on a minor: hack/matrixtests/matrix.txt. A test it names that
# no longer exists (renamed, removed) fails here, naming the line, before any cluster is started;
# otherwise the older minors would silently run fewer tests.
if ((${#matrix[@]})); then
	go test -count=1 -run '^TestMatrixNamesExistingTests$' ./hack/matrixtests ||
		{ echo "hack/matrixtests/matrix.txt names a test that does not exist (above)" >&2; exit 1; }
fi
MATRIX_TESTS=$(awk '!/^#/ && NF == 2 { printf "%s%s", sep, $2; sep = "|" }' hack/matrixtests/matrix.txt)
MATRIX_TESTS="^($MATRIX_TESTS)\$"
mapfile -t MATRIX_PACKAGES < <(awk '!/^#/ && NF == 2 { print "./" $1 }' hack/matrixtests/matrix.txt | sort -u)
if [[ -z ${TEST_NODES:-} ]]; then
	TEST_NODES="1 3"
	if [[ ${TEST_ARGS:-} == *-run* ]]; then
		if [[ $TEST_ARGS == *TestNodes* || $TEST_ARGS == *TestSoak* ]]; then TEST_NODES=3; else TEST_NODES=1; fi
	fi
fi

# A run killed earlier may have left a cluster behind.
hack/cluster.sh down >/dev/null 2>&1 || true
mkdir -p _output
# lowest_priority: a command prefix. "${lowest_priority[@]}" CMD... & runs CMD in a session of its
# own (setsid -w; as a simple command in the background it keeps the job's PID, which is then that
# of its process group) at the lowest CPU and I/O priority, its scheduler autogroup niced too (with
# autogroups a process's nice counts only within its session), and the first process the kernel
# kills should memory run short: the clusters, the tests and the builds they wait for come first.
# shellcheck disable=SC2016 # expanded by the inner bash
lowest_priority=(setsid -w bash -c '{ echo 19 >/proc/self/autogroup; echo 1000 >/proc/self/oom_score_adj; } 2>/dev/null
	exec nice -n 19 ionice -c 3 "$@"' lowest_priority)
# low_priority: the same for a job that must never wait long, the fuzz targets' (one input that
# takes over 10 s counts as a hang, and its input would be saved as a failure): nice 10 (its
# autogroup weighs about a tenth of a test's), its I/O in the normal class, no OOM preference.
# shellcheck disable=SC2016 # expanded by the inner bash
low_priority=(setsid -w bash -c 'echo 10 >/proc/self/autogroup 2>/dev/null; exec nice -n 10 "$@"' low_priority)
# The older minors' Kubernetes and etcd (`hack/build-tools.sh older`, for the matrix) build in the
# background from the start, beside the builds below and then the newest minor's phases: on a cold
# build cache they are about half of the suite's compiling, and the phases leave the cores idle
# much of the time. One minor at a time (BUILD_JOBS=1). When everything is built it is done in
# seconds. The matrix waits for it.
older_build=
if ((${#matrix[@]})); then
	"${lowest_priority[@]}" env BUILD_JOBS=1 hack/build-tools.sh older >_output/build-older.log 2>&1 &
	older_build=$!
fi
# The next minor's unit tests (hack/kube-next.sh), from the start at the lowest priority too: it
# compiles with another Go, so it shares no compiled package with the builds it runs beside.
next_run=
if ((whole_run)); then
	# At most an hour: a stalled module proxy fails it rather than holding the run.
	"${lowest_priority[@]}" timeout --kill-after=1m 60m hack/kube-next.sh >_output/kube-next.log 2>&1 &
	next_run=$!
fi
# The fuzz targets' run (started after the newest minor's phases, below).
fuzz_run=
# On the way out, the background jobs too if they still run (each its own process group).
# shellcheck disable=SC2317 # called by the EXIT trap
stop_background() {
	local pid
	for pid in $older_build $next_run $fuzz_run; do
		if jobs -rp | grep -qx "$pid"; then kill -- -"$pid" 2>/dev/null || true; fi
	done
}
trap 'stop_background; hack/cluster.sh down' EXIT
# What the phases run, built first: for make test the linters (vet), the newest minor's cluster,
# the driver, the release tools' tests (tools-test) and what the pod suite's `make release` runs
# outside the cluster's network namespace (ociimage, cosign); for the control-plane phase (make
# test-api) its control plane alone.
if [[ $TEST_NODES == 0 ]]; then
	make deps tools-api build
else
	make vet tools-main build tools-test _output/bin/ociimage cosign
fi
start=$(date +%s)

# The crash tests run the driver's test build, with its crash points compiled in (internal/crashpoint).
GOGC=$BUILD_GOGC CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -tags crashpoints -o _output/bin/shared-resource-csi-crashpoints .
# Modules are downloaded first, the driver's and test/'s: there is no route out of the cluster's
# network namespace.
go mod download
go -C test mod download

# gotest MINOR LOG DIR ARGS...: `go test` in DIR (the root, or test/) inside the network
# namespace of the cluster of MINOR, where the API server is reachable. -p 1: one package at a
# time (the suites share the cluster and its node), each with -parallel 4 as one package had. The
# go command compiles with GOGC=$BUILD_GOGC; each test binary runs with GO_TEST_EXEC's (goenv.sh).
gotest() {
	local minor=$1 log=$2 dir=$3
	shift 3
	KUBE_VERSION=$minor hack/cluster.sh exec -- env \
		DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi" \
		CRASH_DRIVER_BINARY="$ROOT/_output/bin/shared-resource-csi-crashpoints" \
		KUBECTL="$(kube_bin_dir "$ROOT" "$minor")/kubectl" \
		HELM="$ROOT/_output/bin/helm" \
		SRCSI_NODES_API_OUT="$ROOT/_output/nodes-api.txt" \
		GOGC="$BUILD_GOGC" \
		go -C "$dir" test -exec "$GO_TEST_EXEC" -count=1 -timeout 40m -p 1 -parallel 4 -v "$@" 2>&1 | tee "$log"
	return "${PIPESTATUS[0]}"
}
# The one-node phase's packages of test/: the driver against the API server, real pods, the chart
# and monitoring files (helm, promtool; no cluster), and the framework's own tests. The
# control-plane phase's: the same but the pods.
if [[ $TEST_NODES == *1* ]]; then
	TEST_PACKAGES=${TEST_PACKAGES:-./e2e/api ./e2e/pods ./manifests ./e2e/framework}
else
	TEST_PACKAGES=${TEST_PACKAGES:-./e2e/api ./manifests ./e2e/framework}
fi

status=0
set +e
# The one-node phase, or the control-plane phase (the same tests but the pod suite's, on any host).
if [[ $TEST_NODES == *1* || $TEST_NODES == *0* ]]; then
	if [[ $TEST_NODES == *1* ]]; then
		KUBE_VERSION=$main_minor NODES=1 hack/cluster.sh up || exit 1
		echo "cluster of 1 node (Kubernetes $main_minor) up in $(($(date +%s) - start)) s"
	else
		KUBE_VERSION=$main_minor hack/cluster.sh up --control-plane-only || exit 1
		echo "control plane (Kubernetes $main_minor, no nodes) up in $(($(date +%s) - start)) s"
	fi
	# The root module (its unit tests, hack/'s tools' tests and, as root, the mount tests: build tag root) beside test/'s
	# suites, as they ran in one test binary before: its log is _output/test-root.log.
	# shellcheck disable=SC2086 # TEST_ARGS is a list of flags
	gotest "$main_minor" _output/test-root.log "$ROOT" -tags root ${TEST_ARGS:-} . ./internal/... ./hack/... >/dev/null &
	root_pid=$!
	# shellcheck disable=SC2086 # TEST_ARGS and TEST_PACKAGES are lists
	gotest "$main_minor" _output/test.log "$ROOT/test" ${TEST_ARGS:-} $TEST_PACKAGES
	status=$?
	wait "$root_pid"
	root_status=$?
	grep -E '^(ok|FAIL)|--- FAIL' _output/test-root.log
	if ((root_status != 0)); then
		# Its failures in full: the log is otherwise only on the machine.
		grep -B 2 -A 30 -- '--- FAIL' _output/test-root.log | grep -vE '^[IEW][0-9]{4} ' | head -400
	fi
	((status != 0)) || status=$root_status
	# Nothing may be left behind of one node (or of the control plane) either.
	hack/cluster.sh down && hack/cluster.sh check-down
	down_status=$?
	((status != 0)) || status=$down_status
	echo "phase finished after $(($(date +%s) - start)) s"
fi
if [[ $TEST_NODES == *3* ]]; then
	phase=$(date +%s)
	KUBE_VERSION=$main_minor NODES=3 hack/cluster.sh up || exit 1
	echo "cluster of 3 nodes (Kubernetes $main_minor) up in $(($(date +%s) - phase)) s"
	if [[ ${TEST_ARGS:-} != *-run* || $TEST_ARGS == *TestNodes* ]]; then
		# shellcheck disable=SC2086
		gotest "$main_minor" _output/test-nodes.log "$ROOT/test" -run '^TestNodes' ${TEST_ARGS:-} ./e2e/nodes
		nodes_status=$?
		((status != 0)) || status=$nodes_status
	fi
	# The short soak on the same cluster (docs/reliability.md): the same workload, faults and
	# checker as `make soak`, for SOAK_DURATION. Its histories and logs: _output/soak/.
	if [[ ${TEST_ARGS:-} != *-run* || $TEST_ARGS == *TestSoak* ]]; then
		soak=$(date +%s)
		SOAK_DURATION=${SOAK_DURATION:-2m} SOAK_OUT=$ROOT/_output/soak/test-$(date -u +%Y%m%d-%H%M%S) \
			gotest "$main_minor" _output/test-soak.log "$ROOT/test" -run '^(TestSoak|TestChecker)' ./e2e/soak
		soak_status=$?
		((status != 0)) || status=$soak_status
		echo "short soak took $(($(date +%s) - soak)) s"
	fi
	# `down` must leave nothing behind of three nodes either: a test of the harness itself.
	hack/cluster.sh down && hack/cluster.sh check-down
	down_status=$?
	((status != 0)) || status=$down_status
	echo "three-node phase took $(($(date +%s) - phase)) s"
fi
# A whole run goes on with what needs no node. Every benchmark, shrunk and run once (BENCH_SMOKE=1
# make bench): they must run; their numbers fail nothing. On a control plane of its own, while the
# older minors' build goes on beside it.
if ((whole_run)); then
	phase=$(date +%s)
	BENCH_SMOKE=1 hack/bench.sh
	bench_status=$?
	((status != 0)) || status=$bench_status
	echo "benchmark smoke took $(($(date +%s) - phase)) s"
	# Then every fuzz target for its count of executions (hack/fuzz.sh: no cluster, no root), in
	# the background beside the older minors' build and phases, which leave a core idle. Not
	# earlier, beside builds at normal priority that keep both cores busy for minutes.
	"${low_priority[@]}" hack/fuzz.sh >_output/fuzz.log 2>&1 &
	fuzz_run=$!
fi
# The older minors, one after another: each cluster takes the machine's /var/lib/kubelet, its
# ports and network namespace, so two cannot run side by side here. Their binaries first.
if [[ -n $older_build ]]; then
	waited=$(date +%s)
	# Now the matrix waits for it and only the fuzz targets run beside it (nice 10): its CPU and
	# I/O priority back to normal, its autogroup's (the session's) and each of its processes'
	# (their process group's), so that the fuzz targets do not hold back what the run waits for.
	{
		echo 0 >"/proc/$older_build/autogroup"
		renice -n 0 -g "$older_build"
		ionice -c 2 -n 4 -P "$older_build"
	} >/dev/null 2>&1 || true
	wait "$older_build"
	older_status=$?
	older_build=
	# Killed (by the OOM killer, which takes it first): once more, in the foreground, from where
	# it stopped.
	if ((older_status >= 128)); then
		echo "the older minors' build was killed (signal $((older_status - 128))): building them again, in the foreground"
		BUILD_JOBS=1 hack/build-tools.sh older >>_output/build-older.log 2>&1
		older_status=$?
	fi
	grep -E '^(built|FAILED)' _output/build-older.log
	echo "the older minors' build: waited $(($(date +%s) - waited)) s for it"
	if ((older_status != 0)); then
		echo "the older minors' build failed (_output/build-older.log, above): their phases cannot run" >&2
		tail -n 40 _output/build-older.log
		status=1
		matrix=()
	fi
fi
for minor in "${matrix[@]}"; do
	phase=$(date +%s)
	KUBE_VERSION=$minor NODES=1 hack/cluster.sh up || exit 1
	echo "cluster of 1 node (Kubernetes $minor) up in $(($(date +%s) - phase)) s"
	gotest "$minor" "_output/test-$minor.log" "$ROOT/test" -run "$MATRIX_TESTS" "${MATRIX_PACKAGES[@]}"
	minor_status=$?
	((status != 0)) || status=$minor_status
	hack/cluster.sh down && hack/cluster.sh check-down
	down_status=$?
	((status != 0)) || status=$down_status
	echo "Kubernetes $minor phase took $(($(date +%s) - phase)) s"
done
if [[ -n $fuzz_run ]]; then
	waited=$(date +%s)
	wait "$fuzz_run"
	fuzz_status=$?
	fuzz_run=
	echo "the fuzz targets' run: waited $(($(date +%s) - waited)) s for it"
	if ((fuzz_status != 0)); then
		cat _output/fuzz.log
		echo "a fuzz target failed (_output/fuzz.log, above)" >&2
		status=1
	else
		sed -n '/^fuzz summary:/,$p' _output/fuzz.log
	fi
fi
if [[ -n $next_run ]]; then
	waited=$(date +%s)
	wait "$next_run"
	next_status=$?
	next_run=
	echo "the next minor's run: waited $(($(date +%s) - waited)) s for it"
	if ((next_status != 0)); then
		tail -n 60 _output/kube-next.log
		echo "the next minor's unit tests or env-file parser test failed (_output/kube-next.log, above)" >&2
		status=1
	else
		grep -E '^(ok|the |built |downloading )' _output/kube-next.log
	fi
fi
echo "tests finished in $(($(date +%s) - start)) s"
exit "$status"
