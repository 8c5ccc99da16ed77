package main

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

const testRoot = "/var/lib/kubelet"
const testUID = "0f1e2d3c-0000-4000-8000-123456789abc"

var goodTarget = testRoot + "/pods/" + testUID + "/volumes/kubernetes.io~csi/ca/mount"

func goodPublishRequest() *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   "csi-0123abcd",
		TargetPath: goodTarget,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		},
		VolumeContext: map[string]string{
			ctxPodName: "web-1", ctxPodNamespace: "team-a", ctxPodUID: testUID,
			ctxServiceAccount: "app", ctxEphemeral: "true", attrSharedSecret: "corp-ca",
		},
	}
}

func TestParsePublishRequestAcceptsAKubeletRequest(t *testing.T) {
	v, err := parsePublishRequest(goodPublishRequest(), testRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := volumeRequest{VolumeID: "csi-0123abcd", TargetPath: goodTarget, Kind: kindSecret, Share: "corp-ca", Refresh: true,
		PodNamespace: "team-a", PodName: "web-1", PodUID: testUID, ServiceAccount: "app"}
	if *v != want {
		t.Errorf("got %+v\nwant %+v", *v, want)
	}
}

func TestParsePublishRequestRejectsBadInput(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(r *csi.NodePublishVolumeRequest)
		want   string // part of the message
	}{
		{"no volume id", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }, "volume_id is required"},
		{"volume id with slash", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "a/b" }, "not valid"},
		{"volume id dotdot", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "a..b" }, "not valid"},
		{"volume id is ..", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = ".." }, "not valid"},
		{"no capability", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }, "volume_capability is required"},
		{"block capability", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}, "only the mount access type"},
		{"mount flags", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.GetMount().MountFlags = []string{"exec"}
		}, "mount flags"},
		{"fs type", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.GetMount().FsType = "ext4" }, "fs_type"},
		{"no target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }, "target_path is required"},
		{"relative target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "pods/x/mount" }, "absolute"},
		{"target outside kubelet root", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "/etc/ssl" }, "not under the kubelet root"},
		{"target with ..", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = testRoot + "/pods/" + testUID + "/volumes/kubernetes.io~csi/ca/../../../../../../etc"
		}, "\"..\""},
		{"target with double slash", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(goodTarget, "/pods/", "/pods//", 1)
		}, "empty"},
		{"target of another pod", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = strings.Replace(goodTarget, testUID, "aaaaaaaa-0000-4000-8000-123456789abc", 1)
		}, "does not belong"},
		{"target not a csi volume path", func(r *csi.NodePublishVolumeRequest) {
			r.TargetPath = testRoot + "/pods/" + testUID + "/volumes/kubernetes.io~secret/ca/mount"
		}, "not a kubelet CSI volume path"},
		{"target is kubelet root", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = testRoot }, "not a kubelet CSI volume path"},
		{"ephemeral missing", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, ctxEphemeral) }, "in-line ephemeral"},
		{"ephemeral false", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[ctxEphemeral] = "false" }, "not PersistentVolumes"},
		{"pod info missing", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, ctxServiceAccount) }, "podInfoOnMount"},
		{"both shares", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrSharedConfigMap] = "x" }, "exactly one"},
		{"no share", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, attrSharedSecret) }, "set one of"},
		{"empty share", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrSharedSecret] = "" }, "not a valid object name"},
		{"invalid share name", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrSharedSecret] = "../etc" }, "not a valid object name"},
		{"refresh maybe", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[attrRefreshResource] = "maybe" }, "\"maybe\""},
		{"unknown attribute", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["sharedSecrets"] = "x" }, "unknown volumeAttribute"},
		{"staging path", func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "/x" }, "staging_target_path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := goodPublishRequest()
			c.mutate(r)
			_, err := parsePublishRequest(r, testRoot)
			if err == nil {
				t.Fatal("accepted")
			}
			if _, ok := err.(*invalidArgument); !ok {
				t.Errorf("error %T is not an invalidArgument", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("message %q does not contain %q", err.Error(), c.want)
			}
		})
	}
}

func TestParsePublishRequestAllowsNewKubeletKeysAndRefreshFalse(t *testing.T) {
	r := goodPublishRequest()
	r.VolumeContext["csi.storage.k8s.io/some.future.key"] = "x"
	r.VolumeContext[attrRefreshResource] = "false"
	v, err := parsePublishRequest(r, testRoot)
	if err != nil {
		t.Fatal(err)
	}
	if v.Refresh {
		t.Error("refreshResource=false parsed as true")
	}
}

func TestValidateTargetPathForUnpublishAcceptsAnyPodUID(t *testing.T) {
	if err := validateTargetPath(testRoot, goodTarget, ""); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"/", testRoot, testRoot + "/pods", testRoot + "/plugins/x/volumes/y", "/etc/passwd"} {
		if err := validateTargetPath(testRoot, bad, ""); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
