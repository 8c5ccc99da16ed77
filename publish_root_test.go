//go:build root

package main

// The warm publish on the node, as root: NodePublishVolume and NodeUnpublishVolume called as the
// kubelet calls them (gRPC over a unix socket, through the driver's interceptor, logging at
// --v=2 as deployed) on the real mounts (a tmpfs per volume, the read-only bind) and the real
// atomic writer, with the API answered by fakes that never wait (a granted review, a source of
// the size asked), so that what is measured, and profiled with -cpuprofile, is the driver's own
// work beside the kernel's.

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/shared-resource/csi-driver/internal/crashpoint"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// grantAll is a review that lets every pod use every share, at once.
type grantAll struct{}

func (grantAll) Create(context.Context, *authorizationv1.SubjectAccessReview, metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	return &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}, nil
}

// oneSource answers every GET with the same source of one key.
type oneSource struct{ d *share.SourceData }

func (s oneSource) getSource(context.Context, share.SourceKey, metav1.GetOptions) (*share.SourceData, error) {
	return s.d, nil
}

// BenchmarkPublishOnNode: a warm publish and its unpublish, 200 times per run, on real mounts;
// the median publish as the kubelet waits for it (wall) and the CPU time the process spent on it
// (all threads: the gRPC server's too), so that -benchtime 1x (make bench) still gives a figure.
func BenchmarkPublishOnNode(b *testing.B) {
	tmpfsTestNeedRoot(b)
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	if err := fs.Set("v", "2"); err != nil {
		b.Fatal(err)
	}
	defer fs.Set("v", "0") //nolint:errcheck // the flag exists
	for _, sz := range []struct {
		name  string
		bytes int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		size := sz.bytes
		b.Run("size="+sz.name, func(b *testing.B) {
			root, err := filepath.EvalSymlinks(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			data := bytes.Repeat([]byte{'x'}, size)
			src := &share.SourceData{Files: map[string][]byte{"ca.crt": data}, ResourceVersion: "1", UID: "src-1", Size: int64(size + 6)}
			sources, err := newSourceCache(oneSource{src}, 10, 8<<20, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			budget := &volume.Budget{Limit: 1 << 30}
			d := &driver{version: "bench", nodeID: "node", kubeletRoot: root, tmpfsSize: 4 << 20, budget: budget,
				account: testDriverAccount, mounter: kernelMounter{},
				store: volume.NewStore(filepath.Join(root, "plugins", driverName), budget), locks: newVolumeLocks(),
				shares:  share.NewIndex(dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme()), func(share.Kind, string) {}),
				sources: sources, authz: newAuthorizer(grantAll{}, notLoading, time.Hour, time.Minute), events: &record.FakeRecorder{},
				metrics: newMetrics(), crash: crashpoint.New()}
			u := &unstructured.Unstructured{Object: map[string]any{
				"metadata": map[string]any{"name": "share", "uid": "share-1"},
				"spec":     map[string]any{"secretRef": map[string]any{"namespace": "p", "name": "src"}},
			}}
			if err := d.shares.Informer(share.KindSecret).GetStore().Add(u); err != nil {
				b.Fatal(err)
			}
			target := filepath.Join(root, "pods", testPodUID, "volumes", "kubernetes.io~csi", "ca", "mount")
			if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
				b.Fatal(err)
			}
			srv := newCSIServer(d)
			sock := filepath.Join(root, "csi.sock")
			lis, err := listenUnix(sock)
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(lis) //nolint:errcheck // stopped below
			defer srv.Stop()
			conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ns := csi.NewNodeClient(conn)
			req := &csi.NodePublishVolumeRequest{
				VolumeId: "csi-bench", TargetPath: target, Readonly: true,
				VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}},
				VolumeContext: map[string]string{attrSharedSecret: "share", ctxEphemeral: "true",
					ctxPodNamespace: "c", ctxPodName: "pod", ctxPodUID: testPodUID, ctxServiceAccount: "app"},
			}
			ctx := context.Background()
			for range b.N {
				const publishes = 200
				wall := make([]time.Duration, 0, publishes)
				cpu := make([]time.Duration, 0, publishes)
				for range publishes {
					cpu0, start := processCPU(b), time.Now()
					if _, err := ns.NodePublishVolume(ctx, req); err != nil {
						b.Fatal(err)
					}
					wall, cpu = append(wall, time.Since(start)), append(cpu, processCPU(b)-cpu0)
					if _, err := ns.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: target}); err != nil {
						b.Fatal(err)
					}
				}
				slices.Sort(wall)
				slices.Sort(cpu)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(wall[publishes/2].Nanoseconds())/1e3, "publish-wall-p50-us")
				b.ReportMetric(float64(cpu[publishes/2].Nanoseconds())/1e3, "publish-cpu-p50-us")
			}
		})
	}
}

// processCPU is the CPU time the process has used, all threads (the gRPC server's too).
func processCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
