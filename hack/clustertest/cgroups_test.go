package clustertest

// Specification of where hack/cluster.sh looks at the host's cgroups: only the phases that start
// kubelets check the host (cgroup v1, or cgroup v2 with systemd; anything else is refused, with
// what to run instead), a cluster with nodes on cgroup v2 runs in systemd's slice srcsi.slice and
// `down` stops it, and a control plane alone (`up --control-plane-only`, the API suite's and the
// benchmarks' cluster) never reads or writes a cgroup, before, during or after its run
// (TestControlPlaneOnly...).

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroups writes a fake cgroup root: "v1" (pids and memory hierarchies, a leftover kubepods
// cgroup in each) or "v2" (cgroup.controllers at the root, a kubepods.slice of some other kubelet),
// or "v2-nopids" (v2 without the pids controller).
func fakeCgroups(t *testing.T, version string) string {
	t.Helper()
	root := t.TempDir()
	var dirs []string
	switch version {
	case "v1":
		dirs = []string{"pids/kubepods/pod1", "memory/kubepods/pod1"}
	case "v2", "v2-nopids":
		dirs = []string{"kubepods.slice/kubepods-besteffort.slice"}
		controllers := "cpuset cpu io memory hugetlb pids rdma misc\n"
		if version == "v2-nopids" {
			controllers = "cpuset cpu io memory hugetlb rdma misc\n"
		}
		if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte(controllers), 0o644); err != nil {
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
// cgroup functions are wrapped (recorded, then run against the fake tree), and so are the node's
// daemons' (they write their configuration under the test's cluster dir, and start through the
// nsenter stand-in on PATH, which only logs).
const stubs = `
record() { echo "$1" >>"$CALLS"; }
for f in lock teardown setup_netns setup_mntns write_configs write_nodes start_control_plane \
	start_controller_manager start_scheduler start_registry build_images import_image \
	write_env wait_for kill_wait harness_pids; do
	eval "$f() { record $f; }"
done
for f in check_cgroups setup_cgroups pod_pids remove_cgroups start_containerd start_kubelet; do
	eval "$(declare -f "$f" | sed "1s/^$f /real_$f /")"
	eval "$f() { record $f; real_$f \"\$@\"; }"
done
`

// host is what a test's machine has besides its cgroups: systemd as its init system, and on PATH
// stand-ins for systemd's commands (systemd-run, systemctl) and nsenter that log their arguments
// to $TMP/COMMAND.log; systemctl stop also removes the stopped slice from the fake cgroup root.
type host struct{ systemd bool }

// run sources hack/cluster.sh with the cgroup root CGROOT and the cluster dir CL, stubs the
// machine away, runs script, and returns its output and the functions it called.
func run(t *testing.T, cgroot, script string) (string, []string, error) {
	return runOn(t, host{}, cgroot, script)
}

func runOn(t *testing.T, h host, cgroot, script string) (string, []string, error) {
	t.Helper()
	tmp := t.TempDir()
	path := filepath.Join(tmp, "path")
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	systemdDir := filepath.Join(tmp, "no-systemd")
	if h.systemd {
		systemdDir = filepath.Join(tmp, "run-systemd-system")
		if err := os.MkdirAll(systemdDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{
			"systemd-run": `echo "$*" >>"$TMP/systemd-run.log"`,
			"systemctl":   `echo "$*" >>"$TMP/systemctl.log"; if [ "$1" = stop ]; then rm -rf "$SRCSI_CGROUP_ROOT/$2"; fi`,
		} {
			if err := os.WriteFile(filepath.Join(path, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(path, "nsenter"), []byte("#!/bin/sh\necho \"$*\" >>\"$TMP/nsenter.log\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(tmp, "calls")
	kbin := filepath.Join(tmp, "bin", "k8s")
	if err := os.MkdirAll(kbin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "bin", "cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"bin/k8s/etcd", "bin/k8s/kube-apiserver", "bin/k8s/kube-controller-manager", "bin/k8s/kubectl", "bin/k8s/kubelet", "bin/k8s/kube-scheduler",
		"bin/containerd", "bin/containerd-shim-runc-v2", "bin/ctr", "bin/runc", "bin/mkimage", "bin/pause", "bin/cni/bridge"} {
		if err := os.WriteFile(filepath.Join(tmp, b), []byte("#!/bin/sh\necho fake v0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	full := `set -euo pipefail
source ../cluster.sh
` + stubs + `
CL=$TMP/cluster; CTRD=$CL/containerd; LOGS=$CL/logs; PIDS=$CL/pids; BIN=$TMP/bin; KBIN=$TMP/bin/k8s; KUBELET_ROOT=$TMP/kubelet
mkdir -p "$CL"
` + script
	cmd := exec.Command("bash", "-c", full)
	cmd.Env = append(os.Environ(), "SRCSI_CGROUP_ROOT="+cgroot, "SRCSI_SYSTEMD_DIR="+systemdDir, "CALLS="+calls,
		"TMP="+tmp, "KUBE_VERSION=", "PATH="+path+":"+os.Getenv("PATH"))
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

func TestCheckCgroupsAcceptsV1AndV2WithSystemdAndRefusesTheRestWithWhatToRunInstead(t *testing.T) {
	for _, c := range []struct {
		name    string
		version string
		host    host
		refusal []string // empty: accepted
	}{
		{"v1", "v1", host{}, nil},
		{"v1 with systemd", "v1", host{systemd: true}, nil},
		{"v2 with systemd", "v2", host{systemd: true}, nil},
		{"v2 without systemd", "v2", host{}, []string{"cgroup v2", "systemd", "make test-api"}},
		{"v2 without the pids controller", "v2-nopids", host{systemd: true}, []string{"controllers pids"}},
		{"no cgroups", "none", host{systemd: true}, []string{"no cgroups", "make test-api"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := runOn(t, c.host, fakeCgroups(t, c.version), "check_cgroups")
			if c.refusal == nil {
				if err != nil {
					t.Fatalf("check_cgroups refused: %v: %s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("check_cgroups passed: %s", out)
			}
			for _, want := range c.refusal {
				if !strings.Contains(out, want) {
					t.Errorf("the refusal does not say %q: %s", want, out)
				}
			}
		})
	}
}

func TestFullUpChecksTheHostFirst(t *testing.T) {
	out, calls, err := run(t, fakeCgroups(t, "v2"), "cmd_up")
	if err == nil || !strings.Contains(out, "systemd") {
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

// upAndShow is a script: a full `up`, then what it wrote for node 1's kubelet and containerd, and
// how their daemons were started (the nsenter stand-in's log).
const upAndShow = `cmd_up --no-registry
wait
echo "driver: $(cat "$CL/cgroup-driver" 2>/dev/null || echo none)"
cat "$CL/kubelet-config.yaml" "$CL/containerd/config.toml" "$TMP/nsenter.log"`

func TestNodesOnCgroupV1UseCgroupfs(t *testing.T) {
	out, _, err := run(t, fakeCgroups(t, "v1"), upAndShow)
	if err != nil {
		t.Fatalf("up on a cgroup v1 host: %v: %s", err, out)
	}
	for _, want := range []string{"driver: none", "cgroupDriver: cgroupfs", `cgroupRoot: "/"`, "failCgroupV1: false", "SystemdCgroup = false"} {
		if !strings.Contains(out, want) {
			t.Errorf("up on cgroup v1 did not write %q: %s", want, out)
		}
	}
	if strings.Contains(out, "systemd-run") {
		t.Errorf("up on cgroup v1 started a daemon through systemd-run: %s", out)
	}
}

func TestNodesOnCgroupV2RunInSystemdSlices(t *testing.T) {
	root := fakeCgroups(t, "v2")
	// What systemd makes when node 1's containerd starts in its scope: the node's slice in the
	// cluster's (enable_controllers writes to their cgroup.subtree_control).
	if err := os.MkdirAll(filepath.Join(root, "srcsi.slice/srcsi-node1.slice"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _, err := runOn(t, host{systemd: true}, root, upAndShow)
	if err != nil {
		t.Fatalf("up on a cgroup v2 host with systemd: %v: %s", err, out)
	}
	for _, want := range []string{
		"driver: systemd",
		"cgroupDriver: systemd",
		`cgroupRoot: "/srcsi/node1"`, // the systemd driver's /srcsi.slice/srcsi-node1.slice
		"SystemdCgroup = true",
		"setsid systemd-run --scope --quiet --collect --unit srcsi-containerd-",
		"--slice srcsi-node1.slice -- env PATH=",
		"setsid systemd-run --scope --quiet --collect --unit srcsi-kubelet-",
		"--slice srcsi-node1.slice -- " + "/",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("up on cgroup v2 did not write %q: %s", want, out)
		}
	}
	// The kubelet refuses a cgroupRoot without its controllers: enabled down to the node's slice.
	for _, d := range []string{"", "srcsi.slice", "srcsi.slice/srcsi-node1.slice"} {
		if _, err := os.Stat(filepath.Join(root, d, "cgroup.subtree_control")); err != nil {
			t.Errorf("no controllers enabled in %q: %v", d, err)
		}
	}
}

func TestDownAfterNodesOnCgroupV2StopsTheirSlice(t *testing.T) {
	root := fakeCgroups(t, "v2")
	if err := os.MkdirAll(filepath.Join(root, "srcsi.slice/srcsi-node1.slice/srcsi-node1-kubepods.slice"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, calls, err := runOn(t, host{systemd: true}, root, `echo full >"$CL/mode"; echo systemd >"$CL/cgroup-driver"
stop_processes
if nodes_ran; then remove_cgroups; fi
cat "$TMP/systemctl.log"`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !called(calls, "pod_pids") || !called(calls, "remove_cgroups") || !strings.Contains(out, "stop srcsi.slice") {
		t.Errorf("after a run with nodes on cgroup v2, down must kill their pods and stop their slice; called %v: %s", calls, out)
	}
	if _, err := os.Stat(filepath.Join(root, "srcsi.slice")); !os.IsNotExist(err) {
		t.Errorf("the cluster's slice is left: %v", err)
	}
	// Another kubelet's cgroups are where they were.
	if _, err := os.Stat(filepath.Join(root, "kubepods.slice/kubepods-besteffort.slice")); err != nil {
		t.Error(err)
	}
}

// A node's daemons started again (node-start after node-kill) get scopes of new names: the killed
// containerd's shims keep its scope, and systemd refuses a second unit of one name.
func TestDaemonsStartedAgainGetScopesOfTheirOwn(t *testing.T) {
	out, _, err := runOn(t, host{systemd: true}, fakeCgroups(t, "v2"), `echo systemd >"$CL/cgroup-driver"
mkdir -p "$PIDS" "$LOGS"
start_on 1 containerd /bin/true
start_on 1 containerd /bin/true
wait
grep -o -- '--unit [^ ]*' "$TMP/nsenter.log"`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	units := strings.Fields(strings.ReplaceAll(out, "--unit", ""))
	if len(units) != 2 || units[0] == units[1] || !strings.HasPrefix(units[0], "srcsi-containerd-") {
		t.Errorf("two starts of containerd named the scopes %q, want two different srcsi-containerd-* names", units)
	}
}
