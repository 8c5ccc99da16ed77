# shellcheck shell=bash
# The Kubernetes minors the project supports and tests, and which tool module pins each (sourced by
# hack/build-tools.sh, hack/cluster.sh and hack/test.sh). Each module's go.mod is the one place its
# exact Kubernetes and etcd versions are pinned (written by hack/kube-module.sh).
#
# KUBE_VERSION picks the minor for `make up` and for the tests: "1.36", or unset for the newest.

# Newest first: the first is the default, and the one the whole suite runs on.
KUBE_MINORS=(1.37 1.36 1.35)

# The next minor before it ships: the pre-release of k8s.io/kubernetes whose client libraries
# (v0.MINOR.x of k8s.io/api, apimachinery, client-go, kubelet) the driver is built and unit-tested
# against, and whose kubelet's env file parser reads env-file's output (hack/kube-next.sh, in
# `make test`). Its API server joins KUBE_MINORS once it builds from the Go module proxy (not yet:
# k8s.io/apiextensions-api v0.38.0-beta.0 is not served). KUBE_NEXT_GO: the Go it requires,
# which the go command fetches from the module proxy (GOTOOLCHAIN).
# shellcheck disable=SC2034 # read by hack/kube-next.sh
KUBE_NEXT=v1.38.0-beta.0
# shellcheck disable=SC2034
KUBE_NEXT_GO=go1.27.3
# KUBE_NEXT_STANDINS: module@version, each standing in for a version of that module that the
# pre-release requires but the module proxy does not serve (sigs.k8s.io/structured-merge-diff/v7
# v7.0.1). hack/kube-next.sh uses a stand-in only while the required version stays unserved.
# shellcheck disable=SC2034
KUBE_NEXT_STANDINS=(sigs.k8s.io/structured-merge-diff/v7@v7.0.0)

# kube_module_dir MINOR: the tool module (relative to the repository root) that pins MINOR. The
# newest minor's is tools/ itself.
kube_module_dir() {
	local m
	[[ $1 == "${KUBE_MINORS[0]}" ]] && { echo tools; return; }
	for m in "${KUBE_MINORS[@]}"; do
		[[ $1 == "$m" ]] && { echo "tools/kube-$m"; return; }
	done
	echo "KUBE_VERSION=$1 is not a supported minor; pick one of: ${KUBE_MINORS[*]}" >&2
	return 1
}

# kube_minor: the minor that $KUBE_VERSION names: 1.36, v1.36 or v1.36.3 all give 1.36; unset
# gives the newest.
kube_minor() {
	local v=${KUBE_VERSION:-${KUBE_MINORS[0]}}
	v=${v#v}
	[[ $v =~ ^1\.[0-9]+ ]] || { echo "KUBE_VERSION=$v: want a minor such as ${KUBE_MINORS[0]}" >&2; return 1; }
	echo "${BASH_REMATCH[0]}"
}

# kube_bin_dir ROOT MINOR: where the cluster binaries of MINOR are built (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd).
kube_bin_dir() { echo "$1/_output/bin/k8s-$2"; }
