package main

// The process's role (--role): one binary and one image, run under two identities.
//
//   - node: the CSI node plugin, one per node (the DaemonSet). It mounts shares into pods and
//     reads shares and their status; it never writes them. Its service account has no update on
//     sharedsecrets/status or sharedconfigmaps/status and no Lease.
//   - status: the status controller (a Deployment with a ServiceAccount of its own), the only
//     writer of the shares' status: the Ready condition, status.exposedKeys and the first pin
//     (status.sourceUID, internal/share/pin.go), which every node trusts and the admission policy does not
//     check. Were status written by a node, whoever takes any node could hold the status Lease
//     for good, pin a share to the source of their choice, and put text (commands for admins to
//     run) in Ready messages. Its replicas elect one writer through the Lease, so the surge of a
//     rollout never has two.

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/sharestatus"
	"github.com/shared-resource/csi-driver/internal/sourceaccess"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The values of --role.
const (
	roleNode   = "node"
	roleStatus = "status"
)

// checkRole refuses a --role that does not exist and a status controller without a Lease
// namespace.
func checkRole(o *options) error {
	switch o.role {
	case roleNode:
		return nil
	case roleStatus:
		if o.statusLeaseNS == "" {
			return fmt.Errorf("--role=status needs --status-lease-namespace: the namespace of the Lease through which the status controller's replicas elect the one that writes (the chart sets its own namespace)")
		}
		return nil
	default:
		return fmt.Errorf("--role %q is not a role: %q (the CSI node plugin, the DaemonSet) or %q (the controller writing the shares' status, the Deployment)", o.role, roleNode, roleStatus)
	}
}

// nodeRoleIgnored lists what the node plugin ignores of the options, for a warning: the status
// flags that deploy.yaml and the chart gave every node before the status controller existed (an
// upgraded image under an older manifest). The node plugin never writes status, and an error
// here would take every node's mounts down over a flag that no longer does anything.
func nodeRoleIgnored(o *options) []string {
	if o.role == roleNode && o.statusLeaseNS != "" {
		return []string{"--status-lease-namespace"}
	}
	return nil
}

// runStatusController is --role=status: it serves /healthz, /livez and /metrics, runs the share
// informers and, while its replica holds the Lease, writes the shares' status, until ctx ends or
// a server fails. On return the Lease has been released.
func runStatusController(ctx context.Context, o *options) error {
	account, err := sourceaccess.ParseDriverAccount(o.serviceAccount)
	if err != nil {
		return err
	}
	// In a pod the host name is the pod's name: `kubectl get lease` names the replica that writes.
	holder, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("the status controller names itself by its host name: %w", err)
	}
	klog.InfoS("Starting the share status controller", "version", version, "pod", holder)
	m := newMetrics()
	kube, err := newKube(o, m)
	if err != nil {
		return err
	}
	// No reaction of its own to share events: the status writer registers its handlers for as
	// long as it leads.
	shares := share.NewStatusIndex(kube.Dyn)

	errs := make(chan error, 3)
	if o.healthAddr != "" {
		lis, err := net.Listen("tcp", o.healthAddr)
		if err != nil {
			return fmt.Errorf("listening on --health-address %s: %w", o.healthAddr, err)
		}
		hs := newHealthServer(shares.Synced, m)
		go func() { errs <- hs.Serve(newHealthListener(lis, o.healthMaxConns)) }()
		defer hs.Close()
	}
	// Its probes on a port of their own (the chart sets --probe-address): on the pod network
	// the kubelet's connections are another host's, which --health-address counts with any
	// pod's, so a pod holding that port's connections would fail the liveness probe.
	if o.probeAddr != "" {
		lis, err := net.Listen("tcp", o.probeAddr)
		if err != nil {
			return fmt.Errorf("listening on --probe-address %s: %w", o.probeAddr, err)
		}
		ps := newProbeServer(shares.Synced)
		go func() { errs <- ps.Serve(newProbeListener(lis, o.healthMaxConns)) }()
		defer ps.Close()
	}
	shares.Start(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), shares.Synced) {
		return nil // stopped before the caches synced
	}
	klog.InfoS("Share caches synced")

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sharestatus.Run(wctx, sharestatus.Config{
			Leases: kube.Coord, Dyn: kube.Dyn, Meta: kube.Meta, Sources: kube.getSource, Shares: shares,
			Holder: holder, LeaseNamespace: o.statusLeaseNS, LeaseDuration: o.statusLease, Interval: o.relistInterval, Account: account,
		}); err != nil {
			errs <- err
		}
	}()
	// On return, the writer stops and releases the Lease (so another replica takes over at once).
	defer func() { cancel(); <-done }()
	select {
	case <-ctx.Done():
		klog.InfoS("Shutting down the share status controller")
		return nil
	case err := <-errs:
		return err
	}
}
