#!/usr/bin/env bash
# Kubernetes' own storage e2e suite (the External Storage suite of k8s.io/kubernetes test/e2e, at
# the cluster's version) against the deployed driver, through hack/e2e-storage/testdriver.yaml.
# Run inside the local cluster's network namespace, with the driver deployed:
#
#   hack/cluster.sh exec -- hack/e2e-storage.sh
#
# hack/test.sh runs it after the go test run (whose pod suite deploys the driver with Helm);
# after `make up` the command above runs it against deploy.yaml's driver.
#
#   1. imports the cluster's busybox under the exact name the suite's pods run
#      (e2e-storage.test --default-test-image; there is no registry to pull it from)
#   2. creates the share the test driver file names (hack/e2e-storage/fixtures.yaml), and removes
#      it on exit
#   3. runs every External Storage test of this driver but the ones skipped by name below; the
#      suite skips the rest itself (see README, "Tests")
#   4. fails unless the run passed and exactly the expected tests passed: an unknown key in the
#      driver file is ignored silently, and a suite that ran nothing would otherwise pass
#
# Output: _output/e2e-storage/e2e-storage.log and junit_01.xml. Environment (from
# _output/cluster/env through `hack/cluster.sh exec`): KUBECONFIG, SRCSI_NODE_NAME;
# E2E_STORAGE_TIMEOUT_MINUTES (default 15) bounds the suite.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN=$ROOT/_output/bin
OUT=$ROOT/_output/e2e-storage
DRIVER=csi.sharedresource.openshift.io
DRIVER_RE='csi\.sharedresource\.openshift\.io'
TIMEOUT_MIN=${E2E_STORAGE_TIMEOUT_MINUTES:-15}

log() { printf '[e2e-storage] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# The cluster's own kubectl (its minor's, from the env file `hack/cluster.sh exec` reads).
k() { "${SRCSI_KUBECTL:?run through hack/cluster.sh exec}" "$@"; }

# The tests that must pass, by their full names: the CSI ephemeral in-line pattern, with the
# driver file's volume (ReadOnly: true, Shared: true). With ReadOnly: true the suite skips its
# tests of volumes mounted without readOnly ("two pods which have the same volume definition",
# "multiple inline ephemeral volumes"), which the driver refuses (hack/e2e-storage/testdriver.yaml).
prefix="External Storage [Driver: $DRIVER] [Testpattern: CSI Ephemeral-volume (default fs)] ephemeral"
expected=(
	"$prefix should create read-only inline ephemeral volume"
)
# Skipped by name (regexps; README, "Tests", says why):
skips=(
	# checks that the pod's mount is rw; the driver mounts every volume read-only
	'\[Testpattern: CSI Ephemeral-volume \(default fs\)\] ephemeral should create read/write inline ephemeral volume'
	# about PVCs of generic ephemeral volumes; for this pattern the test only skips itself
	'\[Testpattern: CSI Ephemeral-volume \(default fs\)\] ephemeral should support expansion of pvcs created for ephemeral pvcs'
)

[[ -n ${KUBECONFIG:-} ]] || die "KUBECONFIG is not set: run me with hack/cluster.sh exec -- $0"
[[ -n ${SRCSI_NODE_NAME:-} ]] || die "SRCSI_NODE_NAME is not set: run me with hack/cluster.sh exec -- $0"
for b in e2e-storage.test mkimage; do
	[[ -x $BIN/$b ]] || die "missing $BIN/$b: run hack/build-tools.sh"
done
k get --raw /readyz >/dev/null 2>&1 ||
	die "the API server does not answer: is the cluster up, and am I in its network namespace (hack/cluster.sh exec)?"
# The kubelet must have the driver registered, or every test waits out its pod start timeout.
[[ " $(k get csinode "$SRCSI_NODE_NAME" -o 'jsonpath={.spec.drivers[*].name}' 2>/dev/null) " == *" $DRIVER "* ]] ||
	die "the driver is not registered on node $SRCSI_NODE_NAME: deploy it first (make up, or the pod suite of make test)"

rm -rf "$OUT"
mkdir -p "$OUT"

# 1. The image, under the name the suite asks for. Its last line: the framework logs to stdout.
image=$("$BIN/e2e-storage.test" --provider=skeleton --kubeconfig="$KUBECONFIG" --default-test-image | tail -n 1) ||
	die "e2e-storage.test --default-test-image failed"
[[ $image =~ ^[a-z0-9.-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$ ]] || die "unexpected test image name: $image"
hack/cluster.sh import-busybox "$image"

# 2. The share. Removed on exit, waiting until its namespace is gone: a run right after this one
# could not create the Secret in a namespace still terminating.
cleanup() {
	k delete -f hack/e2e-storage/fixtures.yaml --ignore-not-found --timeout=120s >/dev/null 2>&1 ||
		log "warning: could not delete the fixtures (hack/e2e-storage/fixtures.yaml)"
}
trap cleanup EXIT
k apply -f hack/e2e-storage/fixtures.yaml >/dev/null
# Ready: the driver can read the Secret; a broken share fails here, not in every test's pod start.
k wait --for=condition=Ready sharedsecret/e2e-storage --timeout=60s >/dev/null ||
	die "SharedSecret e2e-storage is not Ready: $(k get sharedsecret e2e-storage -o 'jsonpath={.status.conditions}')"

# 3. The suite. The focus is every External Storage test of this driver, so the report also shows
# that all the others skip themselves (no StorageClass, no snapshots, ...). The ginkgo timeout
# reports what was running; -test.timeout is the backstop with a goroutine dump.
skip=$(IFS='|'; echo "${skips[*]}")
log "running the External Storage suite for $DRIVER (image $image, timeout ${TIMEOUT_MIN}m)"
set +e
"$BIN/e2e-storage.test" \
	--provider=skeleton \
	--kubeconfig="$KUBECONFIG" \
	--storage.testdriver="$ROOT/hack/e2e-storage/testdriver.yaml" \
	--report-dir="$OUT" \
	--disable-log-dump \
	-ginkgo.focus="External Storage \[Driver: $DRIVER_RE\]" \
	-ginkgo.skip="$skip" \
	-ginkgo.timeout="${TIMEOUT_MIN}m" \
	-ginkgo.no-color \
	-ginkgo.v \
	-test.timeout="$((TIMEOUT_MIN + 5))m" \
	>"$OUT/e2e-storage.log" 2>&1
status=$?
set -e
tail -n 20 "$OUT/e2e-storage.log" >&2

# 4. What ran. Each spec is a <testcase name="[It] FULL NAME" classname=... status="passed|skipped|
# failed|...">; the suite's setup nodes ([BeforeSuite], ...) are testcases too.
junit=$OUT/junit_01.xml
[[ -s $junit ]] || die "no JUnit report ($junit); exit status $status; log: $OUT/e2e-storage.log"
cases=$(grep -o '<testcase name="[^"]*" classname="[^"]*" status="[^"]*"' "$junit" |
	sed -E 's/^<testcase name="([^"]*)" classname="[^"]*" status="([^"]*)"$/\2\t\1/') || true
passed=$(awk -F'\t' '$1 == "passed" && $2 ~ /^\[It\] / {sub(/^\[It\] /, "", $2); print $2}' <<<"$cases" | sort)
bad=$(awk -F'\t' '$1 != "passed" && $1 != "skipped"' <<<"$cases")
want=$(printf '%s\n' "${expected[@]}" | sort)
npassed=$(grep -c . <<<"$passed" || true)
nskipped=$(awk -F'\t' '$1 == "skipped"' <<<"$cases" | wc -l)
log "passed $npassed (expected ${#expected[@]}), skipped $nskipped: ${#skips[@]} by name, the others by the suite itself:"
# A spec that skips itself says why; one skipped by -ginkgo.skip says only "skipped".
grep -o '<skipped message="skipped - [^"]*"' "$junit" | sed -E 's/^<skipped message="skipped - (.*)"$/\1/; s/&#34;/"/g' |
	sort | uniq -c | sort -rn | sed 's/^/    /' >&2 || true
fail=0
if [[ -n $bad ]]; then
	log "not passed:"
	sed 's/^/    /' <<<"$bad" >&2
	fail=1
fi
if [[ $passed != "$want" ]]; then
	log "the tests that passed are not the expected ones"
	diff <(echo "$want") <(echo "$passed") | sed 's/^/    /' >&2 || true
	fail=1
fi
if ((status != 0)); then
	log "e2e-storage.test exited with status $status"
	fail=1
fi
((fail == 0)) || die "the storage e2e suite failed; log: $OUT/e2e-storage.log, report: $junit"
log "passed: the ${#expected[@]} expected tests (report: $junit)"
