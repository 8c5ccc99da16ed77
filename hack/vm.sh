#!/usr/bin/env bash
# The VM tier (`make test-vm`): the README's `make up` on a stock Debian 12 host, with systemd and
# the unified cgroup v2 hierarchy as Debian installs it, in a virtual machine this script builds
# and boots under qemu. Needs root on the host (debootstrap), and nothing from outside Debian's
# archive and the Go module proxy.
#
#   1. The root: `debootstrap --variant=minbase` of Debian 12 (bookworm) with systemd, udev and
#      Debian's kernel, the packages `make up` installs (hack/install-deps.sh cluster --list), make
#      and git; a service that runs the payload's run.sh at boot and then powers off. Written
#      into an ext4 image (mkfs.ext4 -d, nothing mounted) with the kernel and initrd beside it,
#      cached outside the clone in $VM_CACHE/<key>: the key is a hash of everything that went into
#      it (suite, mirror, packages, this configuration), so a change builds a new one and an
#      unchanged one is reused. The VM writes to a throwaway overlay of it (qemu's snapshot).
#   2. The payload: a second disk holding a clone of this tree (with its uncommitted changes) and
#      the binaries `make up` runs, the driver's included, from this host's _output/bin (hard
#      links, not a second build: `make tools-cluster` there finds them up to date, and `make
#      build` finds the driver's build ID current and does not link it again). The host's Go
#      toolchain, module cache and build cache are shared into the VM over 9p at the same paths,
#      which go reads to see that.
#   3. Boot: qemu-system-x86_64 with software emulation (TCG, 2 vCPUs, 4 GiB), the kernel booted
#      directly, no network device: the cluster's packets stay in its network namespaces.
#   4. Inside, run.sh: the host's cgroups shown; `make up` (with TIMEOUT_SCALE for emulation's
#      pace and a short RELIST_INTERVAL); the example pod reads its CA; the ClusterRoleBinding
#      use-corp-ca deleted, and /etc/corp-ca in the pod empty within the relist; `make down`, then
#      `hack/cluster.sh check-down` and no systemd unit of the cluster left.
#   5. The console is printed as it comes and kept in _output/vm/console.log; the cluster's logs
#      are copied out of the payload disk into _output/vm/cluster-logs. It passes only when run.sh
#      printed its PASS line and exited 0.
#
#   hack/vm.sh        all of it (`make test-vm`)
#   hack/vm.sh root   step 1 alone: the root built, or found in the cache (.ci/run builds it in the
#                     background while the other tiers run)
#
# Environment: VM_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/shared-resource-csi/vm),
# VM_MIRROR (default http://deb.debian.org/debian), VM_TIMEOUT (minutes, default 50),
# VM_TIMEOUT_SCALE (the VM's TIMEOUT_SCALE, default 10), VM_RELIST_INTERVAL (default 20s).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh

VM_CACHE=${VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shared-resource-csi/vm}
VM_MIRROR=${VM_MIRROR:-http://deb.debian.org/debian}
VM_SUITE=bookworm
VM_TIMEOUT=${VM_TIMEOUT:-50}
VM_TIMEOUT_SCALE=${VM_TIMEOUT_SCALE:-10}
VM_RELIST_INTERVAL=${VM_RELIST_INTERVAL:-20s}
[[ $VM_CACHE == /?* ]] || { echo "VM_CACHE=$VM_CACHE: want an absolute path" >&2; exit 2; }
[[ $VM_TIMEOUT =~ ^[1-9][0-9]*$ ]] || { echo "VM_TIMEOUT=$VM_TIMEOUT: want whole minutes" >&2; exit 2; }
[[ $VM_TIMEOUT_SCALE =~ ^[1-9][0-9]*$ ]] || { echo "VM_TIMEOUT_SCALE=$VM_TIMEOUT_SCALE: want a whole number" >&2; exit 2; }
[[ $VM_RELIST_INTERVAL =~ ^[1-9][0-9]*s$ ]] || { echo "VM_RELIST_INTERVAL=$VM_RELIST_INTERVAL: want whole seconds, as 20s" >&2; exit 2; }
OUT=$ROOT/_output/vm
T0=$(date +%s)

log() { printf '[vm %4ds] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
case ${1:-} in
"") only_root=0 ;;
root) only_root=1 ;;
*) echo "usage: $0 [root]" >&2; exit 2 ;;
esac

[[ $(id -u) == 0 ]] || die "the VM tier needs root (debootstrap, and the VM's disks are written as root's)"
for c in qemu-system-x86_64 debootstrap mkfs.ext4 debugfs; do
	command -v "$c" >/dev/null || die "missing $c: run hack/install-deps.sh vm"
done

# ---------------------------------------------------------------------------------------------
# 1. The root.

# The packages: what debootstrap's minbase lacks of a stock Debian 12 server (systemd as init,
# udev, dbus, the kernel, kmod to load its modules), what `make up` installs, and make and git
# (the Makefile stamps the version from git).
mapfile -t cluster_pkgs < <(hack/install-deps.sh cluster --list)
root_pkgs=(systemd systemd-sysv udev dbus linux-image-amd64 kmod make git "${cluster_pkgs[@]}")
mapfile -t root_pkgs < <(printf '%s\n' "${root_pkgs[@]}" | sort -u)

# The service that runs the payload's run.sh once the system is up, prints how it ended on the
# console, and powers off (also when it fails, or when no payload is attached).
read -r -d '' RUN_UNIT <<'EOF' || true
[Unit]
Description=The VM tier: run.sh from the payload disk, then power off
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/srcsi-vm-run
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
read -r -d '' RUN_SCRIPT <<'EOF' || true
#!/bin/bash
# Mounts the payload disk at /srv, runs /srv/run.sh, says how it ended, powers off.
rc=99
mkdir -p /srv
if mount /dev/vdb /srv; then
	bash /srv/run.sh
	rc=$?
fi
echo "srcsi-vm: run.sh exited $rc"
sync
systemctl poweroff --no-block
EOF

# configure_root DIR: what the root gets beyond the packages (in the key: declare -f).
configure_root() {
	local r=$1
	echo srcsi-vm >"$r/etc/hostname"
	printf '127.0.0.1 localhost\n127.0.1.1 srcsi-vm\n' >"$r/etc/hosts"
	echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$r/etc/fstab"
	# Root logs in on the console without a password (the VM has no network).
	chroot "$r" passwd -d root >/dev/null
	printf '%s\n' "$RUN_UNIT" >"$r/etc/systemd/system/srcsi-vm-run.service"
	printf '%s\n' "$RUN_SCRIPT" >"$r/usr/local/sbin/srcsi-vm-run"
	chmod 0755 "$r/usr/local/sbin/srcsi-vm-run"
	ln -sf /etc/systemd/system/srcsi-vm-run.service "$r/etc/systemd/system/multi-user.target.wants/srcsi-vm-run.service"
	# Nothing else runs at boot that emulation would make slow: apt's and the file systems' timers.
	local t
	for t in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer; do
		ln -sf /dev/null "$r/etc/systemd/system/$t"
	done
	# The archive's lists are not needed at run time (the VM has no network).
	rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/archives/*.deb
}

key=$({
	echo "$VM_SUITE $VM_MIRROR"
	printf '%s\n' "${root_pkgs[@]}"
	declare -f configure_root
	printf '%s\n%s\n' "$RUN_UNIT" "$RUN_SCRIPT"
} | sha256sum | cut -c1-16)
cache=$VM_CACHE/$key

build_root() {
	local tmp t=$SECONDS
	mkdir -p "$VM_CACHE"
	tmp=$(mktemp -d "$VM_CACHE/.build.XXXXXX")
	# On failure the partial build goes, with whatever debootstrap left mounted in it (its /proc and
	# /sys, when it was killed).
	trap 'umount -R "$tmp/root/proc" "$tmp/root/sys" 2>/dev/null; rm -rf --one-file-system "$tmp"' EXIT
	log "building the Debian 12 root (debootstrap from $VM_MIRROR; ${#root_pkgs[@]} packages besides minbase)"
	# Every package checked against Debian's archive key, whatever the host's debootstrap defaults to.
	debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg --force-check-gpg \
		--include="$(IFS=,; echo "${root_pkgs[*]}")" "$VM_SUITE" "$tmp/root" "$VM_MIRROR" \
		>"$tmp/debootstrap.log" 2>&1 || { tail -n 30 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }
	configure_root "$tmp/root"
	cp "$tmp/root"/boot/vmlinuz-* "$tmp/vmlinuz"
	cp "$tmp/root"/boot/initrd.img-* "$tmp/initrd.img"
	mkfs.ext4 -q -F -L srcsi-vm-root -d "$tmp/root" "$tmp/root.img" 4G
	rm -rf --one-file-system "$tmp/root"
	printf '%s\n' "${root_pkgs[@]}" >"$tmp/packages"
	echo "$((SECONDS - t))" >"$tmp/build-seconds"
	mv "$tmp" "$cache.new" && mv -T "$cache.new" "$cache"
	trap - EXIT
	# Roots of other keys are outdated: only one is kept. Only what this script makes there goes
	# (VM_CACHE may be a directory that holds other things too).
	find "$VM_CACHE" -mindepth 1 -maxdepth 1 ! -name "$key" -regextype posix-extended \
		-regex '.*/([0-9a-f]{16}(\.new)?|\.build\..*)' -exec rm -rf --one-file-system {} +
	log "root built in $((SECONDS - t)) s: $cache"
}

# One build at a time (.ci/run starts one in the background): the others wait for it and use it.
mkdir -p "$VM_CACHE"
exec 8>"$VM_CACHE/.lock"
flock 8
if [[ -f $cache/root.img ]]; then
	log "root cached: $cache (built in $(cat "$cache/build-seconds" 2>/dev/null || echo ?) s)"
else
	build_root
fi
exec 8>&-
((!only_root)) || exit 0

# ---------------------------------------------------------------------------------------------
# 2. The payload.

minor=$(kube_minor)
kbin=$(kube_bin_dir "$ROOT" "$minor")
for b in "$kbin"/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl} \
	_output/bin/{shared-resource-csi,containerd,containerd-shim-runc-v2,ctr,runc,mkimage,pause} _output/bin/cni/bridge; do
	[[ -x $b ]] || die "missing $b: the VM runs the binaries built here (make tools-cluster build)"
done
rm -rf --one-file-system "$OUT"
mkdir -p "$OUT/stage"
stage=$OUT/stage
# The tree as it is here: a clone of its commits, then its uncommitted changes and untracked
# files over it (git describe in the VM then says -dirty exactly when this tree is).
git clone -q --no-hardlinks "$ROOT" "$stage/src"
{
	git -C "$ROOT" diff -z --name-only --diff-filter=d HEAD
	git -C "$ROOT" ls-files -z --others --exclude-standard
} | (cd "$ROOT" && tar -c --null -T -) | tar -x -C "$stage/src"
git -C "$ROOT" diff -z --name-only --diff-filter=D HEAD | (cd "$stage/src" && xargs -0r rm -f)
# The binaries `make up` runs (hack/build-tools.sh cluster), with their stamps, as hard links.
mkdir -p "$stage/src/_output/bin/cni" "$stage/src/_output/bin/k8s-$minor"
cp -al "$kbin"/. "$stage/src/_output/bin/k8s-$minor/"
for b in containerd containerd-shim-runc-v2 ctr runc mkimage pause; do
	cp -al "_output/bin/$b" "_output/bin/.$b.stamp" "$stage/src/_output/bin/"
done
# The driver (make test-vm builds it first): the same tree and flags give the same build ID.
cp -al _output/bin/shared-resource-csi "$stage/src/_output/bin/"
cp -al _output/bin/cni/. "$stage/src/_output/bin/cni/"

goroot=$(go env GOROOT)
gocache=$(go env GOCACHE)
gomodcache=$(go env GOMODCACHE)
cat >"$stage/run.sh" <<EOF
#!/bin/bash
# Written by hack/vm.sh for one run: what the VM does with the tree on this disk.
set -euo pipefail
step() { printf 'srcsi-vm: [%(%T)T] %s\\n' -1 "\$*"; }
# Each mark: a step's name and the VM's clock (the host's time, through the emulated RTC).
mark() { printf '%s %s\\n' "\$1" "\$(date +%s)" >>/srv/times; }
mark booted
# Seconds from the kernel's start to here: the boot.
echo "boot \$(cut -d. -f1 /proc/uptime)" >>/srv/times
# The host's Go toolchain (read-only), module cache and build cache, at their paths there (go
# writes a stat cache into the module cache for the tree's own pseudo-version).
mkdir -p $goroot $gomodcache $gocache
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,ro goroot $goroot
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 gomodcache $gomodcache
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 gocache $gocache
export PATH=$goroot/bin:\$PATH HOME=/root GOCACHE=$gocache GOMODCACHE=$gomodcache GOTOOLCHAIN=local GOPROXY=off
step "\$(. /etc/os-release; echo "\$PRETTY_NAME"), kernel \$(uname -r), \$(systemctl --version | head -n 1)"
step "/sys/fs/cgroup is \$(stat -fc %T /sys/fs/cgroup); controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
cd /srv/src
k() { hack/cluster.sh exec -- kubectl "\$@"; }
step "make up"
mark up-start
TIMEOUT_SCALE=$VM_TIMEOUT_SCALE RELIST_INTERVAL=$VM_RELIST_INTERVAL make up
mark up
units() { systemctl list-units --all --plain --no-legend srcsi.slice 'srcsi-*.slice' 'srcsi-*.scope' | awk '{print \$1}'; }
step "systemd units of the cluster: \$(units | tr '\\n' ' ')"
log=\$(k -n team-a logs corp-ca-reader)
grep -q -- '-----BEGIN CERTIFICATE-----' <<<"\$log" || { step "FAIL: the example pod did not print its CA: \$log"; exit 1; }
step "the example pod reads its CA"
k delete clusterrolebinding use-corp-ca
mark revoking
revoked=\$SECONDS
# Within the relist (RELIST_INTERVAL), give or take a cycle of emulated pace. Empty: no key's file
# (ls shows no dot-names: the atomic writer's ..data link and payload dir stay).
limit=\$((3 * ${VM_RELIST_INTERVAL%s} + 60))
until [[ -z \$(k -n team-a exec corp-ca-reader -- ls /etc/corp-ca) ]]; do
	((SECONDS - revoked < limit)) || { step "FAIL: /etc/corp-ca still holds files \$limit s after the revocation"; exit 1; }
	sleep 2
done
step "revoked: /etc/corp-ca is empty \$((SECONDS - revoked)) s after the ClusterRoleBinding went (relist every $VM_RELIST_INTERVAL)"
mark revoked
k -n team-a get events --field-selector reason=SharedResourceAccessRevoked -o name | grep -q . ||
	{ step "FAIL: no SharedResourceAccessRevoked event"; exit 1; }
step "make down"
mark down-start
make down
mark down
hack/cluster.sh check-down
left=\$(units)
[[ -z \$left ]] || { step "FAIL: systemd units left: \$left"; exit 1; }
[[ ! -e /sys/fs/cgroup/srcsi.slice ]] || { step "FAIL: /sys/fs/cgroup/srcsi.slice left"; exit 1; }
step "PASS"
EOF

# The disk: what is staged, and room for the cluster (containerd's images and snapshots, etcd,
# logs).
size_mib=$(($(du -sm "$stage" | cut -f1) + 3072))
mkfs.ext4 -q -F -L srcsi-payload -d "$stage" "$OUT/payload.img" "${size_mib}M"
rm -rf --one-file-system "$stage"
log "payload disk: ${size_mib} MiB (this tree and the binaries of Kubernetes $minor's cluster)"

# ---------------------------------------------------------------------------------------------
# 3. Boot, and wait for it to power off.

console=$OUT/console.log
: >"$console"
# shellcheck disable=SC2054 # qemu's options are comma-separated
qemu=(qemu-system-x86_64
	-accel tcg,thread=multi -cpu max -smp 2 -m 4096
	-nodefaults -no-user-config -display none -no-reboot
	-serial "file:$console"
	-kernel "$cache/vmlinuz" -initrd "$cache/initrd.img"
	-append "root=/dev/vda rw console=ttyS0 quiet loglevel=3 systemd.show_status=0"
	-drive "file=$cache/root.img,format=raw,if=virtio,snapshot=on"
	-drive "file=$OUT/payload.img,format=raw,if=virtio"
	-virtfs "local,path=$goroot,mount_tag=goroot,security_model=none,readonly=on"
	-virtfs "local,path=$gomodcache,mount_tag=gomodcache,security_model=none"
	-virtfs "local,path=$gocache,mount_tag=gocache,security_model=none")
log "booting Debian 12 under qemu (software emulation; at most $VM_TIMEOUT min)"
booted=$SECONDS
echo "qemu $(date +%s)" >"$OUT/host-times"
timeout --signal=KILL "$((VM_TIMEOUT * 60))" "${qemu[@]}" &
vm=$!
tail -n +1 -F --pid="$vm" "$console" 2>/dev/null | sed -u 's/^/  | /' &
vm_status=0
wait "$vm" || vm_status=$?
sleep 1
log "the VM stopped after $((SECONDS - booted)) s (qemu exit status $vm_status)"

# ---------------------------------------------------------------------------------------------
# 4. What it did.

if debugfs -R "rdump /src/_output/cluster/logs $OUT" "$OUT/payload.img" >/dev/null 2>&1 && [[ -d $OUT/logs ]]; then
	mv "$OUT/logs" "$OUT/cluster-logs"
fi
debugfs -R "cat /times" "$OUT/payload.img" 2>/dev/null >"$OUT/times" || true
rm -f "$OUT/payload.img"
if ((vm_status == 137)); then die "the VM did not finish within $VM_TIMEOUT min (console: $console)"; fi
# The guest's console prefixes each line of run.sh's unit with the kernel's clock and the unit, and
# ends it with a carriage return.
tr -d '\r' <"$console" >"$console.txt"
if ! grep -q 'srcsi-vm: run.sh exited 0$' "$console.txt" || ! grep -q 'srcsi-vm: \[[0-9:]*\] PASS$' "$console.txt"; then
	die "the VM tier failed (console: $console; the cluster's logs: $OUT/cluster-logs)"
fi
# The figures: each step's seconds, from the marks (the VM's clock keeps the host's time).
cat "$OUT/host-times" "$OUT/times" >"$OUT/marks"
awk '{ t[$1] = $2 } END {
	printf "boot (kernel start to run.sh) %d s, make up %d s, revocation seen after %d s, make down %d s\n",
		t["boot"], t["up"] - t["up-start"], t["revoked"] - t["revoking"], t["down"] - t["down-start"] }' "$OUT/marks" |
	tee "$OUT/figures" >&2
log "passed in $(($(date +%s) - T0)) s"
