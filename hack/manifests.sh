#!/usr/bin/env bash
# Renders the plain manifests from the Helm chart, so that nothing is written twice by hand:
#   deploy.yaml                    charts/shared-resource-csi with its default values, after the
#                                  header in hack/deploy-header.yaml
#   deploy/cluster-wide-read.yaml  the chart's opt-in cluster-wide read binding alone
#
#   hack/manifests.sh          stamp the chart with VERSION and REGISTRY (when set), then write them
#                              (`make manifests VERSION=... REGISTRY=...`)
#   hack/manifests.sh --check  fail, with the diff, when the committed files differ (`make test`)
#   hack/manifests.sh --chart-version V   print the chart version (semver) for the tree version V
#   CHART=DIR hack/manifests.sh --render-to OUT   stamp the chart at DIR (a copy: `make release`)
#                              and write OUT/deploy.yaml and OUT/cluster-wide-read.yaml from it
# IMAGE_TAG, when set, is the image tag instead of VERSION (`make release`: VERSION@sha256:...,
# the index digest, so a release's manifests pin the image they were released with).
#
# Stamping (the one place the version and the registry reach the chart): Chart.yaml's appVersion
# and values.yaml's image.tag are VERSION as git describe wrote it (a valid image tag); the
# image is $REGISTRY/shared-resource-csi, and Artifact Hub's annotations name it too (and say
# whether VERSION is a pre-release); Chart.yaml's version must be SemVer 2, so it is
# VERSION without its "v" when VERSION is a release tag (vX.Y.Z or vX.Y.Z-pre, without
# describe's -N-gHASH or -dirty), 0.0.0-dev when VERSION is "dev" (what the tree commits: an
# unstamped binary's --version), and otherwise 0.0.0-dev.<VERSION with every character other
# than [0-9A-Za-z-] made "-"> (2cf9b0c -> 0.0.0-dev.2cf9b0c, v0.1.0-3-gabc-dirty ->
# 0.0.0-dev.v0-1-0-3-gabc-dirty): a build between tags is never mistaken for, or sorted above,
# a release. The committed chart is never stamped with a release: `make release` stamps a copy.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
HELM=${HELM:-$ROOT/_output/bin/helm}
CHART=${CHART:-charts/shared-resource-csi}

chart_version() {
	local v=$1
	# git describe's "-N-gHASH" (commits past a tag) and "-dirty" mark a build that is not the tag.
	if [[ $v =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] &&
		! [[ $v =~ -[0-9]+-g[0-9a-f]+(-dirty)?$ || $v =~ -dirty$ ]]; then
		printf '%s\n' "${v#v}"
	elif [[ $v == dev ]]; then
		printf '0.0.0-dev\n'
	else
		local s
		s=$(printf '%s' "$v" | tr -c '0-9A-Za-z-' '-')
		# An all-digit identifier with a leading zero is not SemVer; a letter makes it alphanumeric.
		[[ $s =~ ^[0-9]+$ ]] && s=g$s
		printf '0.0.0-dev.%s\n' "$s"
	fi
}

# stamp_chart DIR: writes VERSION and REGISTRY into the chart at DIR (in place).
stamp_chart() {
	local dir=$1
	if [[ -n ${VERSION:-} ]]; then
		[[ $VERSION =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || { echo "VERSION $VERSION is not a valid image tag" >&2; exit 2; }
		local cv
		cv=$(chart_version "$VERSION")
		# Artifact Hub: a version vX.Y.Z is a release, anything else a pre-release.
		local pre=true
		[[ $cv =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && pre=false
		sed -i -E "s|^version: .*|version: $cv|; s|^appVersion: .*|appVersion: \"$VERSION\"|; s|^(  artifacthub.io/prerelease: ).*|\1\"$pre\"|" "$dir/Chart.yaml"
		sed -i -E "0,/^  tag: /s|^  tag: .*|  tag: \"${IMAGE_TAG:-$VERSION}\"|" "$dir/values.yaml"
	fi
	if [[ -n ${REGISTRY:-} ]]; then
		[[ $REGISTRY =~ ^[a-z0-9][a-z0-9._:/-]*[a-z0-9]$ ]] || { echo "REGISTRY $REGISTRY is not a registry path" >&2; exit 2; }
		sed -i -E "0,/^  repository: /s|^  repository: .*|  repository: $REGISTRY/shared-resource-csi|" "$dir/values.yaml"
	fi
	# Artifact Hub's image list names the image values.yaml names: by digest when pinned.
	local repo tag ref
	repo=$(sed -n -E '0,/^  repository: /s|^  repository: (.*)|\1|p' "$dir/values.yaml")
	tag=$(sed -n -E '0,/^  tag: /s|^  tag: "?([^"]*)"?$|\1|p' "$dir/values.yaml")
	ref=$repo:$tag
	[[ $tag != *@* ]] || ref=$repo@${tag#*@}
	sed -i -E "s|^(      image: ).*|\1$ref|" "$dir/Chart.yaml"
}

need_helm() { [[ -x $HELM ]] || { echo "no helm at $HELM: run \`make tools\`" >&2; exit 1; }; }

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
	need_helm
	stamp_chart "$CHART"
	render_deploy >deploy.yaml
	render_cluster_wide >deploy/cluster-wide-read.yaml
	echo "wrote deploy.yaml and deploy/cluster-wide-read.yaml from $CHART${VERSION:+ (version $VERSION)}${REGISTRY:+ (registry $REGISTRY)}"
	;;
--check)
	need_helm
	status=0
	diff -u deploy.yaml <(render_deploy) || status=1
	diff -u deploy/cluster-wide-read.yaml <(render_cluster_wide) || status=1
	if ((status)); then
		echo "deploy.yaml or deploy/cluster-wide-read.yaml differ from $CHART: edit the chart and run \`make manifests\`" >&2
	fi
	exit "$status"
	;;
--render-to)
	need_helm
	out=${2:?usage: CHART=DIR hack/manifests.sh --render-to OUT}
	[[ $CHART != charts/shared-resource-csi ]] || { echo "--render-to stamps the chart: give a copy in CHART" >&2; exit 2; }
	stamp_chart "$CHART"
	mkdir -p "$out"
	render_deploy >"$out/deploy.yaml"
	render_cluster_wide >"$out/cluster-wide-read.yaml"
	;;
--chart-version)
	chart_version "${2:?usage: hack/manifests.sh --chart-version VERSION}"
	;;
*)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
