// The local cluster's registry: distribution's registry with only the filesystem storage driver.
// Upstream's cmd/registry also links the Azure, GCS and S3 storage drivers, the pull-through
// proxy and three auth backends; the cluster's registry.yaml uses none of them, and their cloud
// SDKs were most of its build time.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// RootCmd prints its own error; its exit status is all that is left to report.
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
