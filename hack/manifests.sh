#!/usr/bin/env bash
# Renders the plain manifests from the Helm chart, so that nothing is written twice by hand:
#   deploy.yaml                    charts/shared-resource-csi with its default values, after the
#                                  header in hack/deploy-header.yaml
#   deploy/cluster-wide-read.yaml  the chart's opt-in cluster-wide read binding alone
#
#   hack/manifests.sh          write them (`make manifests`)
#   hack/manifests.sh --check  fail, with the diff, when the committed files differ (`make test`)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
HELM=${HELM:-$ROOT/_output/bin/helm}
CHART=charts/shared-resource-csi
[[ -x $HELM ]] || { echo "no helm at $HELM: run \`make tools\`" >&2; exit 1; }

render_deploy() {
	cat hack/deploy-header.yaml
	"$HELM" template shared-resource-csi "$CHART"
}
render_cluster_wide() {
	"$HELM" template shared-resource-csi "$CHART" --set sourceAccess.clusterWide=true \
		--show-only templates/cluster-wide-read.yaml
}

case ${1:-} in
"")
	render_deploy >deploy.yaml
	render_cluster_wide >deploy/cluster-wide-read.yaml
	echo "wrote deploy.yaml and deploy/cluster-wide-read.yaml from $CHART"
	;;
--check)
	status=0
	diff -u deploy.yaml <(render_deploy) || status=1
	diff -u deploy/cluster-wide-read.yaml <(render_cluster_wide) || status=1
	if ((status)); then
		echo "deploy.yaml or deploy/cluster-wide-read.yaml differ from $CHART: edit the chart and run \`make manifests\`" >&2
	fi
	exit "$status"
	;;
*)
	sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
