# shared-resource-csi: see README.md.
BINARY  := shared-resource-csi
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
OUT     := _output
BIN     := $(OUT)/bin
# REGISTRY: where releases are pushed and what the committed chart and deploy.yaml name (the one
# place the registry path is set; `make manifests REGISTRY=...` re-points both). The owner is the
# repository's owner on GitHub (ghcr.io/<owner>).
REGISTRY ?= ghcr.io/shared-resource
# IMAGE: the tag of `make image`'s tar, imported straight into a node (up.sh); it is
# not pulled from anywhere.
IMAGE   ?= docker.io/library/$(BINARY):$(VERSION)
# Every Go command compiles as the driver ships: static, -trimpath, no DWARF. hack/lib/goenv.sh
# says why, and what of the caller's environment wins; the scripts source it, and here its values
# are exported to every recipe.
export CGO_ENABLED := $(shell bash -c '. hack/lib/goenv.sh && printf %s "$$CGO_ENABLED"')
export GOFLAGS := $(shell bash -c '. hack/lib/goenv.sh && printf %s "$$GOFLAGS"')
export BUILD_GOGC := $(shell bash -c '. hack/lib/goenv.sh && printf %s "$$BUILD_GOGC"')

.PHONY: build help check-host check-host-api test test-api test-swap soak unit tools-test vet lint deps-lint golangci-lint image deploy up down tools tools-main deps tools-cluster deps-cluster tools-api helm actionlint check-workflows cosign registry release test-vm bench clean manifests

## build: the static driver binary, version stamped, in _output/bin.
# Stripped (-s -w), so compiled without the DWARF the link would drop: faster, and the compiled
# packages it shares with the cluster's tools (client-go, say) are compiled once for both.
build:
	GOGC=$(BUILD_GOGC) CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN)/$(BINARY) .

## help: every target with the first sentence of its `##` lines (`make` alone builds).
help:
	@awk -f hack/make-help.awk $(firstword $(MAKEFILE_LIST))

## vet: lint (shellcheck, actionlint with shellcheck on the workflows' run: steps, golangci-lint
## on every module, whose govet runs go vet's analyzers: .golangci.yml), check-workflows and
## gofmt. Pyflakes stays off: the workflows hold no Python.
vet: lint check-workflows
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

# The shell scripts: every tracked *.sh (the sourced libraries under hack/lib have no shebang) and
# every tracked file whose first line is a sh or bash shebang (.ci/run).
SHELL_SCRIPTS = $(sort $(shell git ls-files '*.sh'; git ls-files -z | xargs -0 awk 'FNR == 1 && /^\#!.*[/ ](ba)?sh( |$$)/ { print FILENAME } { nextfile }'))
# GOLANGCI_LINT: golangci-lint over one module (run in its directory) with the repository's .golangci.yml.
GOLANGCI_LINT = GOGC=$(BUILD_GOGC) $(CURDIR)/$(BIN)/golangci-lint run --config $(CURDIR)/.golangci.yml

## lint: shellcheck on every shell script, and on the run: steps of .github/workflows (through
## actionlint), and golangci-lint (.golangci.yml: staticcheck, revive, errcheck, govet...) on every
## module with Go code: the driver's as built and with the build tags root and crashpoints, test/,
## tools/ (benchtable, mkimage, soakplot, kubeletenv) and tools/ociimage.
lint: deps-lint actionlint golangci-lint
	shellcheck -x $(SHELL_SCRIPTS)
	$(BIN)/actionlint -shellcheck=shellcheck -pyflakes= .github/workflows/*.yaml
	$(GOLANGCI_LINT) ./...
	$(GOLANGCI_LINT) --build-tags root,crashpoints ./...
	cd test && $(GOLANGCI_LINT) ./...
	cd tools && $(GOLANGCI_LINT) ./benchtable/... ./mkimage/... ./soakplot/... ./kubeletenv/...
	cd tools/ociimage && $(GOLANGCI_LINT) ./...

## check-workflows: every action .github/workflows uses is pinned by a full commit SHA with a
## `# vX.Y.Z` comment (a tag can be moved to other code); hack/pinnedactions. And the release
## signs in a job of its own that runs none of the repository's code, and builds from no cache
## with no token left in its checkout; hack/releasejobs.
check-workflows:
	go test -count=1 ./hack/pinnedactions ./hack/releasejobs

## unit: the tests that need neither root nor a cluster (a quick check while coding): every
## test of the driver's module not behind the build tag root.
unit:
	go test ./...

## tools-test: the release tools' own tests (tools/ociimage: reproducibility, SBOMs, static
## binaries, push, `make release` itself, its cosign signatures and its krew plugin),
## tools/benchtable's and tools/soakplot's, and tools/kubeletenv's (the driver's env-file read by
## the kubelet's own parser); no root, no cluster. Part of `make test`.
# -count=1: benchtable's test reads BENCHMARKS.md, outside tools/'s module, whose changes go's
# test cache does not notice.
tools-test: helm cosign build
	cd tools/ociimage && go test ./...
	cd tools && go test -count=1 ./benchtable ./soakplot ./kubeletenv

## deps: the apt packages `make test` needs (root).
deps:
	hack/install-deps.sh all
## tools: every binary `make test` runs, built once from the Go module proxy and cached in
## _output/bin.
tools: deps
	hack/build-tools.sh all
## tools-main: the binaries of `make tools` but the older Kubernetes minors': one minor's
## (KUBE_VERSION's, default the newest) and every other tool (`make test` builds the older
## minors in the background from its start, for the matrix at its end).
tools-main: deps
	hack/build-tools.sh main
## deps-cluster: the apt packages `make up` needs (root); no helm, prometheus or jq.
deps-cluster:
	hack/install-deps.sh cluster
## deps-lint: shellcheck alone (`make vet`).
deps-lint:
	hack/install-deps.sh lint
## tools-cluster: the binaries `make up` runs, built once and cached in _output/bin.
tools-cluster: deps-cluster
	hack/build-tools.sh cluster
## tools-api: only what `make test-api` runs (a control plane and helm).
tools-api: deps
	hack/build-tools.sh api
## helm: helm alone, into _output/bin (`make manifests`, `make release`).
helm:
	hack/build-tools.sh helm
## actionlint: actionlint alone, into _output/bin (`make vet`).
actionlint:
	hack/build-tools.sh actionlint
## golangci-lint: golangci-lint alone, into _output/bin (`make vet`).
golangci-lint:
	hack/build-tools.sh golangci-lint
## cosign: cosign alone, into _output/bin (signing releases, the pod suite).
cosign:
	hack/build-tools.sh cosign
## krew: krew (kubectl-krew) and its manifest validation alone, into _output/bin (the release
## tests install the krew plugin with them).
.PHONY: krew kubectl govulncheck
krew:
	hack/build-tools.sh krew
## kubectl: the newest minor's kubectl alone, into _output/bin/k8s-1.NN (`make tools-test`).
kubectl:
	hack/build-tools.sh kubectl
tools-test: krew kubectl
## kube-next: the next Kubernetes minor before it ships (hack/kube-next.sh): the driver built and
## unit-tested against its pre-release client libraries, and env-file's output read by its
## kubelet's parser, each from a scratch copy of go.mod. Needs the Go module proxy. In `make test`.
.PHONY: kube-next
kube-next:
	hack/kube-next.sh
## govulncheck: the known vulnerabilities (vuln.go.dev, so it needs the network) of the code the
## driver's binary is built from, its modules' and the standard library's: fails on any it calls.
govulncheck:
	hack/build-tools.sh govulncheck
	$(BIN)/govulncheck ./...
## registry: distribution's registry binary, the test clusters' registry (also in tools; `make up` runs none).
registry:
	hack/build-tools.sh registry

## check-host: whether this host can run the local cluster (root, Linux, apt, Go, and cgroup v1 or
## cgroup v2 with systemd), said in a second: `make up`, `test` and `soak` check it before they
## install or build anything.
check-host:
	@hack/cluster.sh check-host
## check-host-api: whether this host can run a control plane alone (check-host without the
## cgroups): `make bench` and `make test-api` check it first.
check-host-api:
	@hack/cluster.sh check-host --control-plane-only

## test: everything CI runs, as root (hack/test.sh): vet, the release tools' tests (tools-test),
## then brings up the local cluster, runs every test (the root module's with -tags root: the unit
## and mount tests; test/'s suites: test/README.md) against it, tears it down; on the newest
## supported Kubernetes minor, then a smoke of every benchmark, the fuzz targets and the matrix of
## the older minors (hack/test.sh says which tests). KUBE_VERSION=1.NN: the whole suite on that
## minor only, without the benchmarks, fuzzing or matrix.
test:
	hack/test.sh

## test-api: the suites that need no kubelet, as root on a control plane alone (etcd, API server,
## controller manager; no kubelet, no container runtime): on a host with root and apt, whatever
## its cgroups. The
## root module's tests with the tag root, test/e2e/api (the driver as a process against the API
## server), test/manifests and test/e2e/framework. KUBE_VERSION=1.NN picks the minor.
test-api:
	TEST_NODES=0 hack/test.sh

## soak: the soak tier (test/e2e/soak, docs/reliability.md) on a local cluster of NODES nodes
## (default 3) that it brings up and tears down: a seeded workload with faults injected for
## DURATION (default 3m), then every read every consumer made is checked. SEED replays a run.
## Prints the figures and violations; keeps the histories and logs in _output/soak/.
SOAK_NODES := $(if $(filter command line environment,$(origin NODES)),$(NODES),3)
soak: check-host tools-main build $(BIN)/ociimage cosign
	DURATION=$(DURATION) SEED=$(SEED) NODES=$(SOAK_NODES) hack/soak.sh

## test-swap: SWAP_FROM=REV (default ffc900b): the driver's binary swapped both ways under
## running pods between REV's release and this tree's (test/e2e/swap). REV is a commit of this
## repository, its Go sources released with this tree's recipe and chart; each binary must resume,
## refresh, revoke and unpublish the volumes the other published. On a one-node cluster it brings
## up and tears down (root); not part of `make test`, as it builds another commit.
SWAP_FROM ?= ffc900b
test-swap: check-host tools-cluster registry helm cosign build $(BIN)/ociimage
	SWAP_FROM=$(SWAP_FROM) hack/test-swap.sh

## bench: benchmarks against a local control plane (root); writes BENCHMARKS.md.
## BENCH_SMOKE=1: a quick check of every benchmark (CI); BENCH_COUNT (default 5), BENCH_FILTER.
bench: check-host-api build tools-main
	hack/bench.sh

## image: an image tar of the static binary, written without Docker (load it with
## `ctr -n k8s.io images import` or `docker load`).
image: build $(BIN)/mkimage
	$(BIN)/mkimage -o $(OUT)/$(BINARY)-image.tar -tag $(IMAGE) -entrypoint /$(BINARY) -file $(BIN)/$(BINARY):/$(BINARY):0755
	@echo "wrote $(OUT)/$(BINARY)-image.tar ($(IMAGE))"

# mkimage alone (stdlib only): `make image` needs none of the cluster's tools.
$(BIN)/mkimage: tools/mkimage/main.go
	cd tools && GOGC=$(BUILD_GOGC) CGO_ENABLED=0 go build -trimpath -o ../$(BIN)/mkimage ./mkimage

## manifests: deploy.yaml and deploy/cluster-wide-read.yaml rendered from the Helm chart
## (charts/shared-resource-csi): edit the chart, then run this. `make test` fails when they differ.
## The chart's version, appVersion and image are stamped first from REGISTRY, and from VERSION
## when given (hack/manifests.sh says how VERSION maps to a SemVer chart version); the committed
## chart is the unreleased one, version "dev".
manifests: helm
	$(if $(filter command line environment,$(origin VERSION)),VERSION=$(VERSION)) REGISTRY=$(REGISTRY) hack/manifests.sh

## release: VERSION=vX.Y.Z [REGISTRY=host/path]: the multi-platform OCI image index (layout),
## SBOMs, deploy.yaml pinned by the index digest, the packaged chart, release notes from
## CHANGELOG.md and SHA256SUMS in RELEASE_OUT (hack/release.sh). With REGISTRY on the command line
## (or in the environment) the index and the chart are also pushed there; without, nothing is.
RELEASE_OUT ?= $(OUT)/release
PUSH := $(if $(filter command line environment,$(origin REGISTRY)),1,0)
## COSIGN_KEY=cosign.key (COSIGN_PASSWORD its password): also sign the index and SHA256SUMS
## with that key pair, offline (signature files in RELEASE_OUT).
## From the environment too: REGISTRY_CA_FILE (a private registry's CA) or REGISTRY_INSECURE=1,
## PLATFORMS (default: linux/amd64 linux/arm64 linux/ppc64le linux/s390x), CHANGELOG (default
## CHANGELOG.md): see hack/release.sh.
release: helm $(BIN)/ociimage $(if $(COSIGN_KEY),cosign)
	VERSION=$(VERSION) REGISTRY=$(REGISTRY) PUSH=$(PUSH) OUT=$(RELEASE_OUT) COSIGN_KEY=$(COSIGN_KEY) hack/release.sh

# ociimage: the release's image builder (go-containerregistry, its own module under tools/).
$(BIN)/ociimage: $(wildcard tools/ociimage/*.go) tools/ociimage/go.mod tools/ociimage/go.sum
	cd tools/ociimage && GOGC=$(BUILD_GOGC) CGO_ENABLED=0 go build -trimpath -o ../../$(BIN)/ociimage .

## deploy: install the release `make release REGISTRY=...` built and pushed (its deploy.yaml,
## the image pinned by digest) into the cluster kubectl points at. The committed deploy.yaml
## names no published image until the first tagged release.
deploy:
	@test -s $(RELEASE_OUT)/chart-digest || { echo "no pushed release in $(RELEASE_OUT): run make release REGISTRY=... VERSION=... first (no image is published yet)" >&2; exit 1; }
	kubectl apply -f $(RELEASE_OUT)/deploy.yaml

## up: a local cluster with the driver deployed from deploy.yaml and an example share; one node,
## or NODES of them (`make up NODES=3`: each its own kubelet, containerd, network and mount namespace).
## KUBE_VERSION=1.NN picks the Kubernetes minor (default the newest; hack/lib/versions.sh).
NODES ?= 1
up: check-host tools-cluster build image
	NODES=$(NODES) hack/up.sh

## down: tear the local cluster down (any number of nodes), leaving nothing behind
## (`hack/cluster.sh check-down` lists anything left).
down:
	hack/cluster.sh down

## test-vm: the VM tier (hack/vm.sh, root): a stock Debian 12 virtual machine (systemd, cgroup v2),
## built with debootstrap and booted under qemu, runs `make up` with this host's binaries; its
## example pod reads its CA, a revocation empties it, and `make down` leaves nothing. .ci/run runs
## it after `make test`.
test-vm: tools-cluster build
	hack/install-deps.sh vm
	hack/vm.sh

## clean: tear the local cluster down and remove _output.
clean: down
	rm -rf $(OUT)
