package clustertest

// Specification of where hack/cluster.sh looks at the host's cgroups: only the phases that start
// kubelets check the host (a cgroup v2 host is refused there, with what to run instead), and a
// control plane alone (`up --control-plane-only`, the API suite's and the benchmarks' cluster)
// never reads or writes a cgroup, before, during or after its run (TestControlPlaneOnly...).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroups writes a fake cgroup root: "v1" (pids and memory hierarchies, a leftover kubepods
// cgroup in each) or "v2" (cgroup.controllers at the root, a kubepods.slice of some other kubelet).
func fakeCgroups(t *testing.T, version string) string {
	t.Helper()
	root := t.TempDir()
	var dirs []string
	switch version {
	case "v1":
		dirs = []string{"pids/kubepods/pod1", "memory/kubepods/pod1"}
	case "v2":
		dirs = []string{"kubepods.slice/kubepods-besteffort.slice"}
		if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The functions that would touch the machine, replaced: each records its name in $CALLS. The
// cgroup functions are wrapped (recorded, then run against the fake tree).
const stubs = `
record() { echo "$1" >>"$CALLS"; }
for f in lock teardown setup_netns setup_mntns write_configs write_nodes start_control_plane \
	start_scheduler start_registry start_containerd build_images import_image start_kubelet \
	write_env wait_for kill_wait harness_pids; do
	eval "$f() { record $f; }"
done
for f in check_cgroups setup_cgroups pod_pids remove_cgroups; do
	eval "$(declare -f "$f" | sed "1s/^$f /real_$f /")"
	eval "$f() { record $f; real_$f \"\$@\"; }"
done
`

// run sources hack/cluster.sh with the cgroup root CGROOT and the cluster dir CL, stubs the
// machine away, runs script, and returns its output and the functions it called.
func run(t *testing.T, cgroot, script string) (string, []string, error) {
	t.Helper()
	tmp := t.TempDir()
	calls := filepath.Join(tmp, "calls")
	kbin := filepath.Join(tmp, "bin", "k8s")
	if err := os.MkdirAll(kbin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"bin/k8s/etcd", "bin/k8s/kube-apiserver", "bin/k8s/kube-controller-manager", "bin/k8s/kubectl", "bin/k8s/kubelet", "bin/k8s/kube-scheduler", "bin/containerd"} {
		if err := os.WriteFile(filepath.Join(tmp, b), []byte("#!/bin/sh\necho fake v0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	full := `set -euo pipefail
source ../cluster.sh
` + stubs + `
CL=$TMP/cluster; CTRD=$CL/containerd; LOGS=$CL/logs; PIDS=$CL/pids; BIN=$TMP/bin; KBIN=$TMP/bin/k8s
mkdir -p "$CL"
` + script
	cmd := exec.Command("bash", "-c", full)
	cmd.Env = append(os.Environ(), "SRCSI_CGROUP_ROOT="+cgroot, "CALLS="+calls, "TMP="+tmp, "KUBE_VERSION=")
	out, err := cmd.CombinedOutput()
	b, _ := os.ReadFile(calls)
	return string(out), strings.Fields(string(b)), err
}

func called(calls []string, name string) bool {
	for _, c := range calls {
		if c == name {
			return true
		}
	}
	return false
}

func TestCheckCgroupsRefusesCgroupV2WithWhatToRunInstead(t *testing.T) {
	out, _, err := run(t, fakeCgroups(t, "v2"), "check_cgroups")
	if err == nil {
		t.Fatalf("check_cgroups passed a cgroup v2 host: %s", out)
	}
	for _, want := range []string{"cgroup v2", "make test-api", "make e2e-kind"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q: %s", want, out)
		}
	}
	if out, _, err := run(t, fakeCgroups(t, "none"), "check_cgroups"); err == nil || !strings.Contains(out, "no cgroup v1 pids and memory") {
		t.Errorf("check_cgroups on a host without cgroup v1 hierarchies: err %v, output %s", err, out)
	}
	if out, _, err := run(t, fakeCgroups(t, "v1"), "check_cgroups"); err != nil {
		t.Errorf("check_cgroups refused a cgroup v1 host: %v: %s", err, out)
	}
}

func TestFullUpChecksTheHostFirst(t *testing.T) {
	out, calls, err := run(t, fakeCgroups(t, "v2"), "cmd_up")
	if err == nil || !strings.Contains(out, "cgroup v2") {
		t.Fatalf("up (with nodes) on a cgroup v2 host: err %v, output %s", err, out)
	}
	if !called(calls, "check_cgroups") || called(calls, "start_control_plane") {
		t.Errorf("up with nodes must check the host before starting anything; called %v", calls)
	}
}

func TestControlPlaneOnlyNeverTouchesCgroups(t *testing.T) {
	for _, version := range []string{"v1", "v2", "none"} {
		t.Run(version, func(t *testing.T) {
			root := fakeCgroups(t, version)
			out, calls, err := run(t, root, `cmd_up --control-plane-only
cat "$CL/mode"
# What runs after: down (its teardown's cgroup part), and the next up's.
stop_processes
nodes_ran && remove_cgroups || true`)
			if err != nil {
				t.Fatalf("up --control-plane-only on a %s host: %v: %s", version, err, out)
			}
			if !strings.Contains(out, "control-plane-only") {
				t.Errorf("up did not record its mode in $CL/mode: %s", out)
			}
			for _, f := range []string{"check_cgroups", "setup_cgroups", "pod_pids", "remove_cgroups"} {
				if called(calls, f) {
					t.Errorf("the control-plane-only path called %s: %v", f, calls)
				}
			}
			if !called(calls, "start_control_plane") || called(calls, "start_kubelet") {
				t.Errorf("calls %v, want the control plane and no kubelet", calls)
			}
			// The other kubelet's cgroups are where they were.
			if version == "v2" {
				if _, err := os.Stat(filepath.Join(root, "kubepods.slice/kubepods-besteffort.slice")); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestDownAfterNodesCleansTheirCgroups(t *testing.T) {
	root := fakeCgroups(t, "v1")
	out, calls, err := run(t, root, `echo full >"$CL/mode"
stop_processes
if nodes_ran; then remove_cgroups; fi`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !called(calls, "pod_pids") || !called(calls, "remove_cgroups") {
		t.Errorf("after a run with nodes, down must kill their pods and remove their cgroups; called %v", calls)
	}
	if _, err := os.Stat(filepath.Join(root, "pids/kubepods")); !os.IsNotExist(err) {
		t.Errorf("the nodes' kubepods cgroup is left: %v", err)
	}
	// A node of a harness from before $CL/mode: its containerd directory says nodes ran.
	_, calls, err = run(t, fakeCgroups(t, "v1"), `mkdir -p "$CTRD"; nodes_ran && remove_cgroups`)
	if err != nil || !called(calls, "remove_cgroups") {
		t.Errorf("a containerd directory without a mode file: err %v, calls %v", err, calls)
	}
}
