package main

// Issue 6 over the CSI socket: file modes, key selection with renaming, fsGroup ownership and
// SELinux mount options. (The same with real pods and a non-root user is in pods_test.go.)

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
)

// fileInfo follows the pod's view of a file (through the top-level symlinks) to its mode and group.
func fileInfo(t *testing.T, path string) (os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid
}

func TestFileModesItemsAndFsGroup(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.volume(f.consumer, "app", map[string]string{
		attrSharedSecret: f.share,
		attrDefaultMode:  "0440",
		attrItems:        "ca.crt=certs/ca.pem, tls.key=keys/tls.key:0400",
	})
	v.fsGroup = "2345"
	if err := p.publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for path, want := range map[string]struct {
		data string
		mode os.FileMode
	}{
		"certs/ca.pem": {string(f.data["ca.crt"]), 0o440},
		"keys/tls.key": {string(f.data["tls.key"]), 0o400},
	} {
		full := filepath.Join(v.target, path)
		b, err := os.ReadFile(full)
		if err != nil || string(b) != want.data {
			t.Fatalf("%s: %v", path, err)
		}
		mode, gid := fileInfo(t, full)
		if mode != want.mode || gid != 2345 {
			t.Errorf("%s: mode %v gid %d, want %v gid 2345", path, mode, gid, want.mode)
		}
	}
	// Only the selected keys, only under their new names.
	for _, absent := range []string{"ca.crt", "tls.key"} {
		if _, err := os.Lstat(filepath.Join(v.target, absent)); err == nil {
			t.Errorf("%s is visible although not selected under that name", absent)
		}
	}
	// A refresh keeps the projection.
	rotated := map[string][]byte{"ca.crt": p.secret("ca2"), "tls.key": p.secret("key2")}
	e.updateSecret(t, f.platform, "ca-bundle", rotated)
	eventually(t, relist+relistSlack, func() error {
		return sameFiles(map[string]string{
			"certs/ca.pem": readFile(t, filepath.Join(v.target, "certs/ca.pem")),
			"keys/tls.key": readFile(t, filepath.Join(v.target, "keys/tls.key")),
		}, map[string]string{"certs/ca.pem": string(rotated["ca.crt"]), "keys/tls.key": string(rotated["tls.key"])})
	})
	if mode, gid := fileInfo(t, filepath.Join(v.target, "keys/tls.key")); mode != 0o400 || gid != 2345 {
		t.Errorf("after refresh: mode %v gid %d", mode, gid)
	}
	if err := p.unpublish(v); err != nil {
		t.Fatal(err)
	}
	p.assertNothingLeft(t, v)
}

func readFile(t *testing.T, p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func TestItemsNamingAMissingKeyFailPrecondition(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share, attrItems: "ca.crt,nope.pem"})
	wantCode(t, p.publish(v), codes.FailedPrecondition, `"nope.pem"`, "ca-bundle")
	bad := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share, attrItems: "ca.crt=../../etc/x"})
	wantCode(t, p.publish(bad), codes.InvalidArgument, attrItems)
	p.assertNothingLeft(t, v, bad)
}

func TestMountFlagsOnlySELinuxContext(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
	v.mountFlags = []string{"exec"}
	wantCode(t, p.publish(v), codes.InvalidArgument, `"exec"`, "context=")
	w := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
	w.mountFlags = []string{`context="system_u:object_r:container_file_t:s0:c1,c2"`}
	err := p.publish(w)
	if _, statErr := os.Stat("/sys/fs/selinux"); statErr == nil {
		// An SELinux node: the tmpfs carries the label.
		if err != nil {
			t.Fatalf("publish with an SELinux context: %v", err)
		}
		if err := p.unpublish(w); err != nil {
			t.Fatal(err)
		}
	} else {
		// This node has no SELinux: the kernel refuses the option and the driver says why.
		wantCode(t, err, codes.FailedPrecondition, "SELinux")
	}
	p.assertNothingLeft(t, v, w)
}
