package e2estorage

// What upstream's test/e2e/e2e_test.go and test/e2e/e2e.go do (k8s.io/kubernetes v1.34), reduced
// to the External Storage suite: register the framework's flags, parse them (which also loads each
// --storage.testdriver file and defines its tests), let the framework read them, run Ginkgo.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	e2epod "k8s.io/kubernetes/test/e2e/framework/pod"

	// The feature constants the framework validates test labels against (upstream imports it the same way).
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The External Storage suite: --storage.testdriver=FILE defines its tests for FILE's driver.
	_ "k8s.io/kubernetes/test/e2e/storage/external"

	// Framework extensions upstream's suite installs: dump a failed test's namespace (events, pod
	// states) and check after each test that every node is still Ready. The metrics one is left
	// out: it scrapes the control plane's components, whose ports this cluster turns off.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"

	// Logging flags (-v and friends) on the command line, as upstream.
	_ "k8s.io/component-base/logs/testinit"
)

func TestMain(m *testing.M) {
	var versionFlag, testImageFlag bool
	flag.CommandLine.BoolVar(&versionFlag, "version", false, "Displays version information.")
	// --list-images lists every image any e2e test may use (two busyboxes among them); this names
	// the one the storage suites' pods run, so a cluster without a registry can import exactly it.
	flag.CommandLine.BoolVar(&testImageFlag, "default-test-image", false, "Print the image the storage suites' test pods run, and exit.")
	config.CopyFlags(config.Flags, flag.CommandLine) // --storage.testdriver lives in config.Flags
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()

	if versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s\n", flag.CommandLine.Args())
		os.Exit(1)
	}
	// Handles --list-images and --list-tests (and exits), validates the specs, defaults the rest.
	framework.AfterReadingAllFlags(&framework.TestContext)
	if testImageFlag {
		// After the flags are read: --kube-test-repo-list and --node-os-distro change the answer.
		fmt.Println(e2epod.GetDefaultTestImage())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestE2EStorage(t *testing.T) {
	// As upstream's RunE2ETests: InitLogs turns contextual logging off, the suite wants it on.
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes e2e storage suite", suiteConfig, reporterConfig)
}

// The part of upstream's setupSuite that matters on any cluster: no test starts before every node
// is schedulable, and the log says which API server the suite ran against. (Upstream also waits
// for kube-system's pods and daemonsets; this cluster has none.)
var _ = ginkgo.BeforeSuite(func(ctx context.Context) {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, framework.NewTimeoutContext().NodeSchedulable))
	framework.Logf("e2e test version: %s", version.Get().GitVersion)
	if v, err := c.Discovery().ServerVersion(); err == nil {
		framework.Logf("kube-apiserver version: %s", v.GitVersion)
	}
})
