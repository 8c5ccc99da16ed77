package main

// Sockets: the CSI endpoint, and registration with the kubelet through its plugin watcher, done
// in-process so the DaemonSet needs no node-driver-registrar sidecar. The kubelet finds our
// registration socket in its plugins_registry dir, asks GetInfo for the CSI endpoint, then
// reports the outcome through NotifyRegistrationStatus.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// listenUnix listens on a unix socket at path. A stale socket from an earlier run is removed,
// but only if it is a socket: the driver never deletes a file it did not create.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// endpointPath turns "unix:///a/b.sock" or "/a/b.sock" into "/a/b.sock".
func endpointPath(endpoint string) (string, error) {
	p := strings.TrimPrefix(endpoint, "unix://")
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("--endpoint %q must be unix:///absolute/path", endpoint)
	}
	return filepath.Clean(p), nil
}

var _ registerapi.RegistrationServer = (*registrationServer)(nil)

type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string // the CSI socket's path as the kubelet sees it
}

func (r *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              driverName,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registrationServer) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		klog.InfoS("Registered with the kubelet", "driver", driverName)
	} else {
		klog.ErrorS(errors.New(s.Error), "The kubelet refused the registration")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// registrationSocket is where the kubelet's plugin watcher looks for us.
func registrationSocket(dir string) string {
	return filepath.Join(dir, driverName+"-reg.sock")
}
