#!/usr/bin/env bash
# `make release VERSION=vX.Y.Z [REGISTRY=host/path]`: everything a release ships, without Docker.
#
# The release's assets, the files its GitHub release attaches, each at OUT's top level under the
# name it has there (a GitHub release's assets have names, no directories):
#   OUT/deploy.yaml                  the chart rendered, its image pinned: REGISTRY/shared-resource-csi:VERSION@sha256:...
#   OUT/cluster-wide-read.yaml       the opt-in cluster-wide read binding
#   OUT/shared-resource-csi-X.Y.Z.tgz  the chart (helm package), stamped and pinned the same way,
#                                    with Artifact Hub's list of changes from the release notes
#   OUT/shared-resource-csi-linux-ARCH.spdx.json  an SPDX SBOM per image (the Go modules of its binary)
#   OUT/kubectl-shared_resource-linux-ARCH.tar.gz  the kubectl plugin per platform: the binary as
#                                    kubectl-shared_resource, and LICENSE
#   OUT/shared-resource.yaml         krew's manifest of the plugin (krew wants it named for the
#                                    plugin): the archives of the platforms krew runs on (not
#                                    s390x) where the GitHub release of VERSION attaches them, with
#                                    their sha256
#   with COSIGN_KEY (a cosign key pair's private key; COSIGN_PASSWORD its password):
#   OUT/cosign.pub                   the public key
#   OUT/index.sig                    signature of the image index (its manifest blob, whose digest
#                                    is the index digest)
#   OUT/shared-resource-csi-X.Y.Z.tgz.sig  signature of the packaged chart
# Their checksums:
#   OUT/SHA256SUMS                   the sha256 of each asset above, by its name, and of nothing
#                                    else: `sha256sum --check SHA256SUMS` passes in a directory of
#                                    the downloaded assets
#   OUT/SHA256SUMS.sig               with COSIGN_KEY: signature of SHA256SUMS
# And what makes the release, not attached to it:
#   OUT/oci/                         OCI image layout: one index: PLATFORMS (all four by default)
#                                    (tools/ociimage; the same commit gives the same index digest)
#   OUT/index-digest                 that index's digest
#   OUT/image-subjects               the sha256 of each blob of OUT/oci by its path there
#                                    (oci/blobs/sha256/HEX): the index, each platform's manifest,
#                                    config and layers, whose build provenance the release
#                                    workflow attests
#   OUT/RELEASE_NOTES.md             CHANGELOG.md's section for VERSION ([Unreleased] for a
#                                    pre-release without one): the GitHub release's text
#   OUT/chart-digest                 with PUSH=1: the pushed chart's digest
#
# PUSH=1 (make sets it when REGISTRY is given on its command line): also push the index to
# REGISTRY/shared-resource-csi:VERSION and the chart to oci://REGISTRY/charts (credentials from
# `docker login`/`helm registry login`; REGISTRY_INSECURE=1 for a plain-HTTP registry,
# REGISTRY_CA_FILE for a private CA). Without it nothing leaves the machine; REGISTRY still names
# the image in deploy.yaml and the chart (the Makefile's default).
#
# Environment: VERSION, REGISTRY, OUT (default _output/release), PUSH, SOURCE_DATE_EPOCH (default:
# the commit's time), SOURCE_URL (annotation org.opencontainers.image.source, and the project the
# krew manifest points at; default https://github.com/shared-resource/csi-driver), HELM, OCIIMAGE,
# COSIGN_KEY, COSIGN (default _output/bin/cosign), REGISTRY_INSECURE, REGISTRY_CA_FILE,
# PLATFORMS (default "linux/amd64 linux/arm64 linux/ppc64le linux/s390x": what a release ships;
# the pod suite's test releases into the local cluster build only the node's platform, to keep
# its setup short), CHANGELOG (default CHANGELOG.md: where the release notes come from; the pod
# suite's test versions have their own).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
die() { echo "release: $*" >&2; exit 1; }

: "${VERSION:?VERSION=vX.Y.Z}" "${REGISTRY:?REGISTRY=host/path}"
[[ $VERSION =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION=$VERSION: a release is vX.Y.Z (or vX.Y.Z-pre)"
OUT=${OUT:-_output/release}
HELM=${HELM:-$ROOT/_output/bin/helm}
OCIIMAGE=${OCIIMAGE:-$ROOT/_output/bin/ociimage}
PUSH=${PUSH:-0}
BINARY=shared-resource-csi
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 linux/ppc64le linux/s390x}
CHANGELOG=${CHANGELOG:-CHANGELOG.md}
ARCHES=()
for p in $PLATFORMS; do
	[[ $p =~ ^linux/[a-z0-9]+$ ]] || die "PLATFORMS: $p is not linux/ARCH (the image is a Linux image)"
	ARCHES+=("${p#linux/}")
done
((${#ARCHES[@]})) || die "PLATFORMS is empty"
[[ -x $HELM && -x $OCIIMAGE ]] || die "no $HELM or $OCIIMAGE: run it through \`make release\`"

# Release notes first: a version without a CHANGELOG entry is not released. A pre-release
# (vX.Y.Z-pre) without a section of its own is what main holds: the notes of [Unreleased] (the
# README's install from source builds one).
section() {
	awk -v v="$1" '
		$0 ~ "^## \\[" v "\\]" { on = 1; next }
		on && /^## \[/ { exit }
		on { print }
	' "$CHANGELOG"
}
notes=$(section "${VERSION#v}")
if [[ -z ${notes//[[:space:]]/} && $VERSION == *-* ]]; then
	notes=$(section Unreleased)
fi
[[ -n ${notes//[[:space:]]/} ]] || die "$CHANGELOG has no section \"## [${VERSION#v}]\" (nor, for a pre-release, [Unreleased])"

commit=$(git rev-parse HEAD)
if [[ $(git describe --tags --exact-match 2>/dev/null) != "$VERSION" || -n $(git status --porcelain) ]]; then
	echo "release: warning: the tree is not the clean tag $VERSION ($(git describe --tags --always --dirty))" >&2
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}

rm -rf "$OUT"
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The binaries: static (CGO_ENABLED=0: the image has no libc), stamped as `make build` stamps;
# -trimpath and the commit's VCS stamp keep them the same on every machine for the same commit.
# Stripped (-s -w), and compiled without the DWARF the link would drop, as `make build` is.
binflags=()
for arch in "${ARCHES[@]}"; do
	echo "release: building linux/$arch..."
	GOGC=${BUILD_GOGC:-400} CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -gcflags=all=-dwarf=false \
		-ldflags "-s -w -X main.version=$VERSION -X main.commit=$commit" \
		-o "$work/bin/linux-$arch/$BINARY" .
	binflags+=(-binary "linux/$arch=$work/bin/linux-$arch/$BINARY")
done

# The kubectl plugin: per platform an archive of the same binary named kubectl-shared_resource
# (the name that makes it the plugin) and the licence, reproducible (names sorted, owner root,
# times the commit's); and krew's manifest, pointing at the archives of the platforms krew
# supports as the GitHub release attaches them, each with its sha256.
plugin=kubectl-shared_resource
project_url=${SOURCE_URL:-https://github.com/shared-resource/csi-driver}
{
	cat <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: shared-resource
spec:
  version: $VERSION
  homepage: $project_url
  shortDescription: Diagnose pods' shared Secret and ConfigMap volumes
  description: |
    The kubectl plugin of shared-resource-csi, the CSI driver that shares Secrets and ConfigMaps
    across namespaces (SharedSecret, SharedConfigMap). With your own kubeconfig, and only reading:
    diagnose tells why a pod's shared volumes work or not, with the command that fixes it;
    who-uses lists the pods that mount a share, or a Secret or ConfigMap through its shares.
  platforms:
EOF
	for arch in "${ARCHES[@]}"; do
		dir=$work/plugin/linux-$arch
		mkdir -p "$dir"
		cp "$work/bin/linux-$arch/$BINARY" "$dir/$plugin"
		cp LICENSE "$dir/LICENSE"
		archive=$plugin-linux-$arch.tar.gz
		tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$dir" -cf - "$plugin" LICENSE |
			gzip -9n >"$OUT/$archive"
		# krew runs on these Linux platforms only (its validate-krew-manifest refuses others,
		# s390x among them); the other archives are for installing by hand.
		[[ " amd64 arm64 ppc64le arm 386 " == *" $arch "* ]] || continue
		cat <<EOF
  - selector:
      matchLabels:
        os: linux
        arch: $arch
    uri: $project_url/releases/download/$VERSION/$archive
    sha256: $(sha256sum "$OUT/$archive" | cut -d' ' -f1)
    bin: $plugin
    files:
    - from: $plugin
      to: .
    - from: LICENSE
      to: .
EOF
	done
} >"$OUT/shared-resource.yaml"

image=$REGISTRY/$BINARY
push=()
if [[ $PUSH == 1 ]]; then
	push=(-push "$image:$VERSION")
	[[ ${REGISTRY_INSECURE:-0} == 1 ]] && push+=(-insecure)
	[[ -n ${REGISTRY_CA_FILE:-} ]] && push+=(-ca-file "$REGISTRY_CA_FILE")
fi
"$OCIIMAGE" -out "$OUT/oci" -sbom-dir "$OUT" -digest-file "$OUT/index-digest" -name "$BINARY" \
	-version "$VERSION" -revision "$commit" ${SOURCE_URL:+-source "$SOURCE_URL"} "${binflags[@]}" "${push[@]}"
digest=$(<"$OUT/index-digest")
# The image's parts, each by the path a checksums file names it by (each blob's name is its sum).
(cd "$OUT" && find oci/blobs/sha256 -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum --) >"$OUT/image-subjects"

# The chart and the manifests, stamped in a copy (the tree is left as it is) and pinned by digest.
cp -r charts/shared-resource-csi "$work/chart"
image_tag="$VERSION@$digest"
VERSION=$VERSION REGISTRY=$REGISTRY IMAGE_TAG=$image_tag CHART=$work/chart \
	hack/manifests.sh --render-to "$OUT"
# Artifact Hub's list of changes: a line per entry of the release notes (its first sentence,
# without Markdown), kinds from the sections' names; the notes for contributors and what is not
# yet supported are not changes of the chart.
changes=$(printf '%s\n' "$notes" | awk '
	function flush() {
		if (kind != "" && text != "") {
			while (match(text, /\[[^]]*\]\([^)]*\)/)) {
				link = substr(text, RSTART, RLENGTH)
				text = substr(text, 1, RSTART - 1) substr(link, 2, index(link, "]") - 2) substr(text, RSTART + RLENGTH)
			}
			gsub(/\*\*|`/, "", text)
			if ((i = index(text, ". ")) > 0) text = substr(text, 1, i)
			if (length(text) > 300) text = substr(text, 1, 297) "..."
			gsub(/'"'"'/, "'"''"'", text)
			printf "    - kind: %s\n      description: '"'"'%s'"'"'\n", kind, text
		}
		text = ""
	}
	/^### / {
		flush()
		h = tolower(substr($0, 5))
		kind = ""
		if (h ~ /^upgrading/ || h == "changed") kind = "changed"
		else if (h == "added" || h == "fixed" || h == "security" || h == "removed" || h == "deprecated") kind = h
		next
	}
	/^- / { flush(); text = substr($0, 3); next }
	/^  +[^ ]/ && text != "" { sub(/^ +/, ""); text = text " " $0; next }
	{ flush() }
	END { flush() }')
if [[ -n $changes ]]; then
	# Chart.yaml ends with its annotations (the map these join).
	[[ $(grep -E '^[a-z]' "$work/chart/Chart.yaml" | tail -n 1) == annotations:* ]] ||
		die "charts/shared-resource-csi/Chart.yaml does not end with its annotations"
	{
		printf '  artifacthub.io/changes: |\n%s\n' "$changes"
		if grep -q '^    - kind: security$' <<<"$changes"; then
			printf '  artifacthub.io/containsSecurityUpdates: "true"\n'
		fi
	} >>"$work/chart/Chart.yaml"
fi
"$HELM" lint --strict "$work/chart" >/dev/null
"$HELM" package "$work/chart" --destination "$OUT" >/dev/null
if [[ $PUSH == 1 ]]; then
	helm_push=()
	[[ ${REGISTRY_INSECURE:-0} == 1 ]] && helm_push+=(--plain-http)
	[[ -n ${REGISTRY_CA_FILE:-} ]] && helm_push+=(--ca-file "$REGISTRY_CA_FILE")
	# helm push prints "Digest: sha256:..."; the workflow signs the chart by that digest.
	"$HELM" push "$OUT"/"$BINARY"-*.tgz "oci://$REGISTRY/charts" "${helm_push[@]}" 2>&1 | tee "$work/helm-push"
	sed -n 's/^Digest: \(sha256:[0-9a-f]*\)$/\1/p' "$work/helm-push" >"$OUT/chart-digest"
	[[ -s $OUT/chart-digest ]] || die "helm push printed no digest"
fi

{
	printf '# %s %s\n\n' "$BINARY" "$VERSION"
	printf '%s\n\n' "$notes"
	platforms=$(IFS=,; echo "${ARCHES[*]}")
	printf "Image: \`%s:%s@%s\` (linux/%s)\n" "$image" "$VERSION" "$digest" "${platforms//,/, linux/}"
} >"$OUT/RELEASE_NOTES.md"

# Key-pair signing, offline: there may be no registry to hold a signature and no transparency
# log to reach, so the signatures are files beside what they sign (cosign verify-blob --key
# cosign.pub --insecure-ignore-tlog): cosign v3's signing config (a transparency log) and bundle
# format are off, and each signature is the bare .sig of a key pair. The release workflow signs
# keylessly in the registry instead.
if [[ -n ${COSIGN_KEY:-} ]]; then
	COSIGN=${COSIGN:-$ROOT/_output/bin/cosign}
	[[ -x $COSIGN ]] || die "no $COSIGN: run \`make cosign\`"
	"$COSIGN" public-key --key "$COSIGN_KEY" >"$OUT/cosign.pub"
	"$COSIGN" sign-blob --yes --key "$COSIGN_KEY" --tlog-upload=false --use-signing-config=false --new-bundle-format=false \
		--output-signature "$OUT/index.sig" "$OUT/oci/blobs/sha256/${digest#sha256:}" >/dev/null
	# The chart too: what `helm install` runs is what names the image, so it is signed itself,
	# not only through SHA256SUMS.
	for chart in "$OUT"/"$BINARY"-*.tgz; do
		"$COSIGN" sign-blob --yes --key "$COSIGN_KEY" --tlog-upload=false --use-signing-config=false --new-bundle-format=false \
			--output-signature "$chart.sig" "$chart" >/dev/null
	done
fi

# The assets by name, each a file at OUT's top level, so each line of SHA256SUMS names the asset
# as a user downloads it. A name that is missing fails sha256sum, and the release.
sums=$(
	cd "$OUT" || exit
	assets=(deploy.yaml cluster-wide-read.yaml "$BINARY"-*.tgz shared-resource.yaml)
	for arch in "${ARCHES[@]}"; do
		assets+=("$BINARY-linux-$arch.spdx.json" "$plugin-linux-$arch.tar.gz")
	done
	[[ -n ${COSIGN_KEY:-} ]] && assets+=(cosign.pub index.sig "$BINARY"-*.tgz.sig)
	printf '%s\n' "${assets[@]}" | LC_ALL=C sort | xargs sha256sum --
)
printf '%s\n' "$sums" >"$OUT/SHA256SUMS"
if [[ -n ${COSIGN_KEY:-} ]]; then
	"$COSIGN" sign-blob --yes --key "$COSIGN_KEY" --tlog-upload=false --use-signing-config=false --new-bundle-format=false \
		--output-signature "$OUT/SHA256SUMS.sig" "$OUT/SHA256SUMS" >/dev/null
fi
echo "release: $VERSION in $OUT, image $image:$VERSION@$digest${push:+ (pushed)}"
