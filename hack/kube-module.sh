#!/usr/bin/env bash
# Writes the go.mod of a Kubernetes tool module (the commands of one Kubernetes release and the
# etcd it is tested with), the one place a minor's versions are pinned:
#
#   hack/kube-module.sh DIR KUBE_VERSION ETCD_VERSION
#   e.g. hack/kube-module.sh tools/kube-1.36 v1.36.3 v3.6.8
#
# tools/ itself is the newest minor's module; tools/kube-1.NN the older supported minors'. hack/lib/versions.sh says which is which.
#
# k8s.io/kubernetes is not meant to be imported as a library: it requires its staging modules
# (k8s.io/api, client-go, ...) at v0.0.0, so each needs a replace to v0.Y.Z. The list of staging
# modules is read from that release's own go.mod, so a new release's new staging module is not
# missed. Each command is a `tool` directive (`go get -tool`, one per command, or go.sum lacks
# entries). ETCD_VERSION: the one the release names in its hack/lib/etcd.sh (or the nearest
# served by the module proxy). hack/build-tools.sh then builds whatever changed.
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: $0 DIR KUBE_VERSION ETCD_VERSION" >&2; exit 2; }
dir=$1 kube=$2 etcd=$3
[[ $kube =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { echo "KUBE_VERSION must look like v1.37.2, not $kube" >&2; exit 2; }
minor=${BASH_REMATCH[1]}
staging_version=v0.${kube#v1.}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
moddir=$(go mod download -json "k8s.io/kubernetes@$kube" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -f $moddir/go.mod ]] || { echo "could not download k8s.io/kubernetes@$kube" >&2; exit 1; }
gover=$(sed -n 's/^go //p' "$moddir/go.mod")
mapfile -t staging < <(sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$moddir/go.mod" | sort -u)
((${#staging[@]} > 20)) || { echo "found only ${#staging[@]} staging modules in $moddir/go.mod" >&2; exit 1; }

mkdir -p "$dir"
{
	echo "// Kubernetes $kube (1.$minor) and etcd $etcd for the local test cluster: written by"
	echo "// hack/kube-module.sh $dir $kube $etcd (do not edit by hand; run it again to move)."
	if [[ $dir == tools || $dir == */tools ]]; then
		echo "module github.com/shared-resource/csi-driver/tools"
	else
		echo "module github.com/shared-resource/csi-driver/tools/kube-1.$minor"
	fi
	echo
	echo "go $gover"
	echo
	echo "// Kubernetes $kube is built and tested with go$gover semantics."
	echo "godebug default=go${gover%.*}"
	echo
	echo "replace ("
	for m in "${staging[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
	echo ")"
} >"$dir/go.mod"
rm -f "$dir/go.sum"
cd "$dir"
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
	go get -tool "k8s.io/kubernetes/cmd/$c@$kube"
done
go get -tool "go.etcd.io/etcd/server/v3@$etcd"
go mod tidy
echo "wrote $dir/go.mod: Kubernetes $kube, etcd $etcd, ${#staging[@]} staging modules at $staging_version"
