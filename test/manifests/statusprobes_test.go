package manifests

// Specification of the status controller's probes as the chart deploys it: on the pod network the
// kubelet probes it from the node, another host to the pod, so a pod holding every connection its
// metrics port admits must not make its liveness probe fail (and its replicas restart). The
// binary runs with the args the chart renders (ports moved to free ones), against no API server:
// its probes' server starts before it reaches one.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestStatusControllerProbesAnswerWhilePodsHoldItsPort(t *testing.T) {
	objs := framework.RenderedObjects(t, framework.RunHelm(t, "template", "r", framework.ChartDir))
	var dep appsv1.Deployment
	fromObject(t, objs, "Deployment", "shared-resource-csi-status", &dep, nil)
	c := dep.Spec.Template.Spec.Containers[0]
	portOf := func(p *corev1.Probe, what string) int32 {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("the status controller's %s probe is not an HTTP GET", what)
		}
		if p.HTTPGet.Port.StrVal == "" {
			return p.HTTPGet.Port.IntVal
		}
		for _, cp := range c.Ports {
			if cp.Name == p.HTTPGet.Port.StrVal {
				return cp.ContainerPort
			}
		}
		t.Fatalf("the %s probe's port %q is not a port of the container", what, p.HTTPGet.Port.StrVal)
		return 0
	}
	live, ready := portOf(c.LivenessProbe, "liveness"), portOf(c.ReadinessProbe, "readiness")
	var metricsPort int32
	for _, cp := range c.Ports {
		if cp.Name == "healthz" {
			metricsPort = cp.ContainerPort
		}
	}
	if metricsPort == 0 {
		t.Fatal("the status controller has no port healthz (its /metrics)")
	}

	// The chart's ports, each moved to a free one on this machine.
	moved := map[int32]int{}
	for _, p := range []int32{metricsPort, live, ready} {
		if _, ok := moved[p]; ok {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		moved[p] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	maxConns := 32 // --health-max-connections' default, unless the chart sets it
	var args []string
	for _, a := range c.Args {
		for from, to := range moved {
			if strings.HasSuffix(a, fmt.Sprintf(":%d", from)) && strings.HasPrefix(a, "--") {
				a = strings.TrimSuffix(a, fmt.Sprintf(":%d", from)) + ":" + strconv.Itoa(to)
			}
		}
		if v, ok := strings.CutPrefix(a, "--health-max-connections="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			maxConns = n
		}
		args = append(args, a)
	}
	// No API server: the share caches never sync, which the probes do not need.
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubeconfig="+kubeconfig)
	bin := os.Getenv("DRIVER_BINARY")
	if bin == "" {
		bin = "_output/bin/shared-resource-csi"
	}
	logf, err := os.Create(filepath.Join(dir, "status.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // killed: its exit status says so
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("the status controller's log:\n%s", b)
		}
	})
	t.Logf("%s %s", bin, strings.Join(args, " "))

	// The kubelet: the node, another host to the pod (127.0.0.3); the pod: 127.0.0.2.
	kubelet := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: time.Second}
	pod := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: time.Second}
	probe := func(port int, path string) (string, error) {
		conn, err := kubelet.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second)) // the chart's timeoutSeconds
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: status\r\nUser-Agent: kube-probe/1.37\r\nConnection: close\r\n\r\n", path); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		return resp.Status, nil
	}
	livePort, readyPort := moved[live], moved[ready]
	framework.Eventually(t, 15*time.Second, func() error {
		if s, err := probe(livePort, c.LivenessProbe.HTTPGet.Path); err != nil || s != "200 OK" {
			return fmt.Errorf("the liveness probe before any pod connects: %q %v", s, err)
		}
		return nil
	})

	// A pod holds every connection the metrics port admits, and the next is closed at once.
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", moved[metricsPort])
	for range maxConns {
		conn, err := pod.Dial("tcp", metricsAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	framework.Eventually(t, 5*time.Second, func() error {
		conn, err := pod.Dial("tcp", metricsAddr)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
			return fmt.Errorf("a connection over the %d held: read %v, want EOF (the cap is full)", maxConns, err)
		}
		return nil
	})

	// The kubelet's probes are answered all the same: the liveness probe's failureThreshold
	// failures in a row would restart the pod.
	fails := 0
	for i := range 5 {
		if s, err := probe(livePort, c.LivenessProbe.HTTPGet.Path); err != nil || s != "200 OK" {
			fails++
			t.Errorf("liveness probe %d (port %d, %s) while a pod holds %d connections to the metrics port: %q %v", i+1, live, c.LivenessProbe.HTTPGet.Path, maxConns, s, err)
		}
		// Readiness: an answer (503 until the share caches sync, which needs an API server).
		if s, err := probe(readyPort, c.ReadinessProbe.HTTPGet.Path); err != nil {
			t.Errorf("readiness probe %d (port %d, %s): no answer: %v", i+1, ready, c.ReadinessProbe.HTTPGet.Path, err)
		} else if i == 0 {
			t.Logf("readiness probe answered %q", s)
		}
	}
	t.Logf("%d held connections to the metrics port (%d); liveness probes failed: %d of 5 (port %d)", maxConns, metricsPort, fails, live)
}
