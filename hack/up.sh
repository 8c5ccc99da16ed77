#!/usr/bin/env bash
# `make up`: a local cluster (one node; `make up NODES=3` for three) with the driver installed from
# deploy.yaml and an example share, left running for you to look around. `make down` removes all of it.
#
#   1. hack/cluster.sh up --no-registry        (kube-apiserver, etcd, kubelet, containerd... in a netns;
#                                                no registry: the image is imported, as step 2 says)
#   2. the driver's image (`make image`: _output/shared-resource-csi-image.tar) imported into every
#      node's containerd (the tests release to the cluster's registry instead)
#   3. deploy.yaml applied through the test overlay (hack/deploy-overlay.sh: only the image
#      reference changes), then wait for the DaemonSet's pods to be Ready and registered
#   4. examples/ca-bundle.yaml applied (its pod's image swapped for the locally imported busybox)
#
# Needs root. `make up` builds what it runs first (tools-cluster, binary, image); to run this script alone:
#   make image && hack/up.sh
# Environment: IMAGE_TAR (default _output/shared-resource-csi-image.tar), IMAGE (default: the tag
# inside IMAGE_TAR), RELIST_INTERVAL (default: deploy.yaml's), NODES (default 1), TIMEOUT_SCALE
# (default 1: every wait here and in hack/cluster.sh that many times as long, for a slow host).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[[ $(id -u) == 0 ]] || { echo "make up needs root (it runs a kubelet and containerd)" >&2; exit 1; }

log() { printf '[up] %s\n' "$*" >&2; }
TIMEOUT_SCALE=${TIMEOUT_SCALE:-1}
[[ $TIMEOUT_SCALE =~ ^[1-9][0-9]*$ ]] || { echo "TIMEOUT_SCALE=$TIMEOUT_SCALE: want a whole number, 1 or more" >&2; exit 2; }
# secs N: N seconds as a wait here takes them (TIMEOUT_SCALE).
secs() { echo $(($1 * TIMEOUT_SCALE)); }
die() { log "ERROR: $*"; exit 1; }
k() { hack/cluster.sh exec -- kubectl "$@"; }

IMAGE_TAR=${IMAGE_TAR:-_output/shared-resource-csi-image.tar}
[[ -f $IMAGE_TAR ]] || die "no driver image at $IMAGE_TAR: run \`make image\` (or \`make up\`, which does)"
if [[ -z ${IMAGE:-} ]]; then
	# A docker-archive names its image in manifest.json: [{"RepoTags":["docker.io/library/x:v"],...}]
	IMAGE=$(tar -xOf "$IMAGE_TAR" manifest.json | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p')
	[[ -n $IMAGE ]] || die "cannot read the image's tag from $IMAGE_TAR"
fi

start=$(date +%s)
hack/cluster.sh up --no-registry
# shellcheck source=/dev/null # written by cluster.sh up
source _output/cluster/env # SRCSI_NODES, SRCSI_BUSYBOX_IMAGE

log "importing $IMAGE"
hack/cluster.sh import-image "$IMAGE_TAR" >/dev/null

log "applying deploy.yaml with image $IMAGE${RELIST_INTERVAL:+ and --relist-interval=$RELIST_INTERVAL}"
hack/deploy-overlay.sh "$IMAGE" ${RELIST_INTERVAL:+"$RELIST_INTERVAL"} | k apply -f -

log "waiting for the driver's DaemonSet"
k -n csi-sharedresource rollout status daemonset/shared-resource-csi-driver --timeout="$(secs 120)s"
log "waiting for the status controller's Deployment"
k -n csi-sharedresource rollout status deployment/shared-resource-csi-status --timeout="$(secs 120)s"
# Ready means /healthz answered; the kubelet must also have taken the registration.
deadline=$(($(date +%s) + $(secs 60)))
for node in $SRCSI_NODES; do
	until [[ " $(k get csinode "$node" -o 'jsonpath={.spec.drivers[*].name}' 2>/dev/null) " == *" csi.sharedresource.openshift.io "* ]]; do
		(($(date +%s) < deadline)) || die "the kubelet of $node did not register the driver (kubelet logs: _output/cluster/logs/kubelet*.log)"
		sleep 0.5
	done
done

# The example's pod image (busybox:latest) would have to be pulled; this cluster has no way out,
# so it runs the busybox imported locally instead. Nothing else of the example changes.
log "applying examples/ca-bundle.yaml"
sed -E "s#^( *)image: busybox:.*#\\1image: $SRCSI_BUSYBOX_IMAGE\\n\\1imagePullPolicy: Never#" examples/ca-bundle.yaml | k apply -f -
k -n team-a wait --for=condition=Ready pod/corp-ca-reader --timeout="$(secs 120)s" >/dev/null ||
	die "the example pod did not start: hack/cluster.sh exec -- kubectl -n team-a describe pod corp-ca-reader"
log "up in $(($(date +%s) - start)) s; the example pod reads the shared CA bundle:"
k -n team-a logs corp-ca-reader

cat <<EOF

The cluster runs inside the network namespace $SRCSI_NETNS; reach it with hack/cluster.sh exec:

  hack/cluster.sh exec -- kubectl get nodes,pods -A -o wide
  hack/cluster.sh exec -- kubectl get sharedsecrets
  hack/cluster.sh exec -- kubectl -n team-a exec corp-ca-reader -- ls -la /etc/corp-ca
  hack/cluster.sh exec -- kubectl -n csi-sharedresource logs ds/shared-resource-csi-driver
  hack/cluster.sh exec -- busybox wget -qO- http://$SRCSI_NODE_IP:9809/metrics   # the driver's metrics
  hack/cluster.sh exec -- bash                                                  # a shell with KUBECONFIG set
  hack/cluster.sh node-exec $(echo "$SRCSI_NODES" | awk '{print $NF}') -- ls /var/lib/kubelet/plugins    # a node's own view (its mount namespace)

Try revoking access: delete the ClusterRoleBinding use-corp-ca and, within --relist-interval (60s in
deploy.yaml; \`RELIST_INTERVAL=5s make up\` for a shorter one), /etc/corp-ca in the pod is empty and
the pod has a SharedResourceAccessRevoked event.

Logs of the cluster's components: _output/cluster/logs. Tear it all down: make down
EOF
