package main

// Specifies the SELinux mount option's path through a publish (CSIDriver seLinuxMount: true, on
// by default since Kubernetes 1.37's SELinuxMount GA): the kubelet passes the pod's label as one
// `context="..."` mount flag and the driver puts it on the volume's tmpfs (the view the pod reads
// is a bind of that tmpfs, so it carries the label and the runtime never relabels the read-only
// files). Without the flag (older kubelets, nodes without SELinux) nothing is added. This machine
// has no SELinux: the kernel's side (the label on the files) is not tested here.

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPublishPutsTheKubeletsSELinuxContextOnTheTmpfs(t *testing.T) {
	const label = `context="system_u:object_r:container_file_t:s0:c12,c34"`
	for _, tc := range []struct {
		name  string
		flags []string
		want  string // in the tmpfs's mount data; "" for no context at all
	}{
		{"an SELinux node's kubelet passes the pod's label", []string{label}, label},
		{"an unquoted label without categories", []string{"context=system_u:object_r:container_file_t:s0"}, "context=system_u:object_r:container_file_t:s0"},
		{"no SELinux: the kubelet passes no flag", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, m := nodeWorld(t)
			ns := &nodeServer{d: d}
			req := publishRequest(t, d, "vol-1")
			req.VolumeCapability.GetMount().MountFlags = tc.flags
			if _, err := ns.NodePublishVolume(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			tm, ok := m.at(d.store.MountPoint("vol-1"))
			if !ok {
				t.Fatal("no tmpfs for the volume")
			}
			opts := tm.entry.SuperOptions
			if tc.want == "" && strings.Contains(opts, "context=") || tc.want != "" && !strings.Contains(opts, tc.want) {
				t.Fatalf("tmpfs mount data %q, want the context %q", opts, tc.want)
			}
			if rec, _ := d.store.Get("vol-1"); rec.MountContext != tc.want {
				t.Fatalf("record keeps context %q, want %q (a restarted driver re-mounts with it)", rec.MountContext, tc.want)
			}
		})
	}
}

// Any other mount flag could loosen the tmpfs (exec, a size): refused before anything is mounted.
func TestPublishRefusesMountFlagsOtherThanOneSELinuxContext(t *testing.T) {
	for _, flags := range [][]string{{"exec"}, {`context="a_t",size=0`}, {"context=a_t", "context=b_t"}} {
		d, m := nodeWorld(t)
		ns := &nodeServer{d: d}
		req := publishRequest(t, d, "vol-1")
		req.VolumeCapability = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}}}
		_, err := ns.NodePublishVolume(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || m.count() != 0 {
			t.Fatalf("flags %q: %v with %d mounts; want InvalidArgument and nothing mounted", flags, err, m.count())
		}
	}
}
