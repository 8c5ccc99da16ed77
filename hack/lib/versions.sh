# shellcheck shell=bash
# The Kubernetes minors the project supports and tests, and which tool module pins each (sourced by
# hack/build-tools.sh, hack/cluster.sh and hack/test.sh). Each module's go.mod is the one place its
# exact Kubernetes and etcd versions are pinned (written by hack/kube-module.sh).
#
# KUBE_VERSION picks the minor for `make up` and for the tests: "1.36", or unset for the newest.

# Newest first: the first is the default, and the one the whole suite runs on.
KUBE_MINORS=(1.37 1.36 1.35)

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

# kind_node_image MINOR: the kind node image of MINOR for `make e2e-kind` (hosts with Docker, and
# GitHub's runners through .github/workflows/ci.yaml): the images kind v0.33.0 publishes, pinned by
# digest as its release notes give them. Their patch versions are kind's, not the ones pinned above
# (kind builds its own node images); `make test` does not use them.
kind_node_image() {
	case $1 in
	1.37) echo "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5" ;;
	1.36) echo "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed" ;;
	1.35) echo "kindest/node:v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0" ;;
	*) echo "no kind node image for Kubernetes $1; pick one of: ${KUBE_MINORS[*]}" >&2; return 1 ;;
	esac
}
