#!/usr/bin/env bash
# Installs the Debian packages the local test cluster (hack/cluster.sh) needs. Idempotent: when
# everything is already installed it only runs dpkg-query and exits (well under a second).
#
#   hack/install-deps.sh          everything `make test` needs
#   hack/install-deps.sh cluster  only what the local cluster itself needs (`make up`)
#   hack/install-deps.sh lint     only what `make vet` needs: shellcheck
#   hack/install-deps.sh vm       only what the VM tier needs on the host (`make test-vm`: qemu,
#                                 debootstrap, e2fsprogs)
#   hack/install-deps.sh SCOPE --list   print SCOPE's packages, one a line, and install nothing
#                                 (the VM tier's Debian root is built with the cluster's)
set -euo pipefail
scope=${1:-all}
[[ $scope == all || $scope == cluster || $scope == lint || $scope == vm ]] || { echo "usage: $0 [all|cluster|lint|vm] [--list]" >&2; exit 2; }
list=0
case ${2:-} in
"") ;;
--list) list=1 ;;
*) echo "usage: $0 [all|cluster|lint|vm] [--list]" >&2; exit 2 ;;
esac

pkgs=(
	# containerd 2, runc and the CNI plugins are built from the Go module proxy (hack/build-tools.sh):
	# Debian 12's containerd 1.6 is end of life and Kubernetes 1.36 and later need containerd 2.
	libseccomp-dev pkg-config   # runc is built with cgo against libseccomp (its seccomp filters)
	busybox-static              # the busybox test image is built from /bin/busybox
	iptables                    # kubelet and the CNI bridge plugin program iptables
	conntrack                   # CNI portmap / kubelet cleanups
	iproute2                    # ip netns / ip link for the cluster's network namespace
	util-linux                  # nsenter, mount/umount, findmnt
	openssl                     # cluster PKI
	gcc libc6-dev               # static pause binary (hack/pause.c)
	procps psmisc               # ps/pkill used by `cluster.sh down`
	ca-certificates
	curl                        # cluster.sh waits for the registry with it (https, the cluster CA)
)
# Only the tests use these: `make up` does not install them.
if [[ $scope == all ]]; then
	pkgs+=(
		prometheus # for its promtool: the tests check the chart's alerts and dashboard with it
		jq         # the commands of docs/moving-from-openshift.md (test/e2e/api/openshift_test.go)
		shellcheck # `make vet` checks every shell script, and the workflows' run: steps, with it
	)
fi
[[ $scope != lint ]] || pkgs=(shellcheck)
# The VM tier (hack/vm.sh): qemu boots the VM (software emulation), debootstrap builds its Debian
# root, mkfs.ext4 -d and debugfs (e2fsprogs) write and read its disks without mounting them.
[[ $scope != vm ]] || pkgs=(qemu-system-x86 debootstrap debian-archive-keyring gpgv e2fsprogs)
if ((list)); then
	printf '%s\n' "${pkgs[@]}"
	exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
	# dpkg-query prints "install ok installed" only for fully installed packages.
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} == 0)); then
	echo "install-deps: all packages present ($scope)"
	exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: containerd/runc recommend nothing we need, nor does prometheus (its
# node exporter); keeps the install small.
apt-get install -y -qq --no-install-recommends "${missing[@]}"

# The prometheus package ships a system service. Some hosts start it on install (others are
# prevented by policy-rc.d); only promtool is wanted from prometheus (not a server on :9090), so
# stop it if it was started here.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
	systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
echo "install-deps: done"
