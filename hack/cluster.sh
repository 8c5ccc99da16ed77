#!/usr/bin/env bash
# A real Kubernetes cluster of one or more nodes on this machine, without Docker, for the
# driver's e2e tests, with its own OCI registry (distribution's, on the first node's IP) for
# images and charts, unless --no-registry (which `make up` passes: it imports its image).
# Everything runs inside network namespaces created for the run, so no packet leaves the machine
# (and no other process's network is touched).
#
#   [NODES=N] hack/cluster.sh up [--control-plane-only] [--no-registry]
#                                                start a fresh cluster (runs `down` first); without
#                                                the registry (`make up`: its image is imported) with --no-registry
#   hack/cluster.sh exec -- CMD [ARGS...]        run CMD inside the first node's netns with the cluster env
#   hack/cluster.sh node-exec NODE -- CMD...     run CMD in that node's network and mount namespaces
#   hack/cluster.sh import-image TAR             load a docker-archive into every node's containerd
#   hack/cluster.sh import-busybox NAME          the busybox image, also under the reference NAME
#   hack/cluster.sh status                       show what is running
#   hack/cluster.sh down                         stop and clean up everything (idempotent)
#   hack/cluster.sh check-down                   fail, listing them, if `down` left anything behind
#   hack/cluster.sh check-host [--control-plane-only]  fail, listing it, if this host lacks what `up` needs
#   hack/cluster.sh node-kill NODE               a power loss of NODE's daemons: SIGKILL to its kubelet,
#                                                its containerd and its driver processes (node plugin, status replica; the pods' other processes run on)
#   hack/cluster.sh node-start NODE              start NODE's containerd and kubelet again (its state kept)
#   hack/cluster.sh restart-control-plane        SIGKILL to etcd and the API server, both started again
#
# Nodes (NODES=1 by default): one control plane (etcd, API server, controller manager, scheduler,
# and the registry) in the first node's network namespace, and per node its own kubelet and containerd
# in a network namespace of its own (node k: 10.200.0.<k+1>, pods 10.<87+k>.0.0/16, all nodes on
# one bridge, routes between them) and, with several nodes, a mount namespace of its own where
# /var/lib/kubelet is its own directory: each node's driver pod sees only its node's paths, as on
# real machines. (A single node uses the machine's mount namespace and /var/lib/kubelet.)
#
# Binaries: hack/build-tools.sh (_output/bin). Packages: hack/install-deps.sh.
# State: _output/cluster (logs in _output/cluster/logs survive `down` for post-mortems).
# Env for tests: _output/cluster/env (KUBECONFIG, SRCSI_NETNS, SRCSI_KUBECTL, SRCSI_REGISTRY when
# the registry runs, CONTAINERD_ADDRESS...).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/_output/bin
IMAGES=$ROOT/_output/images
CL=$ROOT/_output/cluster
PKI=$CL/pki
LOGS=$CL/logs
PIDS=$CL/pids
CTRD=$CL/containerd
CTRD_SOCK=$CTRD/containerd.sock
KUBELET_ROOT=/var/lib/kubelet   # the production path: the driver's default paths work unchanged
# Where the host's cgroups are mounted. Only the phases that run kubelets (`up` without
# --control-plane-only, node-kill, and `down` after such an `up`) read or write here.
# SRCSI_CGROUP_ROOT: a fake tree, for hack/clustertest only.
CGROUP_ROOT=${SRCSI_CGROUP_ROOT:-/sys/fs/cgroup}
# Present when systemd is the init system (sd_booted(3)). SRCSI_SYSTEMD_DIR: for hack/clustertest.
SYSTEMD_DIR=${SRCSI_SYSTEMD_DIR:-/run/systemd/system}
# On a cgroup v2 host everything a full cluster runs is in this systemd slice: the control plane's
# daemons as scopes in it, and per node a slice in it (node_slice) holding the node's containerd
# and kubelet scopes and its pods' slices (the kubelet's cgroupRoot).
SLICE=srcsi.slice
# The units a cluster on cgroup v2 makes: the slice, the nodes' slices, the daemons' scopes.
SYSTEMD_UNITS=("$SLICE" 'srcsi-*.slice' 'srcsi-*.scope')
# TIMEOUT_SCALE: every wait of this harness (and of hack/up.sh) is this many times as long: for
# slow hosts, an emulated machine say. A whole number, default 1.
TIMEOUT_SCALE=${TIMEOUT_SCALE:-1}
[[ $TIMEOUT_SCALE =~ ^[1-9][0-9]*$ ]] || { echo "TIMEOUT_SCALE=$TIMEOUT_SCALE: want a whole number, 1 or more" >&2; exit 2; }

# The first node: the control plane and the registry share its network namespace.
NETNS=srcsi
NETNS_PATH=/run/netns/$NETNS
NODE_NAME=srcsi-node
NODE_IP=10.200.0.2
APISERVER=https://$NODE_IP:6443
SERVICE_CIDR=10.0.0.0/24 # the `kubernetes` Service gets 10.0.0.1
CNI_BRIDGE=srcsi0
# The bridge in the first node's netns that links the nodes' network namespaces (one L2 segment).
NODE_BRIDGE=srcsinodes
# Persisted mount namespaces of the nodes after the first (a private mount, as unshare needs).
MNTNS_DIR=/run/srcsi-mnt
# How many nodes `up` starts; `down` reads what `up` recorded ($CL/nodes.list).
NODES=${NODES:-1}
CNI_NETWORK=srcsi
PAUSE_IMAGE=docker.io/library/pause:local
BUSYBOX_IMAGE=docker.io/library/busybox:local
# The cluster's registry: distribution's registry on the node IP, TLS with a cert of the cluster CA.
REGISTRY=$NODE_IP:5000
REGISTRY_DIR=$CL/registry

# shellcheck source=hack/lib/cluster-pki.sh
source "$ROOT/hack/lib/cluster-pki.sh"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
# The Kubernetes minor: KUBE_VERSION (e.g. 1.36) for `up`, the newest by default; the other
# commands act on the cluster that is up, so they take the minor `up` recorded.
if [[ -z ${KUBE_VERSION:-} && ${1:-} != up && -s $CL/kube-minor ]]; then KUBE_VERSION=$(cat "$CL/kube-minor"); fi
KUBE_MINOR=$(kube_minor)
kube_module_dir "$KUBE_MINOR" >/dev/null
# Its binaries (hack/build-tools.sh): kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kubectl and etcd. The node's runtime (containerd 2, runc, CNI) is the same for every minor.
KBIN=$(kube_bin_dir "$ROOT" "$KUBE_MINOR")

log() { printf '[cluster %5.1fs] %s\n' "$(($(date +%s%N) - T0))e-9" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
T0=$(date +%s%N)

# in_netns CMD...: run CMD in the cluster's network namespace. nsenter --net only switches the
# network namespace; `ip netns exec` would also remount /sys, which breaks the kubelet's cgroup
# detection ("failed to find cgroup mounts").
in_netns() { nsenter --net="$NETNS_PATH" -- "$@"; }

kubectl() { in_netns "$KBIN/kubectl" --kubeconfig "$CL/admin.kubeconfig" "$@"; }

# Node k (1..NODES): its name, IP, network namespace, mount namespace (none: the machine's, when
# it is the only node), the directory of its containerd, CNI, pod logs and kubelet dir, its pod
# CIDR, and the suffix of its daemons' log and PID files. The first node keeps the single-node
# names, so NODES=1 is the cluster as it was.
node_name() { if (($1 == 1)); then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi; }
node_ip() { echo "10.200.0.$(($1 + 1))"; }
node_netns() { if (($1 == 1)); then echo "$NETNS"; else echo "$NETNS-$1"; fi; }
node_mntns() { if ((NODES == 1)); then echo ""; else echo "$MNTNS_DIR/$(node_name "$1")"; fi; }
node_dir() { if (($1 == 1)); then echo "$CL"; else echo "$CL/nodes/$(node_name "$1")"; fi; }
node_cidr() { echo "10.$((87 + $1)).0.0/16"; }
node_sfx() { if (($1 == 1)); then echo ""; else echo "-$1"; fi; }
# node_slice K: node K's systemd slice on a cgroup v2 host (a dash nests it in $SLICE).
node_slice() { echo "srcsi-node$1.slice"; }

# on_node K CMD...: run CMD in node K's network namespace (and mount namespace, after the first).
on_node() {
	local k=$1 mnt
	shift
	mnt=$(node_mntns "$k")
	nsenter --net="/run/netns/$(node_netns "$k")" ${mnt:+--mount="$mnt"} -- "$@"
}

# start NAME CMD...: start a control-plane daemon: in the first node's netns, the machine's mount
# namespace. Logs to logs/NAME.log, records its PID in pids/NAME.pid.
start() { start_in "$NETNS_PATH" "" "$@"; }

# start_on K NAME CMD...: start a daemon of node K (in its network and mount namespaces).
start_on() {
	local k=$1
	shift
	START_SLICE=$(node_slice "$k") start_in "/run/netns/$(node_netns "$k")" "$(node_mntns "$k")" "$@"
}

# start_in NETNS MNTNS NAME CMD...: MNTNS "" is the machine's.
# setsid: its own session, so it outlives the caller's process group and terminal.
# 9>&-: do not inherit the lock on fd 9 (a daemon holding it would block the next `down`).
# nsenter and setsid both exec (no fork) here, so $! is the daemon's own PID.
# With systemd's cgroups (a full cluster on a cgroup v2 host: uses_systemd), the daemon runs in a
# scope of its own, srcsi-NAME-<start time>.scope, in $SLICE or, for a node's daemons, in the
# node's slice (START_SLICE): out of the caller's session or service, whose end or limits it must
# not share, and where `down` finds and stops all of it. Each start names a new scope: a killed
# containerd's shims keep its scope alive, and systemd refuses a second unit of the same name.
# systemd-run --scope registers its own PID as the scope and execs the command, so $! stays the
# daemon's.
START_SLICE=$SLICE
start_in() {
	local net=$1 mnt=$2 name=$3 scope=()
	shift 3
	if uses_systemd; then
		scope=(systemd-run --scope --quiet --collect --unit "srcsi-$name-$(date +%s%N)" --slice "$START_SLICE" --)
	fi
	# Not via on_node: a backgrounded shell function would fork a subshell and $! would be its PID.
	nsenter --net="$net" ${mnt:+--mount="$mnt"} -- setsid "${scope[@]}" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
	echo $! >"$PIDS/$name.pid"
}

# wait_for DESC SECONDS CMD...: poll CMD every 0.1 s until it succeeds, for SECONDS times
# TIMEOUT_SCALE.
wait_for() {
	local desc=$1 secs=$(($2 * TIMEOUT_SCALE))
	shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		if (($(date +%s) >= deadline)); then
			log "timed out after ${secs}s waiting for $desc (logs: $LOGS)"
			return 1
		fi
		check_alive
		sleep 0.1
	done
	log "$desc"
}

# check_alive: fail fast (with the log tail) when a daemon we started has died.
check_alive() {
	local f name
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		name=$(basename "$f" .pid)
		if ! kill -0 "$(cat "$f")" 2>/dev/null; then
			log "$name exited; last lines of $LOGS/$name.log:"
			tail -n 20 "$LOGS/$name.log" >&2 || true
			exit 1
		fi
	done
}

lock() {
	mkdir -p "$ROOT/_output"
	exec 9>"$ROOT/_output/.cluster.lock"
	flock 9
}

# ---------------------------------------------------------------------------------------------
# up

setup_netns() {
	local k j ns
	for ((k = 1; k <= NODES; k++)); do
		ns=$(node_netns "$k")
		ip netns add "$ns"
		ip -n "$ns" link set lo up
	done
	# The first node: both ends of a veth pair live in its netns, one with the node IP (the kubelet
	# refuses a loopback node IP), the other on the bridge that links the nodes. (The kernel here
	# has no `dummy` link type.)
	ip -n "$NETNS" link add veth0 type veth peer name veth1
	ip -n "$NETNS" link add "$NODE_BRIDGE" type bridge
	ip -n "$NETNS" link set veth1 master "$NODE_BRIDGE"
	# Every further node: a veth pair from its netns to the bridge.
	for ((k = 2; k <= NODES; k++)); do
		ip -n "$(node_netns "$k")" link add veth0 type veth peer name "node$k" netns "$NETNS"
		ip -n "$NETNS" link set "node$k" master "$NODE_BRIDGE"
		ip -n "$NETNS" link set "node$k" up
	done
	ip -n "$NETNS" link set veth1 up
	ip -n "$NETNS" link set "$NODE_BRIDGE" up
	for ((k = 1; k <= NODES; k++)); do
		ns=$(node_netns "$k")
		ip -n "$ns" addr add "$(node_ip "$k")/24" dev veth0
		ip -n "$ns" link set veth0 up
		# Components need a default route to pick their address; nothing answers beyond it.
		ip -n "$ns" route add default dev veth0
		# Pods of the other nodes: through that node (the CNI bridge plugin forwards, isGateway).
		for ((j = 1; j <= NODES; j++)); do
			((j == k)) || ip -n "$ns" route add "$(node_cidr "$j")" via "$(node_ip "$j")" dev veth0
		done
		# No kube-proxy: make the `kubernetes` Service (10.0.0.1:443, what in-cluster clients use)
		# reach the API server with one DNAT rule, for host-network processes (OUTPUT) and pods
		# (PREROUTING on the CNI bridge).
		nsenter --net="/run/netns/$ns" -- iptables -t nat -N SRCSI-KUBERNETES
		nsenter --net="/run/netns/$ns" -- iptables -t nat -A SRCSI-KUBERNETES -d 10.0.0.1/32 -p tcp --dport 443 \
			-j DNAT --to-destination "$NODE_IP:6443"
		nsenter --net="/run/netns/$ns" -- iptables -t nat -A OUTPUT -j SRCSI-KUBERNETES
		nsenter --net="/run/netns/$ns" -- iptables -t nat -A PREROUTING -j SRCSI-KUBERNETES
	done
}

# setup_mntns: with several nodes, a mount namespace for every node, persisted in $MNTNS_DIR,
# where the node's own directory is bind-mounted on /var/lib/kubelet. (A single node keeps the
# machine's: /var/lib/kubelet is its own, and the single-node tests look at it from outside.)
# Made before any node mounts anything: a copy of the machine's mount table taken later would
# hold another node's volume mounts (a tmpfs in two namespaces lives until both unmount it).
# Propagation private: nothing the machine mounts reaches a node (on a host whose / is shared, as
# under systemd, a slave would receive them), and nothing a node mounts reaches the machine or
# another node.
setup_mntns() {
	((NODES > 1)) || return 0
	mkdir -p "$MNTNS_DIR" "$KUBELET_ROOT"
	mount --bind "$MNTNS_DIR" "$MNTNS_DIR"
	mount --make-private "$MNTNS_DIR"
	local k mnt dir
	for ((k = 1; k <= NODES; k++)); do
		mnt=$(node_mntns "$k")
		dir=$(node_dir "$k")
		mkdir -p "$dir/kubelet"
		touch "$mnt"
		unshare --mount="$mnt" --propagation private true
		# The copy of $MNTNS_DIR holds the earlier nodes' namespaces: nothing for this node.
		nsenter --mount="$mnt" -- umount -l "$MNTNS_DIR"
		nsenter --mount="$mnt" -- mount --bind "$dir/kubelet" "$KUBELET_ROOT"
		# Shared, as the kubelet makes it on a machine: the driver's Bidirectional hostPath needs it
		# (and the runtime refuses one on a mount that is not shared).
		nsenter --mount="$mnt" -- mount --make-rshared "$KUBELET_ROOT"
	done
}

# The host's cgroups, for the phases that start kubelets (`up --control-plane-only` runs on any
# cgroup setup and touches none). Two setups run nodes:
# - cgroup v1 (a hybrid or legacy hierarchy, with or without systemd): the kubelet and runc use
#   cgroupfs; node 1's pods go in /kubepods as on a real machine, node k's in /srcsi-node-k/kubepods
#   (setup_cgroups), in every hierarchy; the kubelet is told not to refuse v1 (failCgroupV1: false).
# - cgroup v2 (unified) with systemd, as every current systemd distribution boots: the kubelet and
#   runc use systemd's cgroup driver, as kubeadm sets them up there. Everything the cluster runs
#   lives in one slice, $SLICE: the control plane's daemons as scopes, and per node a slice
#   (node_slice) holding its containerd and kubelet scopes and, as the kubelet's cgroupRoot, its
#   pods' slices. `down` stops the slice.
# cgroup v2 without systemd is refused: nothing there would manage the pods' cgroups as the
# kubelet's systemd driver expects, and the cgroupfs driver beside another manager is unsupported.

# cgroup_version: 2 (unified), 1 (v1 pids and memory hierarchies), or none.
cgroup_version() {
	if [[ -f $CGROUP_ROOT/cgroup.controllers ]]; then
		echo 2
	elif [[ -d $CGROUP_ROOT/pids && -d $CGROUP_ROOT/memory ]]; then
		echo 1
	else
		echo none
	fi
}

# cgroup_problem: prints why this host cannot run nodes, or nothing when it can.
cgroup_problem() {
	local c missing=()
	case $(cgroup_version) in
	1) ;;
	2)
		if [[ ! -d $SYSTEMD_DIR ]]; then
			echo "this host has cgroup v2 but systemd is not its init system: hack/cluster.sh runs nodes on cgroup v2 through systemd's cgroup driver. On this host only \`make test-api\` (a control plane alone) runs"
			return
		fi
		for c in cpu memory pids; do
			grep -qw "$c" "$CGROUP_ROOT/cgroup.controllers" || missing+=("$c")
		done
		if ((${#missing[@]})); then
			echo "the cgroup v2 controllers ${missing[*]} are not available ($CGROUP_ROOT/cgroup.controllers): the kubelet needs cpu, memory and pids"
			return
		fi
		for c in systemd-run systemctl; do
			command -v "$c" >/dev/null || { echo "missing $c: a cluster with nodes on a cgroup v2 host runs its daemons in systemd scopes"; return; }
		done
		;;
	*)
		echo "no cgroups a kubelet can use under $CGROUP_ROOT: neither cgroup v2 (cgroup.controllers) nor the cgroup v1 pids and memory hierarchies. On this host only \`make test-api\` (a control plane alone) runs"
		;;
	esac
}

# check_cgroups: dies, naming what is missing, unless this host can run nodes.
check_cgroups() {
	local problem
	problem=$(cgroup_problem)
	[[ -z $problem ]] || die "$problem"
}

# uses_systemd: true when the cluster `up` last started (or is starting) runs on systemd's cgroups
# ($CL/cgroup-driver, written before anything starts).
uses_systemd() { [[ "$(cat "$CL/cgroup-driver" 2>/dev/null)" == systemd ]]; }

# nodes_ran: true when the cluster `up` last started (or is starting) had nodes: only then do
# `down` and a new `up` clean up pods and cgroups (a control plane alone created none, and on a
# cgroup v2 host the cgroups under the root are systemd's and any other kubelet's). $CL/mode is
# written before anything starts; a containerd directory without it is a node of an older harness.
nodes_ran() { [[ "$(cat "$CL/mode" 2>/dev/null)" == full || (! -e $CL/mode && -d $CTRD) ]]; }

# setup_cgroups: on cgroup v1, the cgroup parent of each further node's pods (its kubelet's
# cgroupRoot), so the kubelets do not share /kubepods: in every hierarchy the machine mounts
# (cgroup v1 and the unified one); cpuset needs its CPUs and memory nodes set before anything can
# join. On cgroup v2 the nodes' slices come with their scopes (start_on), and enable_controllers
# readies each before its kubelet starts.
setup_cgroups() {
	local k d
	uses_systemd && return 0
	for ((k = 2; k <= NODES; k++)); do
		for d in "$CGROUP_ROOT"/*/; do
			[[ -L ${d%/} ]] && continue # cpu -> cpu,cpuacct: the same hierarchy
			mkdir -p "$d$(node_name "$k")"
			if [[ -e ${d}cpuset.cpus ]]; then
				cat "${d}cpuset.cpus" >"$d$(node_name "$k")/cpuset.cpus"
				cat "${d}cpuset.mems" >"$d$(node_name "$k")/cpuset.mems"
			fi
		done
	done
}

# enable_controllers K (cgroup v2): the controllers the kubelet manages pods with (cpu, cpuset,
# memory, hugetlb, pids: those the kernel has) enabled for the children of the root, of $SLICE and
# of node K's slice, its cgroupRoot: the kubelet refuses a cgroupRoot that lacks one. runc enables
# them the same way on every cgroup it creates; systemd enables only those it manages (not
# hugetlb, and cpuset only for a delegated unit). Node K's slice exists once its containerd runs.
enable_controllers() {
	local k=$1 c d
	for d in "$CGROUP_ROOT" "$CGROUP_ROOT/$SLICE" "$CGROUP_ROOT/$SLICE/$(node_slice "$k")"; do
		[[ -d $d ]] || die "no cgroup $d: node $(node_name "$k")'s containerd should have made its slice"
		for c in cpu cpuset memory hugetlb pids; do
			grep -qw "$c" "$CGROUP_ROOT/cgroup.controllers" || continue
			grep -qw "$c" "$d/cgroup.subtree_control" && continue
			echo "+$c" >"$d/cgroup.subtree_control" || die "cannot enable the cgroup controller $c in $d"
		done
	done
}

write_configs() {
	mkdir -p "$CL/etcd"
	pki_all "$PKI" "$NODE_NAME" "$NODE_IP"
	kubeconfig "$CL/admin.kubeconfig" "$APISERVER" "$PKI/ca.crt" "$PKI/admin.crt" "$PKI/admin.key"
	kubeconfig "$CL/controller-manager.kubeconfig" "$APISERVER" "$PKI/ca.crt" \
		"$PKI/controller-manager.crt" "$PKI/controller-manager.key"
	kubeconfig "$CL/scheduler.kubeconfig" "$APISERVER" "$PKI/ca.crt" "$PKI/scheduler.crt" "$PKI/scheduler.key"
	kubeconfig "$CL/kubelet.kubeconfig" "$APISERVER" "$PKI/ca.crt" "$PKI/kubelet.crt" "$PKI/kubelet.key"
	# Each further node's kubelet has its own identity (the Node authorizer and NodeRestriction
	# let a kubelet touch only its own node's objects).
	local k name
	for ((k = 2; k <= NODES; k++)); do
		name=$(node_name "$k")
		pki_cert "$PKI" "kubelet-$name" "/O=system:nodes/CN=system:node:$name" clientAuth
		mkdir -p "$(node_dir "$k")"
		kubeconfig "$(node_dir "$k")/kubelet.kubeconfig" "$APISERVER" "$PKI/ca.crt" "$PKI/kubelet-$name.crt" "$PKI/kubelet-$name.key"
	done

	# One audit event per request (RequestReceived omitted) at Metadata level: user, verb,
	# resource, response code. Tests count these to measure the driver's API load.
	cat >"$CL/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
EOF
}

# The control plane's storage and API server. The controller manager and the scheduler start once
# the API server is ready (cmd_up): the controller manager gives up when the API server is not
# healthy within its own short wait, which a slow host can exceed.
start_control_plane() {
	start_etcd
	start_apiserver
}

start_etcd() {
	start etcd "$KBIN/etcd" --name srcsi --data-dir "$CL/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster srcsi=http://127.0.0.1:2380 \
		--quota-backend-bytes 4294967296 \
		--unsafe-no-fsync # disposable test data: skipping fsync makes every write much faster
}

start_apiserver() {
	start kube-apiserver "$KBIN/kube-apiserver" \
		--etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--client-ca-file "$PKI/ca.crt" \
		--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--authorization-mode Node,RBAC \
		--enable-admission-plugins NodeRestriction \
		--allow-privileged=true \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$PKI/sa.pub" \
		--service-account-signing-key-file "$PKI/sa.key" \
		--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types InternalIP,Hostname \
		--audit-policy-file "$CL/audit-policy.yaml" --audit-log-path "$CL/audit.log" \
		--audit-log-maxsize 0 \
		--profiling=false \
		--v 1
}

start_controller_manager() {
	# nodelifecycle must stay on: it removes the node's not-ready taint (else DaemonSets get no
	# pods). The cloud and IPAM controllers have nothing to do here (no cloud, CNI does IPAM).
	# --node-monitor-period 1s: the not-ready taint goes ~1 s after the node is Ready, not 5 s.
	# --node-monitor-grace-period 20s (default 50s) with several nodes: a node whose kubelet
	# stopped is NotReady sooner (the multi-node suite loses one); the kubelets renew their Lease
	# every 5 s (nodeLeaseDurationSeconds: 20). One node keeps the default: under the heaviest
	# single-node tests a slow renewal must not make the only node NotReady.
	local grace=() controllers='*,-node-ipam-controller'
	((NODES == 1)) || grace=(--node-monitor-grace-period 20s)
	# The cloud controllers left kube-controller-manager in 1.37 (naming them is then an error);
	# before, they are turned off here.
	((${KUBE_MINOR#1.} >= 37)) ||
		controllers+=',-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller'
	# --secure-port 0: nothing scrapes it; saves generating a self-signed serving cert.
	# --kube-api-qps/burst: with per-controller service-account credentials, start-up makes a few
	# requests per controller; the default 20 qps spreads that over ~6 s.
	start kube-controller-manager "$KBIN/kube-controller-manager" \
		--kubeconfig "$CL/controller-manager.kubeconfig" \
		--leader-elect=false \
		--secure-port 0 \
		--use-service-account-credentials \
		--service-account-private-key-file "$PKI/sa.key" \
		--root-ca-file "$PKI/ca.crt" \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--controllers "$controllers" \
		--node-monitor-period 1s \
		"${grace[@]}" \
		--kube-api-qps 200 --kube-api-burst 400 \
		--v 1
}

start_scheduler() {
	# --secure-port 0: nothing scrapes it (and then it needs no authn/authz kubeconfigs).
	start kube-scheduler "$KBIN/kube-scheduler" \
		--kubeconfig "$CL/scheduler.kubeconfig" \
		--leader-elect=false \
		--secure-port 0 \
		--v 1
}

# start_containerd K: node K's containerd, with its own root, state, socket, CNI config (its own pod
# CIDR) and registry hosts.
start_containerd() {
	local k=$1 dir ctrd systemd_cgroup=false
	uses_systemd && systemd_cgroup=true
	dir=$(node_dir "$k")
	ctrd=$dir/containerd
	mkdir -p "$ctrd" "$dir/cni/net.d" "$dir/pod-logs"
	cat >"$ctrd/config.toml" <<EOF
# containerd 2 for the local test cluster (config version 3): own root/state/socket so it never
# meets another containerd on the machine. (Shim sockets still land in /run/containerd/s; names
# are hashed from this socket path, so they do not collide.)
version = 3
root = "$ctrd/root"
state = "$ctrd/state"
# Plugins that only probe and fail here; skipping them saves start-up time and log noise.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$ctrd/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$ctrd/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Imported locally (never pulled); so is busybox, which pods use with imagePullPolicy: Never.
    sandbox = "$PAUSE_IMAGE"
  # Registry hosts (certs.d/HOST:PORT/hosts.toml): how the node reaches the cluster's registry.
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$ctrd/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  # On a host that withholds CAP_SYS_RESOURCE (some VMs and containers) runc cannot lower
  # oom_score_adj below ours: without this every sandbox fails there with "can't get final
  # child's PID from pipe".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        # The same cgroup driver as the kubelet's (cgroupfs on cgroup v1, systemd on v2).
        SystemdCgroup = $systemd_cgroup
        # Our runc (hack/build-tools.sh), and its state under our dir (default /run/containerd/runc).
        BinaryName = "$BIN/runc"
        Root = "$ctrd/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$BIN/cni"]
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
EOF
	# A plain bridge network for pods. ipMasq off: nothing outside the netns to reach anyway,
	# and it keeps iptables free of NAT rules. IPAM state under our dir, not /var/lib/cni.
	cat >"$dir/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$(node_cidr "$k")"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$dir/cni/ipam"
      }
    }
  ]
}
EOF
	# The node trusts the cluster's registry by the cluster CA, as a node trusts a private registry.
	mkdir -p "$ctrd/certs.d/$REGISTRY"
	cat >"$ctrd/certs.d/$REGISTRY/hosts.toml" <<EOF
server = "https://$REGISTRY"

[host."https://$REGISTRY"]
  capabilities = ["pull", "resolve"]
  ca = "$PKI/ca.crt"
EOF
	# PATH: containerd starts its shim (containerd-shim-runc-v2) by name, from beside itself.
	start_on "$k" "containerd$(node_sfx "$k")" env PATH="$BIN:$PATH" "$BIN/containerd" --config "$ctrd/config.toml"
}

# start_registry: distribution's registry on the node IP, storage under the cluster dir (gone at
# `down`). TLS, not plain HTTP: a user's registry is reached over TLS, with a certificate the node
# and the release tools must trust (here the cluster CA's, for containerd's hosts.toml, helm's and
# ociimage's --ca-file); plain HTTP would let an insecure-registry path pass the tests that a real
# installation never takes.
start_registry() {
	mkdir -p "$REGISTRY_DIR"
	cat >"$CL/registry.yaml" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR
http:
  addr: $REGISTRY
  # Signs the upload state; a fixed value keeps the registry from warning about a random one.
  secret: srcsi-local-registry
  tls:
    certificate: $PKI/registry.crt
    key: $PKI/registry.key
EOF
	# OTEL_TRACES_EXPORTER=none: distribution exports traces by default, to nowhere reachable here.
	start registry env OTEL_TRACES_EXPORTER=none "$BIN/registry" serve "$CL/registry.yaml"
}

registry_ready() { in_netns curl -fsS --cacert "$PKI/ca.crt" "https://$REGISTRY/v2/"; }

# build_images: the pause and busybox images (docker-archives written by mkimage; ms each).
build_images() {
	mkdir -p "$IMAGES"
	"$BIN/mkimage" -o "$IMAGES/pause.tar" -tag "$PAUSE_IMAGE" -entrypoint /pause \
		-file "$BIN/pause:/pause:0755"
	busybox_tar "$BUSYBOX_IMAGE" "$IMAGES/busybox.tar"
}

# busybox_tar NAME TAR: the busybox image (Debian's busybox-static) under the reference NAME.
# mkimage's output depends only on its inputs, so every NAME gets the same image ID: containerd
# stores one image, under each name imported.
busybox_tar() {
	local name=$1 tar=$2
	mkdir -p "$IMAGES/busybox-etc"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
		>"$IMAGES/busybox-etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$IMAGES/busybox-etc/group"
	local args=() applet
	# Every applet this busybox has (sh, cat, ls, sleep, md5sum, sha256sum, stat, id, ...).
	for applet in $(/bin/busybox --list); do
		[[ $applet == busybox ]] || args+=(-symlink "/bin/$applet:busybox")
	done
	"$BIN/mkimage" -o "$tar" -tag "$name" -cmd /bin/sh \
		-file /bin/busybox:/bin/busybox:0755 "${args[@]}" \
		-file "$IMAGES/busybox-etc/passwd:/etc/passwd:0644" \
		-file "$IMAGES/busybox-etc/group:/etc/group:0644" \
		-dir /tmp:1777 -dir /root:0700 -dir /var -dir /dev -dir /proc -dir /sys
}

ctr() { ctr_on 1 "$@"; }
# ctr_on K ARGS...: ctr against node K's containerd (in the node's namespaces: its paths).
ctr_on() {
	local k=$1
	shift
	on_node "$k" "$BIN/ctr" --address "$(node_dir "$k")/containerd/containerd.sock" --namespace k8s.io "$@"
}

# import_image TAR: into every node's containerd. (An absolute path: nsenter --mount leaves the
# working directory at the node's root.)
import_image() {
	local k tar
	tar=$(realpath "$1")
	for ((k = 1; k <= NODES; k++)); do ctr_on "$k" images import "$tar" >/dev/null; done
}

# start_kubelet K: node K's kubelet. Its root is /var/lib/kubelet in the node's mount namespace.
start_kubelet() {
	local k=$1 dir cgroup_root=/ cgroup_driver=cgroupfs kubeconfig=$CL/kubelet.kubeconfig
	dir=$(node_dir "$k")
	((k == 1)) || kubeconfig=$dir/kubelet.kubeconfig
	if uses_systemd; then
		# The kubelet names its cgroupRoot as cgroupfs would, each component a slice nested in
		# the one before (-> /srcsi.slice/srcsi-nodeK.slice, node_slice).
		cgroup_driver=systemd
		cgroup_root=/${SLICE%.slice}/node$k
		enable_controllers "$k"
	elif ((k > 1)); then
		cgroup_root=/$(node_name "$k")
	fi
	mkdir -p "$KUBELET_ROOT"
	cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
# cgroupfs on a cgroup v1 host, where the kubelet must not refuse v1; systemd's on a v2 host.
cgroupDriver: $cgroup_driver
# Each node's pods under a cgroup of its own (on cgroup v1 the first node's is /kubepods, as on a
# real machine; on v2 each node's slice).
cgroupRoot: "$cgroup_root"
failCgroupV1: false
failSwapOn: false
# Authn/authz like a real node: client certs from the cluster CA, everything else asked of the
# API server (so the API server's kubelet-client cert, O=system:masters, may logs/exec).
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization:
  mode: Webhook
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
# A small shared disk: never evict pods or delete images because of disk or memory pressure
# (our images are imported, not pullable, so a deleted image cannot come back).
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# No cluster DNS and no host resolv.conf: pods have no reason to resolve names outside.
resolvConf: ""
clusterDomain: cluster.local
podLogsDir: "$dir/pod-logs"
# Faster reaction in tests (defaults are 10s / 1m).
nodeStatusUpdateFrequency: 2s
# Renewed every 5 s (a quarter of it): the controller manager's grace period is 20 s with several nodes.
nodeLeaseDurationSeconds: 20
syncFrequency: 10s
fileCheckFrequency: 5s
EOF
	start_on "$k" "kubelet$(node_sfx "$k")" "$KBIN/kubelet" \
		--config "$dir/kubelet-config.yaml" \
		--kubeconfig "$kubeconfig" \
		--root-dir "$KUBELET_ROOT" \
		--hostname-override "$(node_name "$k")" \
		--node-ip "$(node_ip "$k")" \
		--v 2
}

write_env() {
	local mode=$1 registry=$2
	cat >"$CL/env" <<EOF
# Written by hack/cluster.sh up. Source it, or use \`hack/cluster.sh exec -- CMD\`.
# The API server is reachable only from inside the network namespace \$SRCSI_NETNS.
export KUBECONFIG=$CL/admin.kubeconfig
export SRCSI_NETNS=$NETNS_PATH
export SRCSI_KUBECTL=$KBIN/kubectl
export SRCSI_BIN_DIR=$BIN
export SRCSI_CLUSTER_DIR=$CL
export SRCSI_MODE=$mode
export SRCSI_APISERVER=$APISERVER
export SRCSI_CA_FILE=$PKI/ca.crt
export SRCSI_AUDIT_LOG=$CL/audit.log
export SRCSI_NODE_NAME=$NODE_NAME
export SRCSI_NODE_IP=$NODE_IP
# The kubelet dir as the node sees it (with several nodes, each node's own, in its mount namespace).
export SRCSI_KUBELET_DIR=$KUBELET_ROOT
export SRCSI_PAUSE_IMAGE=$PAUSE_IMAGE
export SRCSI_BUSYBOX_IMAGE=$BUSYBOX_IMAGE
# The nodes (SRCSI_NODE_NAME is the first); per node in \$SRCSI_NODES_FILE: name, IP, network
# namespace, mount namespace ("-": the machine's) and the suffix of its daemons' pids/ and logs/ files.
export SRCSI_NODES="$(for ((k = 1; k <= NODES; k++)); do printf '%s ' "$(node_name "$k")"; done)"
export SRCSI_NODES_FILE=$CL/nodes.list
EOF
	((registry)) && cat >>"$CL/env" <<EOF
# The cluster's OCI registry (host:port, TLS) and the CA its certificate chains to: push with
# \`make release REGISTRY=\$SRCSI_REGISTRY/PATH REGISTRY_CA_FILE=\$SRCSI_REGISTRY_CA\`; the node pulls from it.
export SRCSI_REGISTRY=$REGISTRY
export SRCSI_REGISTRY_CA=$PKI/ca.crt
EOF
	[[ $mode == full ]] && cat >>"$CL/env" <<EOF
# ctr reads these two directly: \`ctr images ls\` talks to the cluster's containerd.
export CONTAINERD_ADDRESS=$CTRD_SOCK
export CONTAINERD_NAMESPACE=k8s.io
EOF
	return 0
}

# write_nodes: the nodes file (what `down`, `import-image` and the tests read).
write_nodes() {
	local k
	for ((k = 1; k <= NODES; k++)); do
		printf '%s %s /run/netns/%s %s %s\n' "$(node_name "$k")" "$(node_ip "$k")" "$(node_netns "$k")" \
			"$(node_mntns "$k" | sed 's/^$/-/')" "$(node_sfx "$k" | sed 's/^$/-/')"
	done >"$CL/nodes.list"
}

# read_nodes: NODES as `up` recorded it (1 when there is no record).
read_nodes() {
	if [[ -s $CL/nodes.list ]]; then NODES=$(wc -l <"$CL/nodes.list"); else NODES=1; fi
}

apiserver_ready() { [[ "$(kubectl get --raw /readyz 2>/dev/null)" == ok ]]; }

default_sa_exists() { kubectl -n default get serviceaccount default; }

# node_ready: Ready=True and the node lifecycle controller has removed the not-ready taint
# (until then new pods stay Pending).
node_ready() {
	local out
	out=$(kubectl get node "$1" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}') || return 1
	[[ $out == True* && $out != *node.kubernetes.io/not-ready* ]]
}

cmd_up() {
	local mode=full registry=1 flag
	for flag in "$@"; do
		case $flag in
		--control-plane-only) mode=control-plane-only registry=0 ;;
		--no-registry) registry=0 ;;
		*) die "unknown flag for up: $flag (want --control-plane-only, --no-registry)" ;;
		esac
	done
	for b in etcd kube-apiserver kube-controller-manager kubectl; do
		[[ -x $KBIN/$b ]] || die "missing $KBIN/$b: run KUBE_VERSION=$KUBE_MINOR hack/build-tools.sh cluster"
	done
	if [[ $mode == full ]]; then
		check_cgroups
		[[ -x $KBIN/kubelet && -x $KBIN/kube-scheduler ]] ||
			die "missing $KBIN/kubelet or kube-scheduler: run KUBE_VERSION=$KUBE_MINOR hack/build-tools.sh cluster"
		for b in mkimage pause containerd containerd-shim-runc-v2 ctr runc cni/bridge; do
			[[ -x $BIN/$b ]] || die "missing $BIN/$b: run hack/build-tools.sh cluster"
		done
		((!registry)) || [[ -x $BIN/registry ]] || die "missing $BIN/registry: run hack/build-tools.sh registry (or up --no-registry)"
		[[ -x /bin/busybox ]] || die "missing /bin/busybox: run hack/install-deps.sh"
	fi

	lock
	teardown # a fresh cluster every time, whatever a previous run left behind
	mkdir -p "$LOGS" "$PIDS"
	echo "$KUBE_MINOR" >"$CL/kube-minor"
	# Before anything starts: what `down` reads to know whether nodes (and their cgroups) ran, and
	# whose cgroups they were.
	echo "$mode" >"$CL/mode"
	if [[ $mode == full && $(cgroup_version) == 2 ]]; then echo systemd >"$CL/cgroup-driver"; fi
	log "Kubernetes $("$KBIN/kube-apiserver" --version | awk '{print $2}'), $("$BIN/containerd" --version | awk '{print $1, $3}')"
	rm -f "$LOGS"/*.log "$CL/audit.log"

	[[ $NODES =~ ^[1-9][0-9]?$ && $NODES -le 20 ]] || die "NODES=$NODES: want 1 to 20 nodes"
	[[ $mode == full || $NODES == 1 ]] || die "--control-plane-only has no nodes (NODES=$NODES)"
	local k
	setup_netns
	setup_mntns
	[[ $mode == control-plane-only ]] || setup_cgroups
	write_configs
	write_nodes
	log "$NODES node(s): netns, mount namespaces and PKI ready"

	start_control_plane
	if [[ $mode == full ]]; then
		((!registry)) || start_registry
		for ((k = 1; k <= NODES; k++)); do start_containerd "$k"; done
		build_images
		for ((k = 1; k <= NODES; k++)); do
			wait_for "containerd of $(node_name "$k") is serving" 20 ctr_on "$k" version
		done
		((!registry)) || wait_for "registry serving on https://$REGISTRY" 20 registry_ready
		import_image "$IMAGES/pause.tar"
		import_image "$IMAGES/busybox.tar"
		log "images imported"
		for ((k = 1; k <= NODES; k++)); do start_kubelet "$k"; done
	fi
	write_env "$mode" "$registry"

	wait_for "kube-apiserver /readyz ok" 60 apiserver_ready
	start_controller_manager
	[[ $mode != full ]] || start_scheduler
	if [[ $mode == full ]]; then
		for ((k = 1; k <= NODES; k++)); do
			wait_for "node $(node_name "$k") Ready" 60 node_ready "$(node_name "$k")"
		done
	fi
	wait_for "ServiceAccount default/default exists" 60 default_sa_exists
	log "cluster up ($mode); env: $CL/env"
}

# check-host [--control-plane-only]: whether this host can run what `up` starts, said in a second,
# before anything is installed or built (`make up`, `make test`, `make soak`, `make bench` and `make
# test-api` run it first): Linux, root, apt (hack/install-deps.sh installs Debian's packages), a Go
# toolchain as new as go.mod asks, and for nodes their cgroups (cgroup_problem). Every problem is
# listed, then it fails.
cmd_check_host() {
	local mode=full want have problems=() problem
	case ${1:-} in
	"") ;;
	--control-plane-only) mode=control-plane-only ;;
	*) die "usage: cluster.sh check-host [--control-plane-only]" ;;
	esac
	[[ $(uname -s) == Linux ]] || problems+=("this is $(uname -s), not Linux: the cluster's kubelet, containerd and network namespaces are Linux's")
	[[ $(id -u) == 0 ]] || problems+=("not root: run it as root (sudo); the cluster mounts file systems, makes network namespaces and runs a kubelet")
	command -v apt-get >/dev/null && command -v dpkg-query >/dev/null ||
		problems+=("no apt-get or dpkg-query: hack/install-deps.sh installs the cluster's packages with apt (a Debian-based host)")
	want=$(awk '$1 == "go" { print $2; exit }' "$ROOT/go.mod")
	if ! have=$(go env GOVERSION 2>/dev/null); then
		problems+=("no Go toolchain (go) in PATH: the cluster's binaries and the driver are built with Go $want or later")
	elif [[ $(printf '%s\n' "go$want" "$have" | sort -V | head -n 1) != "go$want" ]]; then
		problems+=("Go $have is older than go.mod's go $want: install Go $want or later")
	fi
	if [[ $mode == full ]]; then
		problem=$(cgroup_problem)
		[[ -z $problem ]] || problems+=("$problem")
	fi
	if ((${#problems[@]})); then
		printf 'this host cannot run the local cluster%s:\n' "$([[ $mode == full ]] || echo "'s control plane")" >&2
		printf -- '- %s\n' "${problems[@]}" >&2
		return 1
	fi
	log "host ok: $(uname -r), cgroup $(cgroup_version)$([[ $(cgroup_version) != 2 ]] || echo " with systemd"), $have"
}

# ---------------------------------------------------------------------------------------------
# down

# Processes this harness started, found without PID files: binaries under _output/bin, or
# anything whose command line names our cluster dir (containerd --config, its shims -address).
# Matches full paths only, never bare names.
harness_pids() {
	{
		find /proc -mindepth 2 -maxdepth 2 -name exe -lname "$BIN/*" 2>/dev/null
		grep -lsF -- "$CL/" /proc/[0-9]*/cmdline
	} | cut -d/ -f3 | sort -un | grep -vxF -f <(ancestors) || true
}

# This script and its callers (a caller's command line may well mention our paths).
ancestors() {
	local p=$$
	while ((p > 1)); do
		echo "$p"
		p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null) || break
	done
	echo 1
}

# Processes in the kubelets' pod cgroups (all containers, including host-network ones): on cgroup
# v1 in the hierarchies the harness reads, on v2 in the nodes' slices.
pod_pids() {
	if uses_systemd || [[ ${1:-} == v2 ]]; then
		find "$CGROUP_ROOT/$SLICE" -path '*/*kubepods*' -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
		return
	fi
	find "$CGROUP_ROOT/pids" "$CGROUP_ROOT/memory" "$CGROUP_ROOT/unified" -path '*/kubepods*' \
		-name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

# kill_wait SIGNAL SECONDS PID...: signal, then wait until all are gone.
kill_wait() {
	local sig=$1 secs=$2
	shift 2
	(($#)) || return 0
	kill "-$sig" "$@" 2>/dev/null || true
	local i p alive
	for ((i = 0; i < secs * 20; i++)); do
		alive=0
		for p in "$@"; do
			# A zombie has no exe link; it is as good as gone (its parent will reap it).
			[[ -e /proc/$p/exe ]] && alive=1 && break
		done
		((alive)) || return 0
		sleep 0.05
	done
	return 1
}

stop_processes() {
	local pids=() f p
	# 1. The daemons from PID files (only if the PID still runs one of ours: PIDs get reused).
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		p=$(cat "$f")
		if [[ -e /proc/$p ]] && { [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == "$BIN"/* ]] ||
			tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$CL/"; }; then
			pids+=("$p")
		fi
	done
	# SIGKILL straight away: all state is thrown away anyway, and on SIGTERM the API server and
	# etcd take many seconds to drain while the kubelet and containerd gain nothing from it.
	kill_wait KILL 3 "${pids[@]}" || log "warning: daemons survive SIGKILL: ${pids[*]}"
	rm -f "$PIDS"/*.pid

	# 2. Every container process (the kubelet is gone, nothing restarts them), when nodes ran.
	if nodes_ran; then
		mapfile -t pids < <(pod_pids)
		kill_wait KILL 3 "${pids[@]}" || log "warning: pod processes survive: ${pids[*]}"
	fi

	# 3. Anything else of ours (shims, a daemon from a run whose PID files are lost).
	mapfile -t pids < <(harness_pids)
	if ((${#pids[@]})); then
		kill_wait KILL 3 "${pids[@]}" || log "warning: processes survive: ${pids[*]}"
	fi
}

# Mount points (decoded) under the given prefixes, deepest first.
mounts_under() {
	local prefix mp
	awk '{print $5}' /proc/self/mountinfo | while read -r mp; do
		mp=$(printf '%b' "$mp") # mountinfo escapes spaces etc. as \040
		for prefix in "$@"; do
			if [[ $mp == "$prefix" || $mp == "$prefix"/* ]]; then
				echo "$mp"
				break
			fi
		done
	done | awk '{print length($0) "\t" $0}' | sort -rn | cut -f2-
}

unmount_all() {
	local prefixes=("$KUBELET_ROOT" "$CL") mp i
	# Pod network namespaces of containerd's CRI (it always puts them there).
	for mp in /run/netns/cni-*; do [[ -e $mp ]] && prefixes+=("$mp"); done
	# Repeat: mounts can be stacked, and unmounting a parent may expose nothing new but a
	# lazily detached one disappears only from the list after the syscall.
	for ((i = 0; i < 5; i++)); do
		mapfile -t mps < <(mounts_under "${prefixes[@]}")
		((${#mps[@]})) || return 0
		for mp in "${mps[@]}"; do
			umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
		done
	done
	mapfile -t mps < <(mounts_under "${prefixes[@]}")
	((${#mps[@]} == 0)) && return 0
	log "ERROR: mounts remain: ${mps[*]}"
	return 1
}

remove_iptables_chains() {
	# The kubelet runs inside the netns, so its chains die with it; this only catches chains a
	# kubelet run outside the netns may have left in the host's tables (KUBE-FIREWALL,
	# KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, ...). One iptables-save per family when clean.
	local ipt table chain rule
	for ipt in iptables ip6tables; do
		command -v "$ipt-save" >/dev/null || continue
		"$ipt-save" 2>/dev/null | grep -qE '^:(KUBE-|SRCSI-)' || continue
		for table in filter nat mangle; do
			for chain in $("$ipt" -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|SRCSI-)/ {print $2}'); do
				# Drop the jumps to it from other chains, then the chain itself.
				"$ipt" -w -t "$table" -S | grep -E -- "-j $chain( |\$)" | sed 's/^-A //' |
					while read -r rule; do eval "$ipt -w -t $table -D $rule" || true; done
				"$ipt" -w -t "$table" -F "$chain" 2>/dev/null || true
			done
			for chain in $("$ipt" -w -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|SRCSI-)/ {print $2}'); do
				"$ipt" -w -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
}

remove_cgroups() {
	local d i
	# cgroup v2: stopping the slice stops every unit in it (the daemons' scopes are gone with their
	# processes; the kubelets' pod slices stay until stopped) and systemd removes their cgroups.
	if uses_systemd; then
		if [[ -e $CGROUP_ROOT/$SLICE ]]; then
			timeout $((30 * TIMEOUT_SCALE)) systemctl stop "$SLICE" || log "warning: systemctl stop $SLICE failed"
		fi
		systemctl reset-failed "${SYSTEMD_UNITS[@]}" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			[[ -e $CGROUP_ROOT/$SLICE ]] || return 0
			sleep 0.05
		done
		log "warning: cgroups remain: $CGROUP_ROOT/$SLICE"
		return 0
	fi
	# Deepest first (rmdir only removes empty cgroups); retry while the kernel frees them.
	for ((i = 0; i < 20; i++)); do
		mapfile -t dirs < <(find "$CGROUP_ROOT"/*/kubepods* "$CGROUP_ROOT"/*/"$NODE_NAME"-* -depth -type d 2>/dev/null)
		((${#dirs[@]})) || return 0
		for d in "${dirs[@]}"; do rmdir "$d" 2>/dev/null || true; done
		sleep 0.05
	done
	log "warning: cgroups remain: $(find "$CGROUP_ROOT"/*/kubepods* "$CGROUP_ROOT"/*/"$NODE_NAME"-* -maxdepth 0 2>/dev/null | tr '\n' ' ')"
}

teardown() {
	stop_processes

	# Sockets of our shims (in /run/containerd/s) are named in each task bundle's address file.
	local f a id
	for f in "$CTRD"/state/io.containerd.runtime.v2.task/*/*/address \
		"$CL"/nodes/*/containerd/state/io.containerd.runtime.v2.task/*/*/address; do
		[[ -e $f ]] || continue
		a=$(cat "$f")
		a=${a#unix://}
		[[ $a == /run/containerd/s/* ]] && rm -f "$a"
	done
	# libcni's result cache (/var/lib/cni/results, not configurable in containerd) has
	# NETWORK-SANDBOXID-IFNAME entries for our sandboxes.
	for f in "$CTRD"/state/io.containerd.grpc.v1.cri/sandboxes/* \
		"$CL"/nodes/*/containerd/state/io.containerd.grpc.v1.cri/sandboxes/*; do
		[[ -e $f ]] || continue
		id=$(basename "$f")
		rm -f /var/lib/cni/results/*-"$id"-*
	done

	# The further nodes' mount namespaces: with their processes gone, unmounting the file that
	# holds each one ends it, and every mount in it (volumes, pod netns, /var/lib/kubelet) with it.
	local mnt
	for mnt in "$MNTNS_DIR"/*; do
		[[ -e $mnt ]] || continue
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
		rm -f "$mnt"
	done
	if mountpoint -q "$MNTNS_DIR" 2>/dev/null; then umount "$MNTNS_DIR" || umount -l "$MNTNS_DIR" || true; fi
	rmdir "$MNTNS_DIR" 2>/dev/null || true

	local unmounted=true
	unmount_all || unmounted=false
	rm -f /run/netns/cni-* 2>/dev/null || true

	local ns
	for ns in /run/netns/"$NETNS" /run/netns/"$NETNS"-*; do
		[[ -e $ns ]] || continue
		ip netns delete "$(basename "$ns")" || umount -l "$ns" 2>/dev/null || true
		rm -f "$ns"
	done
	# `ip netns add` turned /run/netns into a (shared) mount point; undo that once no network
	# namespace is left in it, so the mount table is as before.
	if [[ -d /run/netns ]] && [[ -z "$(ls -A /run/netns)" ]]; then
		umount /run/netns 2>/dev/null || true
		rmdir /run/netns 2>/dev/null || true
	fi
	# Only there if a CNI plugin ran outside the netns.
	if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then ip link delete "$CNI_BRIDGE"; fi
	remove_iptables_chains
	if nodes_ran; then remove_cgroups; fi

	# Empty directories the shims and libcni created (rmdir leaves them if anything else is there).
	rmdir /run/containerd/s /run/containerd /var/lib/cni/results /var/lib/cni 2>/dev/null || true

	# Never rm while a mount is left below: rm -rf would follow a bind mount into another tree
	# (--one-file-system does not catch a bind mount from the same file system).
	$unmounted || die "not removing $KUBELET_ROOT and $CL: mounts remain (see above)"
	rm -rf --one-file-system "$KUBELET_ROOT"
	# Pod log symlinks the kubelet made in /var/log/containers point into our pod-logs dir.
	for f in /var/log/containers/*; do
		[[ -L $f && "$(readlink "$f")" == "$CL/"* ]] && rm -f "$f"
	done
	rmdir /var/log/containers 2>/dev/null || true
	# Keep the logs and the audit log for post-mortems; everything else goes.
	if [[ -d $CL ]]; then
		find "$CL" -mindepth 1 -maxdepth 1 ! -name logs ! -name audit.log \
			-exec rm -rf --one-file-system {} +
	fi
}

cmd_down() {
	lock
	teardown
	log "down"
}

# node_index NAME: k of the node named NAME (from the nodes file), or die.
node_index() {
	local k
	read_nodes
	for ((k = 1; k <= NODES; k++)); do
		[[ $(node_name "$k") == "$1" ]] && { echo "$k"; return; }
	done
	die "no node $1 (nodes: $(awk '{printf "%s ", $1}' "$CL/nodes.list" 2>/dev/null))"
}

# node-kill NODE: SIGKILL to the node's kubelet, containerd and driver process, at once, as a
# power loss would stop them (nothing gets to clean up or to say goodbye to the API server). The
# driver is found as the process named shared-resource-csi in the node's pod cgroups. The
# containers' shims and the other pods' processes are left running, as the tests want a node
# whose pods come back with it.
cmd_node_kill() {
	(($# == 1)) || die "usage: cluster.sh node-kill NODE"
	local k pids=() f p parent drivers=0
	read_nodes
	k=$(node_index "$1")
	if uses_systemd; then
		parent=$SLICE/$(node_slice "$k")
	elif ((k == 1)); then
		parent=pids/kubepods
	else
		parent=pids/$(node_name "$k")/kubepods
	fi
	for f in "$PIDS/kubelet$(node_sfx "$k").pid" "$PIDS/containerd$(node_sfx "$k").pid"; do
		{ [[ -e $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; } || die "node $1: $(basename "$f" .pid) is not running"
		pids+=("$(cat "$f")")
	done
	# The node plugin, and a status controller replica when one runs on this node: the same binary.
	while read -r p; do
		[[ "$(cat "/proc/$p/comm" 2>/dev/null)" == shared-resourc* ]] && pids+=("$p") && drivers=$((drivers + 1))
	done < <(find "$CGROUP_ROOT/$parent" -path '*/*kubepods*' -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un)
	((drivers >= 1 && drivers <= 3)) || die "node $1: found $drivers driver processes in its pod cgroups, want the node plugin and at most two status controller replicas"
	kill_wait KILL 3 "${pids[@]}" || die "node $1: processes survive SIGKILL: ${pids[*]}"
	rm -f "$PIDS/kubelet$(node_sfx "$k").pid" "$PIDS/containerd$(node_sfx "$k").pid"
	log "node $1: killed kubelet, containerd and driver (pids ${pids[*]})"
}

# node-start NODE: the node's containerd and kubelet again, on the state they left.
cmd_node_start() {
	(($# == 1)) || die "usage: cluster.sh node-start NODE"
	local k
	read_nodes
	k=$(node_index "$1")
	[[ -e $PIDS/kubelet$(node_sfx "$k").pid ]] && die "node $1: its kubelet runs (node-kill it first)"
	start_containerd "$k"
	wait_for "containerd of $1 is serving" 20 ctr_on "$k" version
	start_kubelet "$k"
	wait_for "node $1 Ready" 60 node_ready "$1"
}

# port_free PORT: true when nothing in the first node's network namespace listens on PORT.
port_free() { [[ -z $(nsenter --net="$NETNS_PATH" -- ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

# restart-control-plane: SIGKILL to etcd and the API server at once, as a crash of the control
# plane's machine would stop them, then both started again on the data they left; returns when the
# API server is ready. The kubelets, drivers and controllers see the API server gone meanwhile.
cmd_restart_control_plane() {
	local f pids=()
	for f in "$PIDS/kube-apiserver.pid" "$PIDS/etcd.pid"; do
		if ! [[ -e $f ]] || ! kill -0 "$(cat "$f")" 2>/dev/null; then die "$(basename "$f" .pid) is not running"; fi
		pids+=("$(cat "$f")")
	done
	kill_wait KILL 3 "${pids[@]}" || die "processes survive SIGKILL: ${pids[*]}"
	# A killed process loses its memory (and the exe link kill_wait looks at) before the kernel
	# closes its sockets: the restarted daemons would find their ports taken.
	local port
	for port in 2379 2380 6443; do
		wait_for "port $port free" 20 port_free "$port" || die "port $port still in use after the control plane was killed"
	done
	log "control plane: killed etcd and the API server (pids ${pids[*]})"
	start_etcd
	start_apiserver
	wait_for "API server ready again" 60 apiserver_ready
}

# check-down: what `down` must leave behind is nothing but the logs: no process of ours, no mount
# (in any mount namespace: every process's mount table is read), no network or mount namespace,
# no cgroup, no kubelet dir, no CNI state of ours. Prints each leftover and fails if there is one.
cmd_check_down() {
	local left=() p f
	mapfile -t p < <(harness_pids)
	((${#p[@]} == 0)) || left+=("processes: ${p[*]}")
	# Pods and cgroups: on cgroup v1 any kubepods cgroup (teardown removes any, as on the one
	# kubelet machine this harness assumes); on v2 its slice, and any unit of its.
	local cgroups=()
	case $(cgroup_version) in
	1)
		mapfile -t p < <(pod_pids)
		((${#p[@]} == 0)) || left+=("pod processes: ${p[*]}")
		cgroups=("$CGROUP_ROOT"/*/kubepods* "$CGROUP_ROOT"/*/"$NODE_NAME"-*)
		;;
	2)
		mapfile -t p < <(pod_pids v2)
		((${#p[@]} == 0)) || left+=("pod processes: ${p[*]}")
		cgroups=("$CGROUP_ROOT/$SLICE")
		if [[ -d $SYSTEMD_DIR ]]; then
			mapfile -t p < <(systemctl list-units --all --plain --no-legend "${SYSTEMD_UNITS[@]}" 2>/dev/null | awk '{print $1}')
			((${#p[@]} == 0)) || left+=("systemd units: ${p[*]}")
		fi
		;;
	esac
	mapfile -t p < <(mounts_under "$KUBELET_ROOT" "$CL" "$MNTNS_DIR")
	((${#p[@]} == 0)) || left+=("mounts: ${p[*]}")
	# A mount namespace of a node that outlived `down` shows in its processes' mount tables, or,
	# held by a file alone, in the machine's (above).
	mapfile -t p < <(grep -lsE -- "$CL/| $KUBELET_ROOT(/| )" /proc/[0-9]*/mountinfo | grep -v "^/proc/$$/")
	((${#p[@]} == 0)) || left+=("processes with our mounts: ${p[*]}")
	mapfile -t p < <(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^($NETNS|$NETNS-[0-9]+)$")
	((${#p[@]} == 0)) || left+=("network namespaces: ${p[*]}")
	for f in "$MNTNS_DIR" "$KUBELET_ROOT" "${cgroups[@]}" \
		"$CL"/nodes "$CL"/containerd "$CL"/kubelet; do
		[[ -e $f ]] && left+=("left: $f")
	done
	for f in /var/log/containers/*; do
		[[ -L $f && "$(readlink "$f")" == "$CL/"* ]] && left+=("log link: $f")
	done
	ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && left+=("link: $CNI_BRIDGE")
	for f in iptables ip6tables; do
		command -v "$f-save" >/dev/null || continue
		"$f-save" 2>/dev/null | grep -qE '^:(KUBE-|SRCSI-)' && left+=("$f chains: $("$f-save" 2>/dev/null | grep -oE '^:(KUBE-|SRCSI-)[^ ]+' | tr '\n' ' ')")
	done
	if ((${#left[@]})); then
		printf 'down left behind: %s\n' "${left[@]}" >&2
		return 1
	fi
	log "nothing left behind"
}

# ---------------------------------------------------------------------------------------------

cmd_exec() {
	[[ ${1:-} == -- ]] && shift
	(($#)) || die "usage: cluster.sh exec -- CMD [ARGS...]"
	[[ -e $CL/env && -e $NETNS_PATH ]] || die "no cluster: run hack/cluster.sh up"
	set -a
	# shellcheck disable=SC1091
	source "$CL/env"
	set +a
	export PATH=$KBIN:$BIN:$PATH # `kubectl` is the cluster's own, not /usr/bin/kubectl
	exec nsenter --net="$NETNS_PATH" -- "$@"
}

cmd_import_image() {
	(($# == 1)) || die "usage: cluster.sh import-image TAR"
	[[ -S $CTRD_SOCK ]] || die "containerd is not running (hack/cluster.sh up, not --control-plane-only)"
	read_nodes
	import_image "$1"
}

# node-exec NODE -- CMD...: run CMD on node NODE (its network and mount namespaces: its
# /var/lib/kubelet, its containerd), with the cluster env.
cmd_node_exec() {
	local name=${1:-} k
	shift || true
	[[ ${1:-} == -- ]] && shift
	{ [[ -n $name ]] && (($#)); } || die "usage: cluster.sh node-exec NODE -- CMD [ARGS...]"
	read_nodes
	for ((k = 1; k <= NODES; k++)); do
		[[ $(node_name "$k") == "$name" ]] || continue
		set -a
		# shellcheck disable=SC1091
		source "$CL/env"
		set +a
		export PATH=$BIN:$PATH
		on_node "$k" "$@"
		return
	done
	die "no node $name (nodes: $(awk '{printf "%s ", $1}' "$CL/nodes.list" 2>/dev/null))"
}

# import-busybox NAME: the cluster's busybox, also under NAME. For test suites that name their
# image themselves (Kubernetes' e2e suites want registry.k8s.io/e2e-test-images/busybox:TAG):
# they are in no registry the node can reach, and an image present under that exact name is never
# pulled.
cmd_import_busybox() {
	(($# == 1)) || die "usage: cluster.sh import-busybox NAME"
	[[ -S $CTRD_SOCK ]] || die "containerd is not running (hack/cluster.sh up, not --control-plane-only)"
	local tar
	tar=$IMAGES/busybox-$(printf '%s' "$1" | sha256sum | cut -c1-12).tar
	busybox_tar "$1" "$tar"
	read_nodes
	import_image "$tar"
	rm -f "$tar"
	log "imported busybox as $1"
}

cmd_status() {
	local f p
	for f in "$PIDS"/*.pid; do
		[[ -e $f ]] || continue
		p=$(cat "$f")
		if kill -0 "$p" 2>/dev/null; then state=running; else state=dead; fi
		printf '%-24s pid %-8s %s\n' "$(basename "$f" .pid)" "$p" "$state"
	done
	[[ -e $NETNS_PATH ]] && echo "netns $NETNS_PATH" || echo "no netns"
}

# Sourced (hack/clustertest tests its functions): define them, run nothing.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
check-down) cmd_check_down ;;
check-host) shift; cmd_check_host "$@" ;;
node-exec) shift; cmd_node_exec "$@" ;;
node-kill) shift; cmd_node_kill "$@" ;;
node-start) shift; lock; cmd_node_start "$@" ;;
restart-control-plane) lock; cmd_restart_control_plane ;;
exec) shift; cmd_exec "$@" ;;
import-image) shift; cmd_import_image "$@" ;;
import-busybox) shift; cmd_import_busybox "$@" ;;
status) cmd_status ;;
*)
	sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
