package main

// The health and metrics server: /livez and /healthz for the kubelet's probes, /metrics for
// Prometheus. It listens on the host network (--health-address), where any pod that can reach
// the node can connect, so it must not let a client hold connections, or their memory, or keep
// the kubelet's probes from being answered (a failed liveness probe restarts the driver).

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// newHealthServer serves /healthz, /livez and /metrics with a deadline on every part of a
// connection's life. It listens on the host network, where any pod that reaches the node can
// connect: a connection that sends nothing, sends slowly, reads slowly or idles between requests
// is closed, and the listener (healthListener) holds at most --health-max-connections from other
// hosts at once, so no client can make the driver hold connections, or their memory, without
// bound. The kubelet's probes and a Prometheus scrape each need one short request.
// ready is what /healthz answers (the node plugin's and the status controller's share caches);
// m nil serves no /metrics (newProbeServer).
func newHealthServer(ready func() bool, m *metrics) *http.Server {
	return &http.Server{
		Handler:           healthHandler(ready, m),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       healthIdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}
}

// newProbeServer serves /healthz and /livez alone, for the kubelet's probes, with the health
// server's deadlines, on a listener of its own (--probe-address): a client holding every
// connection the metrics port admits does not reach the probes. The status controller needs it:
// on the pod network the kubelet probes from the node, another host to the pod, which the health
// listener counts with any pod's connections. Its listener (newProbeListener) also caps each
// address, and its deadlines are shorter: where the chart's NetworkPolicy, which admits no pod
// to this port (the node, the kubelet, is always admitted), is not enforced, a pod cannot hold it
// full alone.
func newProbeServer(ready func() bool) *http.Server {
	s := newHealthServer(ready, nil)
	// A probe is one short request on a connection of its own: a connection that has not sent
	// it within a second or two is not the kubelet's.
	s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout = 2*time.Second, 2*time.Second, 5*time.Second, 2*time.Second
	return s
}

// healthIdleTimeout closes a keep-alive connection that waits this long for its next request
// (a Prometheus scrape every 30 s reconnects: the cost of one TCP handshake).
const healthIdleTimeout = 15 * time.Second

func healthHandler(ready func() bool, m *metrics) http.Handler {
	mux := http.NewServeMux()
	// Liveness: the process serves requests. Readiness (/healthz) also needs the share caches.
	// Without metrics (the probe server), /metrics is not served.
	if m != nil {
		mux.Handle("/metrics", m.handler())
	}
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "share caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// healthListener accepts every connection, and keeps at most max of those from other hosts
// open at once: one over that is closed as soon as it is accepted, never queued. A listener that
// stops accepting when full (netutil.LimitListener) would queue the kubelet's probes behind the
// silent connections of any pod, minutes at the header timeout, and the kubelet would restart a
// healthy driver. So connections from the node itself are not counted: the kubelet probes a
// host-network pod at the node's address from the node, so the remote address is the
// connection's own local address, which a pod with its own network cannot send from. (A
// host-network pod shares the node's address, and with it this exemption, as it shares the
// node's network in every other way.)
type healthListener struct {
	net.Listener
	max  int64
	open atomic.Int64
	// perAddress, when over 0, is the most connections one remote address holds at once
	// (newProbeListener); byAddress counts them.
	perAddress int
	mu         sync.Mutex
	byAddress  map[string]int
}

func newHealthListener(l net.Listener, limit int) *healthListener {
	return &healthListener{Listener: l, max: int64(limit)}
}

// probeConnsPerAddress is the most connections one address holds on the probe listener. The
// kubelet's probes each open one short connection (timeoutSeconds, 1 s by default), so a pod on
// the pod network, where no NetworkPolicy is enforced, holding this many open does not fill the
// listener's cap and keep the kubelet out: it takes as many pods of their own addresses as the
// cap divided by this. (A host-network pod shares the node's address, the kubelet's, and its
// quota with it.)
const probeConnsPerAddress = 2

// newProbeListener is the probe server's listener: the health listener's cap on all other
// hosts, and at most probeConnsPerAddress connections from any one of them.
func newProbeListener(l net.Listener, limit int) *healthListener {
	return &healthListener{Listener: l, max: int64(limit), perAddress: probeConnsPerAddress, byAddress: map[string]int{}}
}

// takeAddress counts a connection from addr, or says false when addr holds its most already.
func (l *healthListener) takeAddress(addr string) bool {
	if l.perAddress <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddress[addr] >= l.perAddress {
		return false
	}
	l.byAddress[addr]++
	return true
}

// releaseAddress gives back a connection from addr.
func (l *healthListener) releaseAddress(addr string) {
	if l.perAddress <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddress[addr]--; l.byAddress[addr] <= 0 {
		delete(l.byAddress, addr)
	}
}

func (l *healthListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if fromThisNode(c) {
			return c, nil
		}
		addr := remoteIP(c)
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			c.Close()
			continue
		}
		if !l.takeAddress(addr) {
			l.open.Add(-1)
			c.Close()
			continue
		}
		return &countedConn{Conn: c, release: func() { l.open.Add(-1); l.releaseAddress(addr) }}, nil
	}
}

// remoteIP is the address c comes from, without its port.
func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// fromThisNode says whether c comes from the address it was accepted on.
func fromThisNode(c net.Conn) bool {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	return ok1 && ok2 && local.IP.Equal(remote.IP)
}

// countedConn gives its place back once, however often it is closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
