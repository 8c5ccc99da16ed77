// Package e2estorage is a slim Kubernetes e2e test binary: the e2e framework and the External
// Storage suite (k8s.io/kubernetes/test/e2e/storage/external, which registers
// --storage.testdriver) and nothing else of test/e2e. Upstream's e2e.test links every SIG's tests;
// this one links only what the storage suite needs, so it builds faster and lists fewer specs.
//
// It is a test binary (built with `go test -c` by hack/build-tools.sh into
// _output/bin/e2e-storage.test) because the e2e framework runs Ginkgo through testing.T, as
// upstream's test/e2e/e2e_test.go does. hack/e2e-storage.sh runs it against the local cluster.
package e2estorage
