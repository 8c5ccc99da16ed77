#!/usr/bin/env bash
# The next Kubernetes minor, before it ships (hack/lib/versions.sh: KUBE_NEXT), with no cluster
# and no root:
#   1. the driver built and its unit tests run (`go test . ./internal/...`, as `make unit` but
#      hack/'s) against that minor's pre-release client libraries;
#   2. env-file's output read by that minor's kubelet's own env file parser (tools/kubeletenv;
#      `make tools-test` runs the same tests against the newest supported minor's).
# Each module builds from a scratch copy of its go.mod under _output/kube-next (go -modfile), so
# the shipped go.mod and tools/go.mod stay on the newest supported minor's. Needs the Go module
# proxy: the pre-release, and the Go it requires (KUBE_NEXT_GO, through GOTOOLCHAIN). `make test`
# runs it beside its clusters; `make kube-next` alone. Log: stdout; scratch files: _output/kube-next.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
# shellcheck source=hack/lib/goenv.sh
source hack/lib/goenv.sh
export GOTOOLCHAIN=$KUBE_NEXT_GO GOWORK=off
# What it downloads is checked against the checksum database, whatever the caller's settings:
# no go env file, no module exempted from the check, no plain HTTP, and none of the caller's
# GOFLAGS (-mod=mod would let a build add a module it finds missing).
export GOENV=off GOSUMDB=sum.golang.org GONOSUMDB='' GONOSUMCHECK='' GOPRIVATE='' GOINSECURE='' \
	GOFLAGS="-buildvcs=false -trimpath -gcflags=all=-dwarf=false"
[[ $KUBE_NEXT =~ ^v1\.([0-9]+)\. ]] || { echo "KUBE_NEXT=$KUBE_NEXT: want v1.NN.x" >&2; exit 2; }
staging=v0.${KUBE_NEXT#v1.}
out=$ROOT/_output/kube-next
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)

# standins MODFILE: each KUBE_NEXT_STANDINS module that MODFILE requires at a version the module
# proxy refuses is replaced by its stand-in; one the proxy now serves is said, for its removal.
standins() {
	local modfile=$1 s mod wanted
	for s in "${KUBE_NEXT_STANDINS[@]}"; do
		mod=${s%@*}
		wanted=$(go list -modfile="$modfile" -m -f '{{.Version}}' "$mod" 2>/dev/null) || continue
		# Only a version the proxy says it does not have is stood in for; any other failure (a
		# checksum mismatch, the proxy or the checksum database unreachable) fails the run.
		if err=$(go mod download -modfile="$modfile" "$mod@$wanted" 2>&1 >/dev/null); then
			echo "the stand-in $s is not needed: $mod@$wanted is served now (remove it from hack/lib/versions.sh)"
		elif grep -qE '(403 Forbidden|404 Not Found|410 Gone|not available|unknown revision)' <<<"$err"; then
			echo "the stand-in $s replaces $mod@$wanted, which the module proxy does not serve"
			go mod edit -replace="$mod=$s" "$modfile"
		else
			echo "downloading $mod@$wanted failed: $err" >&2
			return 1
		fi
	done
}

# 1. The driver: go.mod with each Kubernetes staging module it requires (v0.MINOR.x) moved to the
# pre-release's; what they require in turn comes with them.
cp go.mod "$out/driver.mod"
cp go.sum "$out/driver.sum"
mapfile -t libs < <(awk -v v="$staging" '$1 ~ /^k8s\.io\/[a-z-]+$/ && $2 ~ /^v0\.[0-9]+\.[0-9]+$/ { print $1 "@" v }' go.mod)
((${#libs[@]} >= 3)) || { echo "found only ${#libs[@]} Kubernetes staging modules in go.mod: ${libs[*]}" >&2; exit 1; }
echo "the driver against ${libs[*]} ($KUBE_NEXT_GO)"
go get -modfile="$out/driver.mod" "${libs[@]}"
standins "$out/driver.mod"
# -e: the pre-release's own tests import modules the proxy does not serve (k8s.io/ktesting);
# the driver's packages and tests do not, or the build below fails.
go mod tidy -e -modfile="$out/driver.mod" 2>"$out/driver-tidy.log" || { cat "$out/driver-tidy.log" >&2; exit 1; }
go list -modfile="$out/driver.mod" -m "${libs[@]%@*}" "${KUBE_NEXT_STANDINS[@]%@*}"
# Tidy may raise what the libraries require; the libraries themselves stay at the pre-release.
for l in "${libs[@]}"; do
	got=$(go list -modfile="$out/driver.mod" -m -f '{{.Version}}' "${l%@*}")
	[[ $got == "$staging" ]] || { echo "${l%@*} is at $got after tidy, not $staging" >&2; exit 1; }
done
GOGC=$BUILD_GOGC go build -mod=readonly -modfile="$out/driver.mod" -o "$out/shared-resource-csi" .
echo "built the driver against $staging in $(($(date +%s) - start)) s"
GOGC=$BUILD_GOGC go vet -mod=readonly -modfile="$out/driver.mod" . ./internal/...
GOGC=$BUILD_GOGC go test -mod=readonly -modfile="$out/driver.mod" -exec "$GO_TEST_EXEC" -count=1 -timeout 30m . ./internal/...
echo "the driver's unit tests against $staging passed after $(($(date +%s) - start)) s"

# 2. The kubelet's env file parser of the pre-release, reading what the driver just built writes.
tools_module=$(go -C tools mod edit -json | sed -n 's/^\t\t"Path": "\(.*\)"$/\1/p' | head -1)
printf 'module %s\n\ngo 1.26.0\n' "$tools_module" >"$out/tools.mod"
go -C tools get -modfile="$out/tools.mod" "k8s.io/kubernetes@$KUBE_NEXT"
DRIVER_BINARY=$out/shared-resource-csi go -C tools test -mod=readonly -modfile="$out/tools.mod" -exec "$GO_TEST_EXEC" -count=1 -v ./kubeletenv
echo "the next minor ($KUBE_NEXT) passed in $(($(date +%s) - start)) s"
