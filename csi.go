package main

// The CSI Identity and Node services: the top of the node plugin. The node server's two
// operations have their handlers with their work, NodePublishVolume in publish.go and
// NodeUnpublishVolume in unpublish.go; here are the rest of the servers (identity, node info,
// capabilities), and the interceptor that logs every call with its secrets stripped, and counts it.

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

// Compile-time checks that the servers implement the CSI interfaces.
var (
	_ csi.IdentityServer = (*identityServer)(nil)
	_ csi.NodeServer     = (*nodeServer)(nil)
)

// newCSIServer is the CSI endpoint's gRPC server: the Identity and Node services over d, every
// call logged and counted (observeCalls).
func newCSIServer(d *driver) *grpc.Server {
	s := grpc.NewServer(grpc.UnaryInterceptor(observeCalls(d.metrics)))
	csi.RegisterIdentityServer(s, &identityServer{d: d})
	csi.RegisterNodeServer(s, &nodeServer{d: d})
	return s
}

type identityServer struct {
	csi.UnimplementedIdentityServer
	d *driver
}

func (s *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: s.d.version}, nil
}

func (s *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	// A node-only plugin: no controller service, no topology.
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe reports ready once the share caches have synced: before that, a publish would fall back
// to live GETs and the relist could not tell a deleted share from one not yet seen.
func (s *identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(s.d.ready())}, nil
}

func (d *driver) ready() bool { return d.shares.Synced() }

type nodeServer struct {
	csi.UnimplementedNodeServer
	d *driver
}

func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.d.nodeID}, nil
}

// NodeGetCapabilities advertises VOLUME_MOUNT_GROUP: the kubelet then passes the pod's fsGroup
// with each publish and does not try to chown the (read-only) volume itself; the driver gives
// the files that group.
func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}},
	}}}, nil
}

// observeCalls logs every call with its secrets stripped (fields the CSI spec marks csi_secret,
// and the service-account tokens the kubelet may put in the volume context: nothing else in a
// CSI request carries secret bytes, and the driver never logs data it reads), and counts it.
func observeCalls(m *metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := logCall(ctx, req, info, handler)
		m.observeCall(info.FullMethod, err, time.Since(start))
		return resp, err
	}
}

func logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if m, ok := req.(proto.Message); ok && klog.V(4).Enabled() {
		klog.V(4).InfoS("gRPC request", "method", info.FullMethod, "request", prototext.MarshalOptions{}.Format(stripSecrets(m)))
	}
	resp, err := handler(ctx, req)
	if err != nil {
		st, _ := status.FromError(err)
		klog.V(2).InfoS("gRPC call failed", "method", info.FullMethod, "code", st.Code(), "message", st.Message(), "duration", time.Since(start))
	} else {
		klog.V(5).InfoS("gRPC call done", "method", info.FullMethod, "duration", time.Since(start))
	}
	return resp, err
}

const strippedValue = "***stripped***"

// stripSecrets returns a copy of m with secret fields cleared and tokens replaced.
func stripSecrets(m proto.Message) proto.Message {
	c := proto.Clone(m)
	stripMessage(c.ProtoReflect())
	return c
}

func stripMessage(m protoreflect.Message) {
	var secret []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if isSecret, _ := proto.GetExtension(fd.Options(), csi.E_CsiSecret).(bool); isSecret {
			secret = append(secret, fd)
			return true
		}
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			tok := protoreflect.ValueOfString(ctxServiceAccountTok).MapKey()
			if v.Map().Has(tok) {
				v.Map().Set(tok, protoreflect.ValueOfString(strippedValue))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				stripMessage(mv.Message())
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				stripMessage(v.List().Get(i).Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			stripMessage(v.Message())
		}
		return true
	})
	for _, fd := range secret {
		m.Clear(fd)
	}
}
