# Container image for the shared-resource-csi node plugin.
#
#   docker build -t shared-resource-csi:latest --build-arg VERSION=$(git describe --tags --always --dirty) --build-arg COMMIT=$(git rev-parse HEAD) .
#
# The result is a static binary on an empty (scratch) base: no shell, no
# package manager, nothing to patch. The driver makes its mounts with direct
# system calls and talks to the API server with the service account's CA, so it
# needs no mount(8) binary and no system CA bundle.

# Build on the builder's own platform and cross-compile for the target one
# (docker buildx build --platform linux/arm64 ...); TARGETOS/TARGETARCH are set
# by BuildKit, and empty values fall back to the builder's platform.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=
WORKDIR /src

# Dependencies first, so source edits do not invalidate the module download layer.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
# -buildvcs=false: the version comes from VERSION, and VCS stamping fails when
# the build context holds no usable .git (e.g. a git worktree).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /shared-resource-csi .

FROM scratch
COPY --from=build /shared-resource-csi /shared-resource-csi
ENTRYPOINT ["/shared-resource-csi"]
