#!/usr/bin/env bash
# Builds the binaries of the local test cluster into _output/bin (gitignored):
#   k8s-1.NN/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl}
#                  one directory per supported minor (k8s.io/kubernetes, pinned in the module that
#                  hack/lib/versions.sh names for it: tools/ for the newest, tools/kube-1.NN)
#   k8s-1.NN/etcd  the etcd that minor is tested with (go.etcd.io/etcd/server/v3, same module)
#   containerd containerd-shim-runc-v2 ctr  containerd 2 (tools/containerd), without the
#                  snapshotters and plugins the cluster never loads (build tags below)
#   runc           (github.com/opencontainers/runc, tools/runc; cgo with libseccomp)
#   cni/{bridge,host-local,loopback,portmap}  CNI plugins (tools/cni)
#   helm           (helm.sh/helm/v4, tools/helm)
#   actionlint     (github.com/rhysd/actionlint, tools/actionlint)
#   golangci-lint  (github.com/golangci/golangci-lint/v2, tools/golangci-lint)
#   cosign         only with `cosign`: for `make release COSIGN_KEY=...` (github.com/sigstore/cosign/v3, tools/cosign)
#   kubectl-krew validate-krew-manifest  only with `krew`: krew's own install and manifest
#                  validation, for the release's tests (sigs.k8s.io/krew, tools/krew)
#   govulncheck    only with `govulncheck`: `make govulncheck` (golang.org/x/vuln, tools/govulncheck)
#   registry       distribution's registry with its filesystem storage only (tools/registry/main.go)
#   mkimage        (tools/mkimage, stdlib only)
#   pause          (hack/pause.c, gcc -static)
# Each binary has a stamp file (.NAME.stamp beside it) recording what it was built from; a binary
# is rebuilt only when it is missing or its stamp differs. The builds run side by side, one
# `go build` per module (the Go build and module caches are the user's own, shared by every clone
# and safe to use concurrently): while one build waits on the module proxy or links, the others
# compile. Each build's log is _output/bin/.logs/NAME.log; its wall and CPU seconds are printed
# and appended to _output/bin/.logs/times (docs/development.md has the figures).
#
#   hack/build-tools.sh          all of them, every supported minor (`make tools`)
#   hack/build-tools.sh main     all of them but the older minors' Kubernetes and etcd (one minor,
#                                KUBE_VERSION's, default the newest): what `make test` needs
#                                before its first phase (`make tools-main`)
#   hack/build-tools.sh older    the older minors' Kubernetes and etcd alone: hack/test.sh builds
#                                them in the background from its start, for its last phase
#   hack/build-tools.sh cluster  only what `make up` runs, for the minor KUBE_VERSION picks
#                                (default the newest): Kubernetes, etcd, containerd, runc, CNI,
#                                mkimage, pause (no registry: `make up` imports its image)
#   hack/build-tools.sh api      only what `make test-api` runs: the control plane of the minor
#                                KUBE_VERSION picks (kube-apiserver, kube-controller-manager,
#                                kubectl, etcd) and helm
#   hack/build-tools.sh kubectl  the newest minor's kubectl alone (`make tools-test`: the krew test
#                                runs the plugin through it)
#   hack/build-tools.sh helm     helm alone (`make manifests`, `make release`)
#   hack/build-tools.sh actionlint  actionlint alone (`make vet`)
#   hack/build-tools.sh golangci-lint  golangci-lint alone (`make vet`; ~2 min cold on 2 cores)
#   hack/build-tools.sh cosign   cosign alone (`make release COSIGN_KEY=...`, and `make test`'s
#                                release tests; ~4 min cold on 2 cores, so not part of `all`)
#   hack/build-tools.sh krew     kubectl-krew and validate-krew-manifest alone (`make test`'s release
#                                tests check the krew manifest with them)
#   hack/build-tools.sh govulncheck  govulncheck alone (`make govulncheck`)
#   hack/build-tools.sh registry distribution's registry alone (hack/cluster.sh up starts it, unless
#                                --no-registry)
# BUILD_JOBS: how many builds run at once (default 4; 1 builds one after another).
set -euo pipefail
scope=${1:-all}
case $scope in
all | main) groups=" kube etcd registry helm actionlint golangci-lint mkimage pause node " ;;
older) groups=" kube etcd " ;;
cluster) groups=" kube etcd mkimage pause node " ;;
api) groups=" kube etcd helm " ;;
kubectl) groups=" kube " ;;
helm) groups=" helm " ;;
actionlint) groups=" actionlint " ;;
golangci-lint) groups=" golangci-lint " ;;
cosign) groups=" cosign " ;;
krew) groups=" kubectl-krew validate-krew-manifest " ;;
govulncheck) groups=" govulncheck " ;;
registry) groups=" registry " ;;
*) echo "usage: $0 [all|main|older|cluster|api|kubectl|helm|actionlint|golangci-lint|cosign|krew|govulncheck|registry]" >&2; exit 2 ;;
esac
# want GROUP: true when this run builds GROUP.
want() { [[ $groups == *" $1 "* ]]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=$ROOT/tools
BIN=$ROOT/_output/bin
LOGS=$BIN/.logs
mkdir -p "$BIN" "$LOGS"

export CGO_ENABLED=0   # static binaries: no dependency on the host's libc
export GOTOOLCHAIN=local
# Each tool builds from its own module as its go.mod says (mod_version reads the versions there).
export GOWORK=off GOFLAGS=-mod=readonly
goversion=$(go env GOVERSION)
# shellcheck source=hack/lib/versions.sh
. "$ROOT/hack/lib/versions.sh"
BUILD_JOBS=${BUILD_JOBS:-4}
[[ $BUILD_JOBS =~ ^[1-9][0-9]*$ ]] || { echo "BUILD_JOBS=$BUILD_JOBS: want a number of builds, 1 or more" >&2; exit 2; }

# stale NAME WANT [DIR]: true when DIR/NAME (default $BIN) is missing or was built from something else.
stale() { local d=${3:-$BIN}; [[ ! -x $d/$1 ]] || [[ "$(cat "$d/.$1.stamp" 2>/dev/null)" != "$2" ]]; }
stamp() { local d=${3:-$BIN}; printf '%s\n' "$2" >"$d/.$1.stamp"; }

# --- Running the builds side by side.
# job NAME FUNCTION ARGS...: FUNCTION ARGS in the background, its output in $LOGS/NAME.log; at
# most BUILD_JOBS at once. When it ends, one line says how long it took: wall seconds, and the CPU
# seconds (user + system) of everything it ran, which the machine's other load hardly changes.
job_pids=()
std_compiled=0
job() {
	local name=$1
	shift
	# The standard library first, once: builds started side by side on a cold cache would each
	# compile it (the build cache shares a package only once it is compiled). When warm, a second.
	if ((!std_compiled)); then
		go_build "$ROOT" std || { echo "FAILED: compiling the standard library" >&2; exit 1; }
		std_compiled=1
	fi
	while (($(jobs -rp | wc -l) >= BUILD_JOBS)); do wait -n || true; done
	echo "building $name..."
	(
		t0=$(date +%s%N)
		status=0
		"$@" >"$LOGS/$name.log" 2>&1 || status=$?
		# `times` reports this subshell's finished children: every command the build ran. Into a
		# file: in a pipe or $(...) it would run in a new process, which has no children.
		times >"$LOGS/$name.times"
		cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, "m"); c += a[1] * 60 + a[2] } printf "%.0f", c }' "$LOGS/$name.times")
		rm -f "$LOGS/$name.times"
		wall=$((($(date +%s%N) - t0) / 1000000000))
		if ((status != 0)); then
			echo "FAILED: building $name, after $wall s; the end of $LOGS/$name.log:"
			tail -n 40 "$LOGS/$name.log"
			exit "$status"
		fi
		printf '%s\t%s\t%s\t%s\n' "$name" "$wall" "$cpu" "$(date -u +%FT%TZ) $goversion" >>"$LOGS/times"
		echo "built $name in $wall s ($cpu s of CPU)"
	) &
	job_pids+=($!)
}
# wait_jobs: waits for every job; fails when any failed (each failure printed its log's end).
wait_jobs() {
	local p failed=0
	for p in "${job_pids[@]}"; do wait "$p" || failed=1; done
	job_pids=()
	return "$failed"
}

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

# mod_version DIR MODULE: the version of MODULE that DIR's go.mod requires (a tidy go.mod lists
# every module the build uses, at the version it selects; the builds run with -mod=readonly, so an
# untidy one fails them). Read from the file, not with `go list -m`, which first fetches the go.mod
# of every module in the graph: on a cold module cache that kept every build waiting for the
# downloads, where the builds themselves fetch them side by side. Only require directives count;
# a module that any replace or exclude names is refused, since the version built could differ.
mod_version() {
	local v
	v=$(awk -v m="$2" '
		{ gsub(/"/, "") }
		/^[ \t]*\)/ { block = ""; next }
		/^(require|replace|exclude)[ \t]*\(/ { block = $1; next }
		$1 == "replace" || $1 == "exclude" { if ($2 == m) { bad = 1 }; next }
		block == "replace" || block == "exclude" { if ($1 == m) { bad = 1 }; next }
		$1 == "require" && $2 == m { v = $3 }
		block == "require" && $1 == m { v = $2 }
		END { if (bad) { print "replaced" } else { print v } }' "$1/go.mod")
	[[ $v == v[0-9]* ]] || { echo "$1/go.mod: no require of $2 (or a replace or exclude names it): cannot tell its version" >&2; return 1; }
	echo "$v"
}

# go_build DIR ARGS...: `go build -trimpath ARGS` in the module DIR. Compiled without DWARF: every
# binary here is linked stripped (-s -w), which drops it anyway, and not generating it saves about
# an eighth of the compile's CPU. GOGC=400 saves another eighth or more (hack/lib/goenv.sh's
# BUILD_GOGC).
go_build() { local d=$1; shift; (cd "$d" && GOGC=${BUILD_GOGC:-400} go build -trimpath -gcflags=all=-dwarf=false "$@"); }

# build_kube MOD DIR VERSION STAMP ETCD_STAMP CMD...: the Kubernetes commands CMD... of MOD into
# DIR, and etcd too when ETCD_STAMP is not empty, in one `go build`: the packages they share (gRPC,
# protobuf, the etcd client, the API machinery) are compiled once, where two builds side by side
# would each compile them. (The ldflags' -X of Kubernetes' version variables do nothing in etcd.)
build_kube() {
	local mod=$1 dir=$2 v=$3 st=$4 etcd_st=$5 c pkgs=()
	shift 5
	for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	# etcd's main package is go.etcd.io/etcd/server/v3: go build names it "server".
	[[ -z $etcd_st ]] || pkgs+=(go.etcd.io/etcd/server/v3)
	go_build "$mod" -ldflags "$(kube_ldflags "$v")" -o "$dir/" "${pkgs[@]}"
	for c in "$@"; do stamp "$c" "$st" "$dir"; done
	if [[ -n $etcd_st ]]; then
		mv -f "$dir/server" "$dir/etcd"
		stamp etcd "$etcd_st" "$dir"
	fi
}

# build_etcd MOD DIR STAMP: etcd (the package go.etcd.io/etcd/server/v3 is itself its main package).
build_etcd() {
	go_build "$1" -ldflags "-s -w" -o "$2/etcd" go.etcd.io/etcd/server/v3
	stamp etcd "$3" "$2"
}

# minor_jobs MINOR: the jobs for the stale Kubernetes commands and etcd of MINOR ($BIN/k8s-MINOR), from
# its module.
minor_jobs() {
	local m=$1 mod dir kube_version etcd_version st etcd_st="" c todo=()
	mod=$ROOT/$(kube_module_dir "$m")
	dir=$(kube_bin_dir "$ROOT" "$m")
	mkdir -p "$dir"
	kube_version=$(mod_version "$mod" k8s.io/kubernetes)
	etcd_version=$(mod_version "$mod" go.etcd.io/etcd/server/v3)
	[[ $kube_version == "v$m."* ]] || { echo "$mod pins Kubernetes $kube_version, not $m" >&2; return 1; }
	if want etcd && stale etcd "etcd=$etcd_version $goversion" "$dir"; then etcd_st="etcd=$etcd_version $goversion"; fi
	if want kube; then
		st="kubernetes=$kube_version $goversion"
		for c in $kube_cmds; do
			if stale "$c" "$st" "$dir"; then todo+=("$c"); fi
		done
	fi
	if ((${#todo[@]})); then
		job "kubernetes-$kube_version${etcd_st:+-and-etcd-$etcd_version}" build_kube "$mod" "$dir" "$kube_version" "$st" "$etcd_st" "${todo[@]}"
	elif [[ -n $etcd_st ]]; then
		job "etcd-$etcd_version-for-$m" build_etcd "$mod" "$dir" "$etcd_st"
	fi
}

# module_tool NAME DIR MODULE PKG [SYMBOL]: a tool in its own module (tools/DIR, which pins
# MODULE's version, so its dependencies need not match the cluster's or each other's), built from
# PKG into $BIN/NAME when wanted and missing or built from another version or source; SYMBOL, when
# given, is the variable the tool reports its version from, set to MODULE's version.
module_tool() {
	local name=$1 dir=$2 module=$3 pkg=$4 symbol=${5:-} version ldflags="-s -w" st
	want "$name" || return 0
	version=$(mod_version "$TOOLS/$dir" "$module")
	st="$name=$version $goversion"
	# A tool built from a main package of ours (the registry's) is rebuilt when that changes.
	[[ $pkg != . ]] || st+=" main=$(cat "$TOOLS/$dir"/*.go | sha256sum | cut -c1-16)"
	stale "$name" "$st" || return 0
	[[ -z $symbol ]] || ldflags+=" -X $symbol=$version"
	job "$name-$version" build_module_tool "$name" "$TOOLS/$dir" "$pkg" "$ldflags" "$st"
}
build_module_tool() {
	go_build "$2" -ldflags "$4" -o "$BIN/$1" "$3"
	stamp "$1" "$5"
}

# --- The node's runtime: containerd 2 (with its runc shim and ctr), runc and the CNI plugins, each
# from its own module. containerd and the shim are static (no cgo: the btrfs snapshotter, the only
# part that needs it, is left out as in upstream's static builds). The tags leave out what the
# cluster's containerd never loads (hack/cluster.sh's config.toml: the overlayfs snapshotter, the
# CRI plugin, no tracing, no systemd): the devmapper and ZFS snapshotters, the tracing plugin
# (OpenTelemetry's exporters), Intel RDT and systemd's notify socket.
CONTAINERD_TAGS="no_btrfs no_devmapper no_zfs no_tracing no_rdt no_systemd urfave_cli_no_docs osusergo netgo static_build"
build_containerd() {
	local v=$1 st=$2 c pkgs=()
	for c in containerd containerd-shim-runc-v2 ctr; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c"); done
	go_build "$TOOLS/containerd" -tags "$CONTAINERD_TAGS" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$v -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2" \
		-o "$BIN/" "${pkgs[@]}"
	for c in containerd containerd-shim-runc-v2 ctr; do stamp "$c" "$st"; done
}
# runc needs cgo for seccomp.
build_runc() {
	CGO_ENABLED=1 go_build "$TOOLS/runc" -tags seccomp -ldflags "-s -w -X main.version=${1#v}" \
		-o "$BIN/runc" github.com/opencontainers/runc
	stamp runc "$2"
}
build_cni() {
	local v=$1 st=$2 p pkgs=()
	for p in main/bridge main/loopback meta/portmap ipam/host-local; do pkgs+=("github.com/containernetworking/plugins/plugins/$p"); done
	go_build "$TOOLS/cni" -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$v" \
		-o "$BIN/cni/" "${pkgs[@]}"
	for p in bridge loopback portmap host-local; do stamp "$p" "$st" "$BIN/cni"; done
}
node_jobs() {
	local v st c p stale_any=0
	v=$(mod_version "$TOOLS/containerd" github.com/containerd/containerd/v2)
	st="containerd=$v $goversion tags=$CONTAINERD_TAGS"
	for c in containerd containerd-shim-runc-v2 ctr; do if stale "$c" "$st"; then stale_any=1; fi; done
	if ((stale_any)); then job "containerd-$v" build_containerd "$v" "$st"; fi
	v=$(mod_version "$TOOLS/runc" github.com/opencontainers/runc)
	st="runc=$v $goversion"
	if stale runc "$st"; then job "runc-$v" build_runc "$v" "$st"; fi
	v=$(mod_version "$TOOLS/cni" github.com/containernetworking/plugins)
	st="cni=$v $goversion"
	mkdir -p "$BIN/cni"
	stale_any=0
	for p in bridge loopback portmap host-local; do if stale "$p" "$st" "$BIN/cni"; then stale_any=1; fi; done
	if ((stale_any)); then job "cni-plugins-$v" build_cni "$v" "$st"; fi
}

build_mkimage() { go_build "$TOOLS" -o "$BIN/mkimage" ./mkimage && stamp mkimage "$1"; }
build_pause() {
	gcc -static -Os -Wall -o "$BIN/pause" "$ROOT/hack/pause.c"
	strip "$BIN/pause" 2>/dev/null || true
	stamp pause "$1"
}

# The Kubernetes commands: a control plane alone (`api`: no scheduler, no kubelet) or every one.
kube_cmds="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
[[ $scope != api ]] || kube_cmds="kube-apiserver kube-controller-manager kubectl"
[[ $scope != kubectl ]] || kube_cmds="kubectl"
# The largest builds first, so the small ones fill the gaps beside them.
# The minors: every supported one for `all`, the older ones for `older` (the matrix of make test),
# else KUBE_VERSION's.
case $scope in
all) minors=("${KUBE_MINORS[@]}") ;;
older) minors=("${KUBE_MINORS[@]:1}") ;;
*) minors=("$(kube_minor)") ;;
esac
if want kube || want etcd; then
	for m in "${minors[@]}"; do minor_jobs "$m"; done
fi
if want node; then node_jobs; fi
# registry: distribution's registry, the local cluster's (hack/cluster.sh), from tools/registry/main.go.
module_tool registry registry github.com/distribution/distribution/v3 . \
	github.com/distribution/distribution/v3/version.version
# helm: `make manifests`, `make release` and the pod suite's installs.
module_tool helm helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm helm.sh/helm/v4/internal/version.version
# actionlint: `make vet` checks .github/workflows with it.
module_tool actionlint actionlint github.com/rhysd/actionlint github.com/rhysd/actionlint/cmd/actionlint
# golangci-lint: `make vet` runs it over every Go module (.golangci.yml).
module_tool golangci-lint golangci-lint github.com/golangci/golangci-lint/v2 \
	github.com/golangci/golangci-lint/v2/cmd/golangci-lint main.version
# cosign: key-pair signing in `make release COSIGN_KEY=...` (it reports its version from
# sigs.k8s.io/release-utils/version, which its own Makefile sets).
module_tool cosign cosign github.com/sigstore/cosign/v3 github.com/sigstore/cosign/v3/cmd/cosign \
	sigs.k8s.io/release-utils/version.gitVersion
# krew: the release's tests install the plugin from the krew manifest with krew itself, and run
# krew's manifest validation on it.
module_tool kubectl-krew krew sigs.k8s.io/krew sigs.k8s.io/krew/cmd/krew sigs.k8s.io/krew/internal/version.gitTag
module_tool validate-krew-manifest krew sigs.k8s.io/krew sigs.k8s.io/krew/cmd/validate-krew-manifest
# govulncheck: `make govulncheck` (it reads the vulnerability database from vuln.go.dev).
module_tool govulncheck govulncheck golang.org/x/vuln golang.org/x/vuln/cmd/govulncheck
# mkimage: rebuilt when its source changes.
mk_stamp="mkimage=$(cat "$TOOLS"/mkimage/*.go | sha256sum | cut -c1-16) $goversion"
if want mkimage && stale mkimage "$mk_stamp"; then job mkimage build_mkimage "$mk_stamp"; fi
# pause: static so the image needs nothing but the binary.
pause_stamp="pause=$(sha256sum <"$ROOT/hack/pause.c" | cut -c1-16)"
if want pause && stale pause "$pause_stamp"; then job pause build_pause "$pause_stamp"; fi

wait_jobs || { echo "tools ($scope): a build failed (above)" >&2; exit 1; }
echo "tools ($scope) up to date in $BIN"
