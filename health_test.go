package main

// Specification of the health server's listener (health.go): connections from other hosts are
// capped and the one over the cap is closed at once, never queued; connections from the node's
// own address (the kubelet's probes) are answered however many others are held open.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestHealthListenerCapsOthersButNeverTheNode(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }),
		ReadHeaderTimeout: time.Minute, // the silent connections below stay open for the whole test
	}
	capped := newHealthListener(lis, 2)
	go func() { _ = srv.Serve(capped) }() // ErrServerClosed when the test closes it
	defer srv.Close()
	addr := lis.Addr().String()
	// Another host: 127.0.0.2, which reaches 127.0.0.1 but is not the address the server was
	// reached at.
	other := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: time.Second}
	node := &net.Dialer{Timeout: time.Second}
	get := func(d *net.Dialer) (string, error) {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: driver\r\nConnection: close\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		return resp.Status, nil
	}
	if status, err := get(other); err != nil || status != "200 OK" {
		t.Fatalf("a request from another host: %q %v", status, err)
	}

	// The server closes its side of that request's connection a moment after the response
	// (under load, later than the client sees it): wait until its place is given back.
	waitOpen := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); capped.open.Load() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections from other hosts counted, want %d", capped.open.Load(), want)
			}
		}
	}
	waitOpen(0)
	// Two silent connections from another host fill the cap.
	var silent []net.Conn
	for range 2 {
		c, err := other.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	waitOpen(2) // accepted and counted
	// The next one from another host is closed at once.
	c, err := other.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection over the cap: read %v, want EOF (closed by the server at once)", err)
	}
	c.Close()
	// The node itself is answered, however many others are held.
	for i := range 5 {
		if status, err := get(node); err != nil || status != "200 OK" {
			t.Errorf("probe %d from the node's own address while the cap is full: %q %v", i, status, err)
		}
	}
	// A silent connection closed gives its place back.
	silent[0].Close()
	var status string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if status, err = get(other); err == nil && status == "200 OK" {
			break
		}
	}
	if status != "200 OK" {
		t.Errorf("after a silent connection closed, a request from another host: %q %v", status, err)
	}
}

// The probe listener caps each address too: one host holding its most connections open does not
// fill the listener, and another address (the kubelet's, from the node) is still answered.
func TestProbeListenerCapsEachAddress(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newProbeServer(func() bool { return true })
	srv.ReadHeaderTimeout = time.Minute // the silent connections below stay open for the whole test
	probes := newProbeListener(lis, 32)
	go func() { _ = srv.Serve(probes) }()
	defer srv.Close()
	addr := lis.Addr().String()
	from := func(ip string) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
	}
	// A pod holds connections open from its address: the cap per address admits only some.
	var accepted int
	for range 10 {
		c, err := from("127.0.0.2").Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			accepted++ // held open: the read timed out
		}
	}
	if accepted != probeConnsPerAddress {
		t.Errorf("one address holds %d silent connections, want %d", accepted, probeConnsPerAddress)
	}
	// Another address is answered.
	c, err := from("127.0.0.3").Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: driver\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a probe from another address while one holds its most: %v %v", resp, err)
	}
	resp.Body.Close()
}
