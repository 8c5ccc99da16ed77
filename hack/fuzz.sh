#!/usr/bin/env bash
# Fuzzes each fuzz target of the package for ${FUZZTIME:-20s}, one after another (go test -fuzz
# takes one target per run), and prints the executions each reached. Needs neither root nor a
# cluster. FUZZ_TARGETS="FuzzA FuzzB" picks targets; by default every Fuzz* function is run.
#
# A failure prints the input and saves it under testdata/fuzz/<target>/: commit that file, and
# plain `go test` replays it from then on as a regression test.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
FUZZTIME=${FUZZTIME:-20s}
targets=${FUZZ_TARGETS:-$(go test -list '^Fuzz' . | grep '^Fuzz' || true)}
[[ -n $targets ]] || { echo "no fuzz targets found" >&2; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
summary=""
for t in $targets; do
	echo "=== $t for $FUZZTIME"
	set +e
	go test -run "^${t}\$" -fuzz "^${t}\$" -fuzztime "$FUZZTIME" . 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	# The last progress line carries the total, e.g. "fuzz: elapsed: 20s, execs: 123456 (6172/sec), ...".
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
	result=ok
	if [[ $rc != 0 ]]; then
		result=FAIL
		status=1
	fi
	summary+=$(printf '%-28s %-4s %12s executions in %s' "$t" "$result" "${execs:-?}" "$FUZZTIME")$'\n'
done
echo
echo "fuzz summary:"
printf '%s' "$summary"
exit "$status"
