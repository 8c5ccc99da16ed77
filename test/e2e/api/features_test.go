package api

// Specification of what a volume holds, over the CSI socket: file modes, key selection with
// renaming, fsGroup ownership, SELinux mount options, several shares in one volume, and the
// /metrics and health endpoints. (A non-root pod reading through its fsGroup, with real pods, is
// in test/e2e/pods/features_test.go.)

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{
		framework.AttrSharedSecret: f.share,
		framework.AttrDefaultMode:  "0440",
		framework.AttrItems:        "ca.crt=certs/ca.pem, tls.key=keys/tls.key:0400",
	})
	v.FsGroup = "2345"
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for path, want := range map[string]struct {
		data string
		mode os.FileMode
	}{
		"certs/ca.pem": {string(f.data["ca.crt"]), 0o440},
		"keys/tls.key": {string(f.data["tls.key"]), 0o400},
	} {
		full := filepath.Join(v.Target, path)
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
		if _, err := os.Lstat(filepath.Join(v.Target, absent)); err == nil {
			t.Errorf("%s is visible although not selected under that name", absent)
		}
	}
	// A refresh keeps the projection.
	rotated := map[string][]byte{"ca.crt": p.Secret("ca2"), "tls.key": p.Secret("key2")}
	e.UpdateSecret(t, f.platform, "ca-bundle", rotated)
	framework.Eventually(t, relist+relistSlack, func() error {
		return framework.SameFiles(map[string]string{
			"certs/ca.pem": readFile(t, filepath.Join(v.Target, "certs/ca.pem")),
			"keys/tls.key": readFile(t, filepath.Join(v.Target, "keys/tls.key")),
		}, map[string]string{"certs/ca.pem": string(rotated["ca.crt"]), "keys/tls.key": string(rotated["tls.key"])})
	})
	if mode, gid := fileInfo(t, filepath.Join(v.Target, "keys/tls.key")); mode != 0o400 || gid != 2345 {
		t.Errorf("after refresh: mode %v gid %d", mode, gid)
	}
	p.UnpublishAll(t, v)
}

func readFile(_ *testing.T, p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func TestItemsNamingAMissingKeyFailPrecondition(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share, framework.AttrItems: "ca.crt,nope.pem"})
	wantCode(t, p.Publish(v), codes.FailedPrecondition, `"nope.pem"`, "ca-bundle")
	bad := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share, framework.AttrItems: "ca.crt=../../etc/x"})
	wantCode(t, p.Publish(bad), codes.InvalidArgument, framework.AttrItems)
	p.AssertNothingLeft(t, v, bad)
}

func TestSELinuxContextIsTheOnlyMountFlag(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	v.MountFlags = []string{"exec"}
	wantCode(t, p.Publish(v), codes.InvalidArgument, `"exec"`, "context=")
	w := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	w.MountFlags = []string{`context="system_u:object_r:container_file_t:s0:c1,c2"`}
	err := p.Publish(w)
	if _, statErr := os.Stat("/sys/fs/selinux"); statErr == nil {
		// An SELinux node: the tmpfs carries the label.
		if err != nil {
			t.Fatalf("publish with an SELinux context: %v", err)
		}
		if err := p.Unpublish(w); err != nil {
			t.Fatal(err)
		}
	} else {
		// This node has no SELinux: the kernel refuses the option and the driver says why.
		wantCode(t, err, codes.FailedPrecondition, "SELinux")
	}
	p.AssertNothingLeft(t, v, w)
}

func TestSeveralSharesInOneVolume(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true) // secret share: ca.crt, tls.key
	proxy := map[string]string{"proxy.env": "HTTPS_PROXY=http://proxy:3128\n", "ca.crt": "proxy-ca"}
	if _, err := e.Kube.CoreV1().ConfigMaps(f.platform).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy"}, Data: proxy}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cmShare := "proxy-" + framework.RandSuffix()
	e.CreateShare(t, framework.KindConfigMap, cmShare, f.platform, "proxy")
	revokeCM := e.Grant(t, f.consumer, framework.KindConfigMap, cmShare, framework.ServiceAccount(f.consumer, "app"))
	shares := "secret/" + f.share + ", configmap/" + cmShare

	// Both shares have a key ca.crt: without items the paths collide, which is refused.
	clash := p.Volume(f.consumer, "app", map[string]string{framework.AttrShares: shares})
	wantCode(t, p.Publish(clash), codes.FailedPrecondition, `"ca.crt"`, framework.AttrItems)

	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrShares: shares,
		framework.AttrItems: "configmap/" + cmShare + "/proxy.env, configmap/" + cmShare + "/ca.crt=proxy/ca.crt"})
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish: %v", err)
	}
	all := map[string]string{"ca.crt": string(f.data["ca.crt"]), "tls.key": string(f.data["tls.key"]),
		"proxy.env": proxy["proxy.env"], "proxy/ca.crt": "proxy-ca"}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), all); err != nil {
		t.Fatal(err)
	}

	// Revoking one share removes only its files.
	revokeCM()
	framework.Eventually(t, relist+relistSlack, func() error {
		return framework.SameFiles(framework.ReadVolume(t, v.Target), map[string]string{"ca.crt": all["ca.crt"], "tls.key": all["tls.key"]})
	})
	framework.Eventually(t, 10*time.Second, func() error {
		evs, err := e.PodEvents(v.PodNS, v.PodName, framework.ReasonRevoked)
		if err != nil || len(evs) == 0 || !strings.Contains(evs[0].Message, "configmap/"+cmShare) {
			return fmt.Errorf("no revocation event naming the config map share (%v, %v)", evs, err)
		}
		return nil
	})
	e.Grant(t, f.consumer, framework.KindConfigMap, cmShare, framework.ServiceAccount(f.consumer, "app"))
	framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), all) })

	// A later collision: the secret gains a key proxy.env. The first share listed keeps the path,
	// and the pod gets a Warning event.
	withProxy := map[string][]byte{"ca.crt": f.data["ca.crt"], "tls.key": f.data["tls.key"], "proxy.env": []byte("from-the-secret\n")}
	e.UpdateSecret(t, f.platform, "ca-bundle", withProxy)
	all["proxy.env"] = "from-the-secret\n"
	framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), all) })
	framework.Eventually(t, 10*time.Second, func() error {
		if evs, err := e.PodEvents(v.PodNS, v.PodName, framework.ReasonConflict); err != nil || len(evs) == 0 {
			return fmt.Errorf("no %s event (err %v)", framework.ReasonConflict, err)
		}
		return nil
	})
	if err := p.Unpublish(v); err != nil {
		t.Fatal(err)
	}
	p.AssertNothingLeft(t, v, clash)
}

// The health and metrics server, on the host network, cannot be made to hold connections: a
// thousand clients of another host that connect and send nothing cost the driver no memory to
// speak of (it holds at most --health-max-connections of theirs at once, closes the others at
// once and each silent one after the header timeout), the kubelet's probes from the node's own
// address are answered all the while, a client that idles after a request is disconnected
// after the idle timeout, and once they are gone everyone is answered again.
func TestHealthServerHoldsNoIdleConnections(t *testing.T) {
	e := framework.E2e(t)
	addr := framework.FreeLocalAddr(t)
	p := e.StartDriver(t, framework.WithArgs("--health-address="+addr, "--health-max-connections=16"))
	get := func(path string) error {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
	framework.Eventually(t, 10*time.Second, func() error { return get("/healthz") })
	anon0, _ := framework.RssOf(t, p.Cmd.Process.Pid)

	// The clients are another host: 127.0.0.2 reaches the driver's 127.0.0.1 but is not the
	// address the driver was reached at (the node's own, which the kubelet probes from).
	other := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	// One client sends a request and then idles on its keep-alive connection.
	idler, err := other.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idler.Close()
	if _, err := io.WriteString(idler, "GET /livez HTTP/1.1\r\nHost: driver\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	idleSince := time.Now()
	br := bufio.NewReader(idler)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the idler's request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	// A thousand clients connect and send nothing.
	const silent = 1000
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range silent {
		c, err := other.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	// The probes, from the node's own address, are answered while they are held.
	for i := range 3 {
		start := time.Now()
		if err := get("/livez"); err != nil {
			t.Errorf("probe %d while %d silent connections are held: %v", i, silent, err)
		} else if i == 0 {
			t.Logf("/livez answered in %v with %d silent connections held", time.Since(start).Round(time.Millisecond), silent)
		}
	}
	time.Sleep(2 * time.Second)
	anon1, _ := framework.RssOf(t, p.Cmd.Process.Pid)
	grew := (anon1 - anon0) / (1 << 20)
	t.Logf("driver anonymous RSS %.1f MiB before, %.1f MiB with %d silent connections open (+%.1f MiB)", anon0/(1<<20), anon1/(1<<20), silent, grew)
	if grew > 4 {
		t.Errorf("%d silent connections grew the driver by %.1f MiB, want a bounded few", silent, grew)
	}

	// The idler is disconnected once it has idled for the idle timeout.
	if err := idler.SetReadDeadline(time.Now().Add(framework.HealthIdleTimeout + 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the idle keep-alive connection: read %v after %v, want EOF (closed by the server)", err, time.Since(idleSince).Round(time.Second))
	} else {
		t.Logf("idle keep-alive connection closed by the server after %v", time.Since(idleSince).Round(100*time.Millisecond))
	}
	// The silent clients accepted first were closed after the header timeout.
	closed := 0
	for _, c := range conns[:16] {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed == 0 {
		t.Errorf("none of the first silent connections was closed by the server")
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	start := time.Now()
	framework.Eventually(t, 10*time.Second, func() error { return get("/livez") })
	t.Logf("after the clients left, /livez answered within %v", time.Since(start).Round(10*time.Millisecond))
}

func TestMetricsAreServedAndCount(t *testing.T) {
	e := framework.E2e(t)
	addr := framework.FreeLocalAddr(t)
	p := e.StartDriver(t, framework.WithArgs("--health-address="+addr))
	f, v := publishedVolume(t, e, p)
	denied := p.Volume(f.consumer, "other", map[string]string{framework.AttrSharedSecret: f.share})
	wantCode(t, p.Publish(denied), codes.PermissionDenied)
	f.revoke()
	framework.Eventually(t, relist+relistSlack, func() error { return emptyVolume(t, v) })

	m := metricsOf(t, "http://"+addr+"/metrics")
	type labels = map[string]string
	for _, want := range []struct {
		name   string
		labels labels
		value  float64 // -1: any value, the series need only be there
	}{
		{"sharedresource_csi_operations_total", labels{"code": "OK", "method": "NodePublishVolume"}, 1},
		{"sharedresource_csi_operations_total", labels{"code": "PermissionDenied", "method": "NodePublishVolume"}, 1},
		{"sharedresource_volumes", nil, 1},
		{"sharedresource_mounts", nil, 2}, // the tmpfs and its bind
		{"sharedresource_volume_changes_total", labels{"change": "revoked"}, 1},
		{"sharedresource_api_requests_total", labels{"code": "201", "resource": "subjectaccessreviews", "verb": "create"}, -1},
		{"sharedresource_api_requests_total", labels{"code": "200", "resource": "secrets", "verb": "get"}, -1},
		{"sharedresource_relist_cycle_duration_seconds_count", nil, -1},
		{"sharedresource_source_cache_misses_total", nil, -1},
		{"go_goroutines", nil, -1}, {"process_open_fds", nil, -1}, {"process_resident_memory_bytes", nil, -1},
	} {
		if !m.Has(want.name, want.labels) {
			t.Errorf("/metrics lacks %s%v", want.name, want.labels)
		} else if got := m.Sum(want.name, want.labels); want.value >= 0 && got != want.value {
			t.Errorf("/metrics: %s%v = %v, want %v", want.name, want.labels, got, want.value)
		}
	}
	for _, path := range []string{"/healthz", "/livez"} {
		if body := httpGet(t, "http://"+addr+path); !strings.Contains(body, "ok") {
			t.Errorf("%s: %q", path, body)
		}
	}
	if err := p.Unpublish(v); err != nil {
		t.Fatal(err)
	}
	if m := metricsOf(t, "http://"+addr+"/metrics"); !m.Has("sharedresource_mounts", nil) || m.Sum("sharedresource_mounts", nil) != 0 {
		t.Error("mounts gauge not back to 0 after unpublish")
	}
}

// metricsOf reads the /metrics endpoint at url, or fails the test.
func metricsOf(t *testing.T, url string) framework.ScrapedMetrics {
	t.Helper()
	m, err := framework.ScrapeMetrics(url)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// httpGet returns the body at url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
