#!/usr/bin/env bash
# Builds the binaries of the local test cluster into _output/bin (gitignored):
#   kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl  (k8s.io/kubernetes)
#   etcd                                                                   (go.etcd.io/etcd/server/v3)
#   helm                                                                   (helm.sh/helm/v4, tools/helm)
#   actionlint                                                             (github.com/rhysd/actionlint, tools/actionlint)
#   cosign       only with `cosign`: for `make release COSIGN_KEY=...`    (github.com/sigstore/cosign/v2, tools/cosign)
#   registry     distribution's registry: the local cluster's OCI registry (github.com/distribution/distribution/v3, tools/registry)
#   mkimage                                                                (tools/mkimage, stdlib only)
#   pause                                                                  (hack/pause.c, gcc -static)
#   e2e-storage.test                                                       (tools/e2e-storage: the e2e framework and
#                                                                           the External Storage suite, k8s.io/kubernetes)
# Versions come from tools/go.mod (helm's from tools/helm/go.mod). Each binary has a stamp file (_output/bin/.NAME.stamp) recording
# what it was built from; a binary is rebuilt only when it is missing or its stamp differs.
# Cold build: ~4 min on 2 cores, and 3-5 min more for e2e-storage.test; warm: seconds; nothing to do: ~1 s.
#
#   hack/build-tools.sh          all of them (`make tools`, for `make test`)
#   hack/build-tools.sh cluster  only what `make up` runs: the Kubernetes commands, etcd, registry, mkimage, pause
#   hack/build-tools.sh helm     helm alone (`make manifests`, `make release`)
#   hack/build-tools.sh actionlint  actionlint alone (`make vet`)
#   hack/build-tools.sh cosign   cosign alone (`make release COSIGN_KEY=...`; ~10 min cold on 2 cores,
#                                so not part of `all`: no test needs it)
#   hack/build-tools.sh registry distribution's registry alone (hack/cluster.sh up starts it)
set -euo pipefail
scope=${1:-all}
case $scope in
all) groups=" kube etcd registry e2e helm actionlint mkimage pause " ;;
cluster) groups=" kube etcd registry mkimage pause " ;;
helm) groups=" helm " ;;
actionlint) groups=" actionlint " ;;
cosign) groups=" cosign " ;;
registry) groups=" registry " ;;
*) echo "usage: $0 [all|cluster|helm|actionlint|cosign|registry]" >&2; exit 2 ;;
esac
# want GROUP: true when this run builds GROUP.
want() { [[ $groups == *" $1 "* ]]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=$ROOT/tools
BIN=$ROOT/_output/bin
mkdir -p "$BIN"

export CGO_ENABLED=0   # static binaries: no dependency on the host's libc
export GOTOOLCHAIN=local
goversion=$(go env GOVERSION)
modver() { (cd "$TOOLS" && go list -m -f '{{.Version}}' "$1"); }
kube_version=$(modver k8s.io/kubernetes)   # e.g. v1.34.4
etcd_version=$(modver go.etcd.io/etcd/server/v3)

# stale NAME WANT: true when NAME is missing or was built from something else.
stale() { [[ ! -x $BIN/$1 ]] || [[ "$(cat "$BIN/.$1.stamp" 2>/dev/null)" != "$2" ]]; }
stamp() { printf '%s\n' "$2" >"$BIN/.$1.stamp"; }

# --- Kubernetes: one `go build` for all stale commands, so they share the compile work.
kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
kube_stamp="kubernetes=$kube_version $goversion"
todo=()
want kube || kube_cmds=()
for c in "${kube_cmds[@]}"; do
	if stale "$c" "$kube_stamp"; then todo+=("$c"); fi
done
# Without these the binaries report v0.0.0-master and the kubelet/apiserver version skew
# checks and `kubectl version` are meaningless.
major=${kube_version#v}; major=${major%%.*}
minor=${kube_version#v*.}; minor=${minor%%.*}
kube_ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
	kube_ldflags+=" -X $p.gitTreeState=clean"
done
if ((${#todo[@]})); then
	echo "building ${todo[*]} ($kube_version)..."
	pkgs=()
	for c in "${todo[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	(cd "$TOOLS" && go build -trimpath -ldflags "$kube_ldflags" -o "$BIN/" "${pkgs[@]}")
	for c in "${todo[@]}"; do stamp "$c" "$kube_stamp"; done
fi

# --- e2e-storage.test: the e2e framework and the External Storage suite at the cluster's version
# (hack/e2e-storage.sh runs it). A test binary, as upstream's e2e.test is (`go test -c`); the same
# flags as the commands above, so it reuses their compiled packages. Rebuilt when the Kubernetes
# version, Go or its own source changes.
e2e_stamp="e2e-storage=kubernetes=$kube_version src=$(cat "$TOOLS"/e2e-storage/*.go | sha256sum | cut -c1-16) $goversion"
if want e2e && stale e2e-storage.test "$e2e_stamp"; then
	echo "building e2e-storage.test ($kube_version)..."
	(cd "$TOOLS" && go test -c -trimpath -ldflags "$kube_ldflags" -o "$BIN/e2e-storage.test" ./e2e-storage)
	stamp e2e-storage.test "$e2e_stamp"
fi

# --- etcd: the package go.etcd.io/etcd/server/v3 is itself the etcd main package.
etcd_stamp="etcd=$etcd_version $goversion"
if want etcd && stale etcd "$etcd_stamp"; then
	echo "building etcd ($etcd_version)..."
	(cd "$TOOLS" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
	stamp etcd "$etcd_stamp"
fi

# module_tool NAME DIR MODULE PKG [SYMBOL]: a tool in its own module (tools/DIR, which pins
# MODULE's version, so its dependencies need not match the cluster's or each other's), built from
# PKG into $BIN/NAME when wanted and missing or built from another version; SYMBOL, when given, is
# the variable the tool reports its version from, set to MODULE's version.
module_tool() {
	local name=$1 dir=$2 module=$3 pkg=$4 symbol=${5:-} version ldflags="-s -w"
	want "$name" || return 0
	version=$(cd "$TOOLS/$dir" && go list -m -f '{{.Version}}' "$module")
	stale "$name" "$name=$version $goversion" || return 0
	[[ -z $symbol ]] || ldflags+=" -X $symbol=$version"
	echo "building $name ($version)..."
	(cd "$TOOLS/$dir" && go build -trimpath -ldflags "$ldflags" -o "$BIN/$name" "$pkg")
	stamp "$name" "$name=$version $goversion"
}

# helm: `make manifests`, `make release` and the pod suite's installs.
module_tool helm helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm helm.sh/helm/v4/internal/version.version
# actionlint: `make vet` checks .github/workflows with it.
module_tool actionlint actionlint github.com/rhysd/actionlint github.com/rhysd/actionlint/cmd/actionlint
# cosign: key-pair signing in `make release COSIGN_KEY=...` (it reports its version from
# sigs.k8s.io/release-utils/version, which its own Makefile sets).
module_tool cosign cosign github.com/sigstore/cosign/v2 github.com/sigstore/cosign/v2/cmd/cosign \
	sigs.k8s.io/release-utils/version.gitVersion
# registry: distribution's registry, the local cluster's (hack/cluster.sh).
module_tool registry registry github.com/distribution/distribution/v3 \
	github.com/distribution/distribution/v3/cmd/registry github.com/distribution/distribution/v3/version.version

# --- mkimage: rebuilt when its source changes.
mk_stamp="mkimage=$(cat "$TOOLS"/mkimage/*.go | sha256sum | cut -c1-16) $goversion"
if want mkimage && stale mkimage "$mk_stamp"; then
	echo "building mkimage..."
	(cd "$TOOLS" && go build -trimpath -o "$BIN/mkimage" ./mkimage)
	stamp mkimage "$mk_stamp"
fi

# --- pause: static so the image needs nothing but the binary.
pause_stamp="pause=$(sha256sum <"$ROOT/hack/pause.c" | cut -c1-16)"
if want pause && stale pause "$pause_stamp"; then
	echo "building pause..."
	gcc -static -Os -Wall -o "$BIN/pause" "$ROOT/hack/pause.c"
	strip "$BIN/pause" 2>/dev/null || true
	stamp pause "$pause_stamp"
fi

echo "tools ($scope) up to date in $BIN"
