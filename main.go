// Command shared-resource-csi is a CSI node driver that shares Secrets and ConfigMaps across
// namespaces: a cluster admin publishes one through a cluster-scoped SharedSecret or
// SharedConfigMap and grants the RBAC verb `use`; pods in any namespace mount it as an in-line
// ephemeral CSI volume. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/shared-resource/csi-driver/internal/volume"
)

// version and commit are stamped at build time (`make build`: -ldflags "-X main.version=$(git
// describe --tags --always --dirty) -X main.commit=$(git rev-parse HEAD)"). An unstamped build
// (plain `go build`) still names its commit when Go recorded it (vcs.revision, see vcsRevision).
var (
	version = "dev"
	commit  = ""
)

// vcsRevision is the commit Go's build info recorded (go build in a git checkout, without
// -buildvcs=false), or "unknown".
func vcsRevision() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// versionText is what --version prints: what a bug report needs to name the build exactly.
func versionText() string {
	return fmt.Sprintf("shared-resource-csi %s\ncommit: %s\ngo: %s %s/%s\ndriver: %s\n", version,
		vcsRevision(), runtime.Version(), runtime.GOOS, runtime.GOARCH, driverName)
}

type options struct {
	role            string
	endpoint        string
	stateDir        string
	kubeletRoot     string
	registrationDir string
	nodeID          string
	kubeconfig      string
	qps             float64
	burst           int
	relistInterval  time.Duration
	relistSpread    float64
	cacheEntries    int
	cacheBytes      int64
	cacheTTL        time.Duration
	authzTTL        time.Duration
	tmpfsSize       string
	volumeBudget    string
	healthAddr      string
	healthMaxConns  int
	probeAddr       string
	statusLeaseNS   string
	statusLease     time.Duration
	serviceAccount  string
	showVersion     bool
}

// newFlagSet is the driver's command line: its own flags, bound to o, and klog's --v and
// --vmodule, which stay bound to klogFlags (where parseFlags caps them). docs/reference.md's flags
// table lists exactly the flags of fs (docs_test.go).
func newFlagSet(o *options) (fs, klogFlags *flag.FlagSet) {
	fs = flag.NewFlagSet(driverBinary, flag.ContinueOnError)
	fs.StringVar(&o.role, "role", roleNode, "what this process is (roles.go): node, the CSI node plugin, one per node (the DaemonSet); status, the controller that alone writes the shares' status, under a service account of its own (the Deployment)")
	fs.StringVar(&o.endpoint, "endpoint", "unix:///var/lib/kubelet/plugins/"+driverName+"/csi.sock", "CSI endpoint (unix socket) the kubelet calls")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/kubelet/plugins/"+driverName, "directory for the volumes' tmpfs mounts and records; must be under the kubelet root so mounts propagate")
	fs.StringVar(&o.kubeletRoot, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's root dir; every target path must be a CSI volume path under it")
	fs.StringVar(&o.registrationDir, "registration-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration dir; empty disables registration")
	fs.StringVar(&o.nodeID, "node-id", os.Getenv("NODE_NAME"), "node name reported by NodeGetInfo (default: $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "client-side rate limit of API requests per second, for all of the driver's requests together")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "client-side burst of API requests")
	fs.DurationVar(&o.relistInterval, "relist-interval", 60*time.Second, "how often every volume's access is re-checked and its data refreshed")
	fs.Float64Var(&o.relistSpread, "relist-spread", 0.5, "the part of --relist-interval over which a relist cycle spreads its API requests, so a node never sends them at its full rate limit (0 to 1; 0: as fast as the rate limit allows)")
	fs.IntVar(&o.cacheEntries, "cache-max-entries", 1000, "most Secrets/ConfigMaps kept in the source cache")
	fs.Int64Var(&o.cacheBytes, "cache-max-bytes", 64<<20, "most bytes of Secret/ConfigMap data kept in the source cache")
	fs.DurationVar(&o.cacheTTL, "cache-ttl", 10*time.Second, "how long a fetched Secret/ConfigMap serves new publishes before it is fetched again")
	fs.DurationVar(&o.authzTTL, "authz-cache-ttl", 10*time.Second, "how long a SubjectAccessReview grant serves new publishes (denials are never cached)")
	fs.StringVar(&o.tmpfsSize, "tmpfs-size", "4Mi", "size limit of each volume's tmpfs (a quantity: 4Mi, 1Gi)")
	fs.StringVar(&o.volumeBudget, "volume-bytes-budget", "", "most memory all volumes on the node may hold together (a quantity: 128Mi); their tmpfs pages are charged to the driver's container. Empty: the container's memory limit less --cache-max-bytes and 64Mi for the driver; 0: no budget")
	fs.StringVar(&o.healthAddr, "health-address", ":9809", "address serving /healthz (ready), /livez (alive) and /metrics (Prometheus), e.g. $(HOST_IP):9809 for the node's own address only; empty disables it")
	fs.IntVar(&o.healthMaxConns, "health-max-connections", 32, "most connections from other hosts (pods included) the health and metrics server holds at once; more are closed at once. Connections from the node's own address (the kubelet's probes) are not counted (at least 1)")
	fs.StringVar(&o.probeAddr, "probe-address", "", "address serving only /livez and /healthz, for the kubelet's probes, on a listener of its own with its own --health-max-connections: connections held on --health-address cannot crowd the probes out. The status controller (--role=status) on the pod network needs it: the kubelet probes it from the node, another host to it, counted with any pod's connections. Empty: the probes are served on --health-address only")
	fs.StringVar(&o.statusLeaseNS, "status-lease-namespace", "", "--role=status: namespace of the Lease that elects the one status controller replica writing the shares' status (required); --role=node ignores it")
	fs.DurationVar(&o.statusLease, "status-lease-duration", 15*time.Second, "duration of the status writer's Lease (at least 1s): a crashed writer is replaced within about this plus two --relist-interval, the pace at which the other replicas look at the Lease")
	fs.StringVar(&o.serviceAccount, "service-account", defaultServiceAccount(), "the service accounts that read sources, as NAMESPACE:NAME, comma-separated: the node plugin's and the status controller's (default: $POD_NAMESPACE:$SERVICE_ACCOUNT); only named in the command an admin runs to let the driver read a source")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	klogFlags = flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) {
		if f.Name == "v" || f.Name == "vmodule" {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	return fs, klogFlags
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs, klogFlags := newFlagSet(o)
	// The flag package's own messages would go to stderr without klog; parseFlags returns them
	// (see flagcheck.go) and only --help prints, to stdout.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		printUsage(os.Stdout, fs)
		return nil, err
	} else if err != nil {
		return nil, explainParseError(fs, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: %w", fs.Arg(0), errNoArguments)
	}
	if err := checkRole(o); err != nil {
		return nil, err
	}
	if err := checkOptions(o); err != nil {
		return nil, err
	}
	// client-go logs request and response bodies (Secret data among them) at verbosity 8 and
	// above, and it shares klog's global verbosity with us; the driver's own most detailed logs
	// are at 5. So verbosity is capped at 5, for every file --vmodule names too: no flag can
	// put secret bytes in the log.
	if v, err := strconv.Atoi(klogFlags.Lookup("v").Value.String()); err == nil && v > maxVerbosity {
		if err := klogFlags.Set("v", strconv.Itoa(maxVerbosity)); err != nil {
			return nil, err
		}
	}
	if spec := klogFlags.Lookup("vmodule").Value.String(); spec != "" {
		if err := klogFlags.Set("vmodule", capVModule(spec)); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// capVModule lowers every level of a --vmodule spec (pattern=N,...) above maxVerbosity to it.
func capVModule(spec string) string {
	entries := strings.Split(spec, ",")
	for i, e := range entries {
		pattern, level, ok := strings.Cut(e, "=")
		if n, err := strconv.Atoi(level); ok && err == nil && n > maxVerbosity {
			entries[i] = pattern + "=" + strconv.Itoa(maxVerbosity)
		}
	}
	return strings.Join(entries, ",")
}

// defaultServiceAccount is $POD_NAMESPACE:$SERVICE_ACCOUNT, which deploy.yaml sets from the pod
// (downward API), or empty.
func defaultServiceAccount() string {
	ns, sa := os.Getenv("POD_NAMESPACE"), os.Getenv("SERVICE_ACCOUNT")
	if ns == "" || sa == "" {
		return ""
	}
	return ns + ":" + sa
}

// maxVerbosity is the highest klog verbosity the process runs at; see parseFlags.
const maxVerbosity = 5

func main() {
	if len(os.Args) > 1 { // a subcommand (commands.go), not the driver
		if c, ok := findSubcommand(os.Args[1]); ok {
			os.Exit(runSubcommand(c, os.Args[2:], os.Stdout, os.Stderr))
		}
	}
	if filepath.Base(os.Args[0]) == kubectlPluginName { // commands.go
		os.Exit(runPlugin(os.Args[1:], os.Stdout, os.Stderr))
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		refuseFlags(err)
	}
	if o.showVersion {
		fmt.Print(versionText())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "Driver failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// run runs the process in its role (roles.go) until ctx ends or a server fails.
func run(ctx context.Context, o *options) error {
	if o.role == roleStatus {
		return runStatusController(ctx, o)
	}
	return runNode(ctx, o)
}

// runNode wires the node plugin from the options, resumes the volumes of the previous run and
// serves until ctx ends or a server fails.
func runNode(ctx context.Context, o *options) error {
	klog.InfoS("Starting", "driver", driverName, "version", version, "node", o.nodeID)
	for _, f := range nodeRoleIgnored(o) {
		klog.InfoS("Warning: the node plugin ignores this flag; share status is written by the status controller (--role=status, the chart's Deployment shared-resource-csi-status)", "flag", f)
	}
	w, err := wire(ctx, o)
	if err != nil {
		return err
	}
	volume.LimitRuntimeMemory(w.d.budget, o.cacheBytes)
	// Shut down last, once serve has stopped everything that records events.
	defer w.broadcaster.Shutdown()
	// Volumes from the previous run first: they must be known before any request is served.
	if err := w.d.recoverVolumes(); err != nil {
		return fmt.Errorf("recovering volumes: %w", err)
	}
	return w.serve(ctx, o)
}

// serve runs the CSI server, the health server, the share informers, the relist and share-event
// loops and the kubelet registration, until ctx ends (nil) or one of them fails (its error). On
// return it stops them in the reverse order. Never the status writer: that is the status
// controller's (roles.go).
func (w *wiring) serve(ctx context.Context, o *options) error {
	d := w.d
	grpcServer := newCSIServer(d)
	lis, err := listenUnix(w.sockPath)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", w.sockPath, err)
	}
	errs := make(chan error, 4)
	go func() { errs <- grpcServer.Serve(lis) }()
	defer grpcServer.GracefulStop()
	klog.InfoS("Serving CSI", "endpoint", w.sockPath)

	if o.healthAddr != "" {
		lis, err := net.Listen("tcp", o.healthAddr)
		if err != nil {
			return fmt.Errorf("listening on --health-address %s: %w", o.healthAddr, err)
		}
		hs := newHealthServer(d.ready, d.metrics)
		go func() { errs <- hs.Serve(newHealthListener(lis, o.healthMaxConns)) }()
		defer hs.Close()
	}
	if o.probeAddr != "" {
		lis, err := net.Listen("tcp", o.probeAddr)
		if err != nil {
			return fmt.Errorf("listening on --probe-address %s: %w", o.probeAddr, err)
		}
		ps := newProbeServer(d.ready)
		go func() { errs <- ps.Serve(newProbeListener(lis, o.healthMaxConns)) }()
		defer ps.Close()
	}

	d.shares.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), d.shares.Synced) {
		return ctx.Err()
	}
	klog.InfoS("Share caches synced")
	// Relist and share events start only now: before the caches synced, every share would
	// look deleted.
	go d.runShareEvents(ctx, w.shareEvents)
	go d.runRelist(ctx, o.relistInterval, o.relistSpread)

	if o.registrationDir != "" {
		regServer := grpc.NewServer()
		registerapi.RegisterRegistrationServer(regServer, &registrationServer{endpoint: w.sockPath})
		regLis, err := listenUnix(registrationSocket(o.registrationDir))
		if err != nil {
			return fmt.Errorf("listening for kubelet registration: %w", err)
		}
		go func() { errs <- regServer.Serve(regLis) }()
		defer regServer.Stop()
		// Removing the socket tells the kubelet the plugin is gone; on restart it is re-created.
		defer os.Remove(registrationSocket(o.registrationDir))
	}

	select {
	case <-ctx.Done():
		klog.InfoS("Shutting down; published volumes stay mounted and are resumed on restart")
		return nil
	case err := <-errs:
		return err
	}
}
