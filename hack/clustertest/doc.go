// Package clustertest tests hack/cluster.sh's host checks without a cluster and without root: the
// script is sourced into bash with its cgroup root pointed at a fake /sys/fs/cgroup tree
// (SRCSI_CGROUP_ROOT) and every function that would touch the machine replaced by a stub.
package clustertest
