#!/usr/bin/env bash
# Fuzzes each fuzz target of the module's packages (the driver's, and internal/atomicwriter's),
# one after another (go test -fuzz takes one target of one package per run), and prints the
# executions each reached. Needs neither root nor a cluster.
#
#   FUZZ_TARGETS="FuzzA FuzzB"  picks targets by name; by default every Fuzz* function is run.
#   FUZZ_SCALE=N                multiplies every target's execution budget (default 1).
#   FUZZTIME=30s                fuzzes each target for a duration instead of a count.
#
# Why counts by default: with a duration, Go 1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" failure at the very end of the run when a worker is still busy
# (golang/go#75804, fixed in Go 1.27). A count (-fuzztime Nx) has no deadline to race. The
# budgets below take about 20 s each on a 2-core machine, the budget's world about 40 s; a target
# missing from the table gets the default.
#
# A failure prints the input and saves it under <package dir>/testdata/fuzz/<target>/: commit
# that file, and plain `go test` replays it from then on as a regression test.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib/goenv.sh
source hack/lib/goenv.sh

declare -A budget=(
	[FuzzParsePublishRequest]=40000
	[FuzzValidateTargetPath]=30000
	[FuzzValidateKey]=60000
	[FuzzWrite]=5000
	[FuzzParseMountInfo]=50000
	[FuzzBudgetFollowsSavedRecords]=4000 # a fake node per input: some 100 a second
)
default_budget=20000
scale=${FUZZ_SCALE:-1}
[[ $scale =~ ^[1-9][0-9]*$ ]] || { echo "FUZZ_SCALE must be a positive integer, got '$scale'" >&2; exit 2; }

# Every fuzz target as "<package> <target>", the package relative to the module root ("." or
# "./internal/..."), in the order go list gives the packages.
module=$(go list -m)
pairs=()
found=" "
for ip in $(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do
	pkg=.${ip#"$module"}
	for t in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found+="$t "
		if [[ -z ${FUZZ_TARGETS:-} || " $FUZZ_TARGETS " == *" $t "* ]]; then
			pairs+=("$pkg $t")
		fi
	done
done
for t in ${FUZZ_TARGETS:-}; do
	[[ $found == *" $t "* ]] || { echo "no fuzz target $t in any package (found:$found)" >&2; exit 2; }
done
[[ ${#pairs[@]} -gt 0 ]] || { echo "no fuzz targets found" >&2; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
summary=""
for pair in "${pairs[@]}"; do
	read -r pkg t <<<"$pair"
	if [[ -n ${FUZZTIME:-} ]]; then
		limit=$FUZZTIME
	else
		limit="$(( ${budget[$t]:-$default_budget} * scale ))x"
	fi
	echo "=== $t ($pkg), -fuzztime $limit"
	start=$SECONDS
	set +e
	GOGC=$BUILD_GOGC go test -run "^${t}\$" -fuzz "^${t}\$" -fuzztime "$limit" "$pkg" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	# The last progress line carries the total, e.g. "fuzz: elapsed: 20s, execs: 123456 (6172/sec), ...".
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
	result=ok
	if [[ $rc != 0 ]]; then
		result=FAIL
		status=1
	fi
	summary+=$(printf '%-28s %-4s %12s executions in %ss' "$t" "$result" "${execs:-?}" "$((SECONDS - start))")$'\n'
done
echo
echo "fuzz summary:"
printf '%s' "$summary"
exit "$status"
