# shellcheck shell=bash
# How every Go command of this repository compiles, the driver's tests and linters as much as its
# release: the way the driver ships. Static (CGO_ENABLED=0), -trimpath, and without DWARF (the
# release links stripped, which drops it anyway). hack/build-tools.sh compiles the clusters'
# Kubernetes binaries and tools the same way, so each package is compiled once into the Go build
# cache and serves them all: client-go compiled for kube-apiserver is the driver's, the linters'
# and the tests'; the standard library for arm64 is the release's and tools/ociimage's fixtures'.
# Compiled two ways, the shared packages would be compiled twice (some 500 CPU seconds on a cold
# cache). It also tests the driver's code as it ships: without cgo. (A panic's stack then names
# files by module path, github.com/shared-resource/csi-driver/x.go, not by their place on disk.)
#
# Sourced by the scripts that run Go (hack/test.sh, bench.sh, fuzz.sh, soak.sh); the Makefile
# exports what it sets to every recipe. What the caller set wins: CGO_ENABLED=1 (which -race
# needs: `CGO_ENABLED=1 make test TEST_ARGS=-race`), and a -trimpath or -gcflags of its own in
# GOFLAGS, to which nothing is then added.
export CGO_ENABLED=${CGO_ENABLED:-0}
case " ${GOFLAGS:-} " in
*" -trimpath"*) ;;
*) GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" ;;
esac
case " $GOFLAGS " in
*" -gcflags"*) ;;
*) GOFLAGS="$GOFLAGS -gcflags=all=-dwarf=false" ;;
esac
export GOFLAGS
# BUILD_GOGC: the garbage collector's target for the commands that compile, lint and fuzz (the
# scripts and the Makefile put it in GOGC for go build, golangci-lint and go test -fuzz). At 400
# rather than Go's default 100 they spend less time collecting: compiling the driver's
# dependencies took 12 and 18% less CPU (two pairs of builds), Kubernetes' largest packages 12%
# less, and golangci-lint over test/ 21% less, for a larger heap (the largest compile 0.43 ->
# 0.56 GB, golangci-lint 1.2 -> 2.6 GB). Not GOGC itself: a test binary inherits the go command's environment, and the
# tests and benchmarks run the driver with the collector as it ships (fuzzing aside, which
# measures nothing). On a machine short of memory, BUILD_GOGC=100 builds as Go does by default.
export BUILD_GOGC=${BUILD_GOGC:-400}
# GO_TEST_EXEC: what `go test -exec` runs each test binary with when the go command runs with
# GOGC=$BUILD_GOGC: the GOGC the caller set, or none.
if [[ -v GOGC ]]; then GO_TEST_EXEC="env GOGC=$GOGC"; else GO_TEST_EXEC="env -u GOGC"; fi
export GO_TEST_EXEC
