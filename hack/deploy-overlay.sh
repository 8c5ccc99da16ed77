#!/usr/bin/env bash
# The test overlay: deploy.yaml exactly as users apply it, with only these overridden:
#   - the image reference of the DaemonSet and of the status Deployment (the same image: an
#     image imported into the nodes' containerd, since the local cluster has no registry;
#     imagePullPolicy stays IfNotPresent, which finds it there);
#   - optionally their --relist-interval (tests use a short one, so revocation, refresh and
#     status are seen in seconds rather than the production minute).
# Everything else (CRDs, RBAC, CSIDriver, the workloads' flags, probes, mounts) is deploy.yaml's.
#
#   hack/deploy-overlay.sh IMAGE [RELIST_INTERVAL] | kubectl apply -f -
#
# e.g. hack/deploy-overlay.sh docker.io/library/shared-resource-csi:dev 3s
# The result goes to stdout. It fails (and prints nothing) if deploy.yaml no longer has exactly
# two lines to override for each value (the DaemonSet's, the Deployment's), so a changed manifest
# cannot silently escape the overlay.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

(($# >= 1 && $# <= 2)) || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
image=$1
relist=${2:-}
[[ $image =~ ^[a-zA-Z0-9][a-zA-Z0-9._/:@-]*$ ]] || { echo "deploy-overlay: bad image reference: $image" >&2; exit 2; }
[[ -z $relist || $relist =~ ^[0-9]+(ms|s|m|h)$ ]] || { echo "deploy-overlay: bad relist interval: $relist" >&2; exit 2; }

out=$(awk -v image="$image" -v relist="$relist" '
	# The image of the node plugin and of the status controller (the only images in deploy.yaml).
	/^[ \t]+image: / {
		images++
		sub(/image: .*/, "image: " image)
	}
	/^[ \t]+- --relist-interval=/ {
		relists++
		if (relist != "") sub(/--relist-interval=.*/, "--relist-interval=" relist)
	}
	{ print }
	END {
		if (images != 2) { printf "deploy-overlay: deploy.yaml has %d image lines, want 2\n", images > "/dev/stderr"; exit 1 }
		if (relists != 2) { printf "deploy-overlay: deploy.yaml has %d --relist-interval lines, want 2\n", relists > "/dev/stderr"; exit 1 }
	}' "$ROOT/deploy.yaml")
printf '%s\n' "$out"
