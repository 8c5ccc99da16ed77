package main

// The driver: the one value every server and loop of the node plugin shares (no package-level
// state), and how it is built from the options (wire: the API clients, the volume budget, the
// gauges). The gRPC servers (csi.go), the relist (refresh.go), the share events
// (shareevents.go) and recovery at start (recover.go) are its entry points; the layer order of
// the files below them: docs/how-it-works.md (checked by hack/walks).

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/shareapi"
	"github.com/shared-resource/csi-driver/internal/sourceaccess"
	"github.com/shared-resource/csi-driver/internal/volume"
)

const driverName = shareapi.DriverName

// driverEventComponent is the source component of the events the driver records on pods; the
// admin commands (internal/admin) read only events of this component.
const driverEventComponent = shareapi.EventComponent

// driver holds everything the servers and loops share. It has no package-level state.
type driver struct {
	version     string
	nodeID      string
	kubeletRoot string
	tmpfsSize   int64
	budget      *volume.Budget // the bytes of all volumes on the node
	// account is the driver's own service account, named in what an admin must run when the
	// driver may not read a source.
	account sourceaccess.DriverAccount

	mounter mounter // kernelMounter; a fake in unit tests
	store   *volume.Store
	locks   *volumeLocks
	shares  *share.Index
	sources *sourceCache
	authz   *authorizer
	events  record.EventRecorder // a record.FakeRecorder in unit tests
	metrics *metrics
	crash   crashpoint.Points // a no-op but in the crash tests' build (internal/crashpoint)
}

// wiring is the driver built from the options, and what serving it needs besides.
type wiring struct {
	d           *driver
	kube        *kubeClient
	broadcaster record.EventBroadcaster
	shareEvents *shareEventQueue // changed shares, from the CRD watch, paced (shareevents.go)
	sockPath    string           // the CSI socket
}

// wire checks the options and builds the driver and its clients. Nothing is served yet; the
// event broadcaster runs (the caller shuts it down).
func wire(ctx context.Context, o *options) (*wiring, error) {
	if o.nodeID == "" {
		return nil, fmt.Errorf("--node-id or $NODE_NAME is required")
	}
	size, err := resource.ParseQuantity(o.tmpfsSize)
	if err != nil || size.Value() < reservedBytes*2 {
		return nil, fmt.Errorf("--tmpfs-size %q must be a quantity of at least %d bytes", o.tmpfsSize, reservedBytes*2)
	}
	budget, err := parseVolumeBudget(o.volumeBudget, o.cacheBytes)
	if err != nil {
		return nil, err
	}
	account, err := sourceaccess.ParseDriverAccount(o.serviceAccount)
	if err != nil {
		return nil, err
	}
	sockPath, err := endpointPath(o.endpoint)
	if err != nil {
		return nil, err
	}
	for _, p := range []*string{&o.stateDir, &o.kubeletRoot} {
		if !filepath.IsAbs(*p) || hasControlChars(*p) {
			return nil, fmt.Errorf("%q must be an absolute path without control characters", *p)
		}
		*p = filepath.Clean(*p)
	}

	m := newMetrics()
	kube, err := newKube(o, m)
	if err != nil {
		return nil, err
	}
	sources, err := newSourceCache(kube, o.cacheEntries, o.cacheBytes, o.cacheTTL)
	if err != nil {
		return nil, err
	}
	// One event broadcaster for the process.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(eventSink{c: kube.Core})

	shareEvents := newShareEventQueue(newRelistSchedule(o.relistInterval, o.relistSpread))
	nodeBudget := &volume.Budget{Limit: budget}
	d := &driver{
		version:     version,
		nodeID:      o.nodeID,
		kubeletRoot: o.kubeletRoot,
		tmpfsSize:   size.Value(),
		budget:      nodeBudget,
		account:     account,
		mounter:     kernelMounter{},
		store:       volume.NewStore(o.stateDir, nodeBudget), // the budget's owner
		locks:       newVolumeLocks(),
		sources:     sources,
		authz:       newAuthorizer(sarClient{C: kube.Authz}, kube.rbacLoading, o.authzTTL, o.relistInterval),
		metrics:     m,
		crash:       crashpoint.New(),
		events:      broadcaster.NewRecorder(kube.Scheme, corev1.EventSource{Component: driverEventComponent, Host: o.nodeID}),
		shares:      share.NewIndex(kube.Dyn, shareEvents.add),
	}
	m.registerDriverGauges(d.gauges())
	return &wiring{d: d, kube: kube, broadcaster: broadcaster, shareEvents: shareEvents, sockPath: sockPath}, nil
}

// gauges are the driver's readings its metrics report at scrape time.
func (d *driver) gauges() driverGauges {
	return driverGauges{
		ready:       d.ready,
		volumes:     d.store.Count,
		mounts:      d.countMounts,
		volumeBytes: d.budget.InUse,
		budget:      func() int64 { return d.budget.Limit },
		sources:     d.sources.snapshot,
	}
}

// newKube builds the API clients with the driver's rate limit, encoding and request metrics.
func newKube(o *options, m *metrics) (*kubeClient, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	// Protobuf for Secrets, ConfigMaps, reviews, events and the Lease (the share CRDs are JSON), and no
	// gzip: Secrets do not compress, and gzipping a 1 MiB Secret doubled the API server's time
	// to answer its GET.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.DisableCompression = true
	cfg.UserAgent = "shared-resource-csi/" + version
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, m: m} })
	return newKubeClient(cfg)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// parseVolumeBudget reads --volume-bytes-budget: a quantity, 0 for none, or empty for the
// default derived from the container's memory limit (none, with a warning, when there is none).
func parseVolumeBudget(s string, cacheBytes int64) (int64, error) {
	if s == "" {
		budget, err := volume.DefaultBudget(cacheBytes)
		if err != nil {
			klog.InfoS("No volume budget: volumes may grow until the container's memory limit; set --volume-bytes-budget", "reason", err.Error())
			return 0, nil
		}
		klog.InfoS("Volume budget from the container's memory limit", "bytes", budget)
		return budget, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Value() < 0 {
		return 0, fmt.Errorf("--volume-bytes-budget %q must be a quantity (128Mi), 0 for none, or empty for the default", s)
	}
	return q.Value(), nil
}
