#!/usr/bin/env bash
# Builds the binaries of the local test cluster into _output/bin (gitignored):
#   k8s-1.NN/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl}
#                  one directory per supported minor (k8s.io/kubernetes, pinned in the module that
#                  hack/lib/versions.sh names for it: tools/ for the newest, tools/kube-1.NN)
#   k8s-1.NN/etcd  the etcd that minor is tested with (go.etcd.io/etcd/server/v3, same module)
#   containerd containerd-shim-runc-v2 ctr  containerd 2 (tools/containerd)
#   runc           (github.com/opencontainers/runc, tools/runc; cgo with libseccomp)
#   cni/{bridge,host-local,loopback,portmap}  CNI plugins (tools/cni)
#   helm           (helm.sh/helm/v4, tools/helm)
#   actionlint     (github.com/rhysd/actionlint, tools/actionlint)
#   golangci-lint  (github.com/golangci/golangci-lint/v2, tools/golangci-lint)
#   cosign         only with `cosign`: for `make release COSIGN_KEY=...` (github.com/sigstore/cosign/v2, tools/cosign)
#   registry       distribution's registry: the local cluster's OCI registry (tools/registry)
#   mkimage        (tools/mkimage, stdlib only)
#   pause          (hack/pause.c, gcc -static)
# Each binary has a stamp file (.NAME.stamp beside it) recording what it was built from; a binary
# is rebuilt only when it is missing or its stamp differs. Cold, on 2 cores: ~4 min per Kubernetes
# minor, ~2 min for containerd, runc and CNI; warm: seconds.
#
#   hack/build-tools.sh          all of them, every supported minor (`make tools`, for `make test`)
#   hack/build-tools.sh cluster  only what `make up` runs, for the minor KUBE_VERSION picks
#                                (default the newest): Kubernetes, etcd, containerd, runc, CNI,
#                                registry, mkimage, pause
#   hack/build-tools.sh helm     helm alone (`make manifests`, `make release`)
#   hack/build-tools.sh actionlint  actionlint alone (`make vet`)
#   hack/build-tools.sh golangci-lint  golangci-lint alone (`make vet`; ~3 min cold on 2 cores)
#   hack/build-tools.sh cosign   cosign alone (`make release COSIGN_KEY=...`; ~10 min cold on 2 cores,
#                                so not part of `all`: no test needs it)
#   hack/build-tools.sh registry distribution's registry alone (hack/cluster.sh up starts it)
set -euo pipefail
scope=${1:-all}
case $scope in
all) groups=" kube etcd registry helm actionlint golangci-lint mkimage pause node " ;;
cluster) groups=" kube etcd registry mkimage pause node " ;;
helm) groups=" helm " ;;
actionlint) groups=" actionlint " ;;
golangci-lint) groups=" golangci-lint " ;;
cosign) groups=" cosign " ;;
registry) groups=" registry " ;;
*) echo "usage: $0 [all|cluster|helm|actionlint|golangci-lint|cosign|registry]" >&2; exit 2 ;;
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
# shellcheck source=hack/lib/versions.sh
. "$ROOT/hack/lib/versions.sh"

# stale NAME WANT [DIR]: true when DIR/NAME (default $BIN) is missing or was built from something else.
stale() { local d=${3:-$BIN}; [[ ! -x $d/$1 ]] || [[ "$(cat "$d/.$1.stamp" 2>/dev/null)" != "$2" ]]; }
stamp() { local d=${3:-$BIN}; printf '%s\n' "$2" >"$d/.$1.stamp"; }

# kube_ldflags VERSION: without these the binaries report v0.0.0-master and the kubelet/apiserver
# version skew checks and `kubectl version` are meaningless.
kube_ldflags() {
	local v=$1 major minor flags="-s -w" p
	major=${v#v}; major=${major%%.*}
	minor=${v#v*.}; minor=${minor%%.*}
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	echo "$flags"
}

# build_minor MINOR: the Kubernetes commands and etcd of MINOR into $BIN/k8s-MINOR, from its module.
# One `go build` for all stale commands, so they share the compile work.
build_minor() {
	local m=$1 mod dir kube_version etcd_version kube_stamp etcd_stamp c todo=() pkgs=()
	mod=$ROOT/$(kube_module_dir "$m")
	dir=$(kube_bin_dir "$ROOT" "$m")
	mkdir -p "$dir"
	kube_version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	etcd_version=$(cd "$mod" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
	[[ $kube_version == "v$m."* ]] || { echo "$mod pins Kubernetes $kube_version, not $m" >&2; return 1; }
	if want kube; then
		kube_stamp="kubernetes=$kube_version $goversion"
		for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
			if stale "$c" "$kube_stamp" "$dir"; then todo+=("$c"); fi
		done
		if ((${#todo[@]})); then
			echo "building ${todo[*]} ($kube_version)..."
			for c in "${todo[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
			(cd "$mod" && go build -trimpath -ldflags "$(kube_ldflags "$kube_version")" -o "$dir/" "${pkgs[@]}")
			for c in "${todo[@]}"; do stamp "$c" "$kube_stamp" "$dir"; done
		fi
	fi
	# etcd: the package go.etcd.io/etcd/server/v3 is itself the etcd main package.
	etcd_stamp="etcd=$etcd_version $goversion"
	if want etcd && stale etcd "$etcd_stamp" "$dir"; then
		echo "building etcd ($etcd_version, for $m)..."
		(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$dir/etcd" go.etcd.io/etcd/server/v3)
		stamp etcd "$etcd_stamp" "$dir"
	fi
}

# The minors: every supported one for `all` (make test runs the matrix), else KUBE_VERSION's.
if [[ $scope == all ]]; then minors=("${KUBE_MINORS[@]}"); else minors=("$(kube_minor)"); fi
if want kube || want etcd; then
	for m in "${minors[@]}"; do build_minor "$m"; done
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
# golangci-lint: `make vet` runs it over every Go module (.golangci.yml).
module_tool golangci-lint golangci-lint github.com/golangci/golangci-lint/v2 \
	github.com/golangci/golangci-lint/v2/cmd/golangci-lint main.version
# cosign: key-pair signing in `make release COSIGN_KEY=...` (it reports its version from
# sigs.k8s.io/release-utils/version, which its own Makefile sets).
module_tool cosign cosign github.com/sigstore/cosign/v2 github.com/sigstore/cosign/v2/cmd/cosign \
	sigs.k8s.io/release-utils/version.gitVersion
# registry: distribution's registry, the local cluster's (hack/cluster.sh).
module_tool registry registry github.com/distribution/distribution/v3 \
	github.com/distribution/distribution/v3/cmd/registry github.com/distribution/distribution/v3/version.version

# --- The node's runtime: containerd 2 (with its runc shim and ctr), runc and the CNI plugins, each
# from its own module. containerd and the shim are static (no cgo: the btrfs snapshotter, the only
# part that needs it, is left out as in upstream's static builds); runc needs cgo for seccomp.
if want node; then
	v=$(cd "$TOOLS/containerd" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
	todo=()
	for c in containerd containerd-shim-runc-v2 ctr; do
		if stale "$c" "containerd=$v $goversion"; then todo+=("github.com/containerd/containerd/v2/cmd/$c"); fi
	done
	if ((${#todo[@]})); then
		echo "building containerd ($v)..."
		(cd "$TOOLS/containerd" && go build -trimpath -tags "no_btrfs urfave_cli_no_docs osusergo netgo static_build" \
			-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$v -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2" \
			-o "$BIN/" "${todo[@]}")
		for c in containerd containerd-shim-runc-v2 ctr; do stamp "$c" "containerd=$v $goversion"; done
	fi
	v=$(cd "$TOOLS/runc" && go list -m -f '{{.Version}}' github.com/opencontainers/runc)
	if stale runc "runc=$v $goversion"; then
		echo "building runc ($v)..."
		(cd "$TOOLS/runc" && CGO_ENABLED=1 go build -trimpath -tags seccomp \
			-ldflags "-s -w -X main.version=${v#v}" -o "$BIN/runc" github.com/opencontainers/runc)
		stamp runc "runc=$v $goversion"
	fi
	v=$(cd "$TOOLS/cni" && go list -m -f '{{.Version}}' github.com/containernetworking/plugins)
	mkdir -p "$BIN/cni"
	todo=()
	for p in main/bridge main/loopback meta/portmap ipam/host-local; do
		if stale "${p#*/}" "cni=$v $goversion" "$BIN/cni"; then todo+=("github.com/containernetworking/plugins/plugins/$p"); fi
	done
	if ((${#todo[@]})); then
		echo "building CNI plugins ($v)..."
		(cd "$TOOLS/cni" && go build -trimpath -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$v" \
			-o "$BIN/cni/" "${todo[@]}")
		for p in bridge loopback portmap host-local; do stamp "$p" "cni=$v $goversion" "$BIN/cni"; done
	fi
fi

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
