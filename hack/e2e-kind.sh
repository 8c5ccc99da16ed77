#!/usr/bin/env bash
# `make e2e-kind`: the real-pod suite (test/e2e/pods/pods_test.go, TestPods...) against a kind cluster, for
# hosts with Docker and kind (https://kind.sigs.k8s.io). It needs a Docker that runs privileged
# containers and can pull kind's node image; without them, `make test` runs the same suite against
# the local cluster of hack/cluster.sh.
#
#   1. kind create cluster (reused if it exists)
#   2. kind load image-archive of `make image`'s tar, and busybox for the test pods
#   3. the test binary, deploy.yaml and hack/deploy-overlay.sh copied into the node container;
#      the suite runs there, as root on the node, as it does on the local cluster: it applies
#      deploy.yaml through the overlay (image and --relist-interval only), waits for the
#      DaemonSet, runs the pods, and looks at the node's mounts and dirs itself.
#
# Environment: KUBE_VERSION (the minor, default the newest: its node image pinned by digest in
# hack/lib/versions.sh), KIND_CLUSTER (default srcsi-e2e), KEEP_CLUSTER=1 (do not delete it afterwards),
# IMAGE_TAR (default _output/shared-resource-csi-image.tar), BUSYBOX (default busybox:1.36),
# TEST_ARGS (extra `go test` flags, e.g. -test.run=TestPodsReadCABundle).
# API requests (scenario 8) are counted from the driver's /metrics: kind has no audit log here.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# shellcheck source=hack/lib/versions.sh
source hack/lib/versions.sh
NODE_IMAGE=$(kind_node_image "$(kube_minor)")
CLUSTER=${KIND_CLUSTER:-srcsi-e2e}
IMAGE_TAR=${IMAGE_TAR:-_output/shared-resource-csi-image.tar}
BUSYBOX=${BUSYBOX:-busybox:1.36}
NODE=$CLUSTER-control-plane # kind's name for the single node's container
WORK=/srcsi-e2e             # in the node container

for c in docker kind go tar; do
	command -v "$c" >/dev/null || { echo "e2e-kind needs $c on PATH" >&2; exit 1; }
done
[[ -f $IMAGE_TAR ]] || { echo "no driver image at $IMAGE_TAR: run \`make image\`" >&2; exit 1; }
# The tag inside the docker-archive: [{"RepoTags":["docker.io/library/shared-resource-csi:v"],...}]
IMAGE=$(tar -xOf "$IMAGE_TAR" manifest.json | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p')
[[ -n $IMAGE ]] || { echo "cannot read the image's tag from $IMAGE_TAR" >&2; exit 1; }

if ! kind get clusters | grep -qx "$CLUSTER"; then
	kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --wait 120s
fi
if [[ ${KEEP_CLUSTER:-} != 1 ]]; then
	trap 'kind delete cluster --name "$CLUSTER"' EXIT
fi

kind load image-archive "$IMAGE_TAR" --name "$CLUSTER"
docker image inspect "$BUSYBOX" >/dev/null 2>&1 || docker pull "$BUSYBOX"
kind load docker-image "$BUSYBOX" --name "$CLUSTER"

# A static test binary of the pod suite (test/e2e/pods, in test/'s module): the node image has no Go
# toolchain.
CGO_ENABLED=0 go -C test test -c -o "$ROOT/_output/pods.test" ./e2e/pods
CGO_ENABLED=0 go build -o _output/kind-driver-binary . # test/e2e/framework/harness.go wants $DRIVER_BINARY to exist
docker exec "$NODE" mkdir -p "$WORK/hack"
docker cp _output/pods.test "$NODE:$WORK/pods.test"
docker cp _output/kind-driver-binary "$NODE:$WORK/shared-resource-csi"
docker cp deploy.yaml "$NODE:$WORK/deploy.yaml"
docker cp hack/deploy-overlay.sh "$NODE:$WORK/hack/deploy-overlay.sh"

NODE_IP=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$NODE")
# The node's own kubectl and admin kubeconfig (kubeadm's); the image is already on the node.
# shellcheck disable=SC2086 # TEST_ARGS is a list of flags
docker exec -w "$WORK" \
	-e KUBECONFIG=/etc/kubernetes/admin.conf \
	-e KUBECTL=/usr/bin/kubectl \
	-e SRCSI_KUBECTL=/usr/bin/kubectl \
	-e SRCSI_MODE=full \
	-e SRCSI_NODE_NAME="$NODE" \
	-e SRCSI_NODE_IP="$NODE_IP" \
	-e SRCSI_KUBELET_DIR=/var/lib/kubelet \
	-e SRCSI_BUSYBOX_IMAGE="docker.io/library/$BUSYBOX" \
	-e SRCSI_DRIVER_IMAGE="$IMAGE" \
	-e DRIVER_BINARY="$WORK/shared-resource-csi" \
	-e SRCSI_REPO_ROOT="$WORK" \
	"$NODE" ./pods.test -test.run '^TestPods' -test.v -test.timeout 30m ${TEST_ARGS:-}
