package swap

// Specification, with real pods on the real kubelet, that the driver's binary can be swapped both
// ways between this tree's release and the release of another commit of the repository
// (SWAP_FROM; `make test-swap`), the chart staying this tree's: each binary resumes the volumes
// the other published from the records it left on the node, keeps the pods' files while it is
// replaced, and then refreshes, revokes and restores them as if it had published them itself.
// Each round of pods holds three volumes: a share of a Secret with several keys; the same with
// refreshResource "false" (pinned: its copy kept through a revocation); a share whose spec.items
// exposes two of its Secret's three keys, one renamed.
//  1. The other commit's release installed (helm upgrade); a round of pods publishes through it.
//  2. helm upgrade to this tree's release while every pod reads its volume: every read sees the
//     files, the new driver resumes every volume and cleans none. A new version of every source is
//     shown in place (not by the pinned volume); a revocation empties each volume; a re-grant
//     restores it (the pinned one with what it was published with). A second round publishes.
//  3. helm upgrade back to the other commit's release: the same, for both rounds.
//  4. Every pod deleted: the other commit's driver unpublishes every volume at the kubelet's call,
//     whichever binary published it, and leaves nothing on the node.
// Not part of `make test`: it builds another commit.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podName is every consumer pod's name (each in a namespace of its own).
const podName = "app"

// shape is how a consumer's volume shows its share.
type shape struct {
	name   string
	pinned bool  // refreshResource "false"
	items  []any // the share's spec.items; nil: every key
	// view is what a pod sees of a source holding src.
	view func(src map[string][]byte) map[string][]byte
}

func everyKey(src map[string][]byte) map[string][]byte { return src }

var shapes = []shape{
	{name: "keys", view: everyKey},
	{name: "pinned", pinned: true, view: everyKey},
	{name: "items", items: framework.SharedKeys("ca.crt", "tls.key=key.pem"), view: func(src map[string][]byte) map[string][]byte {
		return map[string][]byte{"ca.crt": src["ca.crt"], "key.pem": src["tls.key"]}
	}},
}

// sourceData is a Secret's data of several keys, version in its text: a PEM block, a binary key
// (NULs, no trailing newline) and a JSON file.
func sourceData(version string) map[string][]byte {
	return map[string][]byte{
		"ca.crt":      []byte("-----BEGIN CERTIFICATE-----\n" + version + "-" + framework.RandSuffix() + "\n-----END CERTIFICATE-----\n"),
		"tls.key":     framework.PodsRandomBytes(512),
		"config.json": []byte(`{"version":"` + version + `"}`),
	}
}

// consumer is a pod reading a share through a volume of some shape.
type consumer struct {
	shape
	by        string // the release whose driver published the volume
	f         *framework.ShareFixture
	ns        string
	source    map[string][]byte // the Secret's data now
	published map[string][]byte // what the pod saw when the volume was published
	want      map[string][]byte // what the pod must see now
	revoke    func()
}

func (c *consumer) String() string {
	return fmt.Sprintf("%s volume of pod %s/%s (published by %s)", c.name, c.ns, podName, c.by)
}

func TestSwapDriverBinaries(t *testing.T) {
	rev := os.Getenv("SWAP_FROM")
	if rev == "" {
		t.Fatal("$SWAP_FROM is not set: the commit whose driver to swap with this tree's (`make test-swap SWAP_FROM=REV`)")
	}
	s := framework.PodsEnv(t, framework.PodsAlone)
	if s.Installed == nil {
		t.Fatal("the driver was not installed from the cluster's registry (hack/cluster.sh up starts one unless --no-registry): no release to swap")
	}
	t.Cleanup(func() { logDriverIfFailed(t, s) })
	current := s.Installed
	other, err := s.ReleaseRevision(rev)
	if err != nil {
		t.Fatal(err)
	}
	if other.IndexDigest == current.IndexDigest {
		t.Fatalf("%s (%s) has the image index of this tree's release %s (%s): the swap would change nothing", other.Version, rev, current.Version, current.IndexDigest)
	}

	toOther := func() error { return s.RollTo(other) }
	toCurrent := func() error { return s.RollTo(current) }

	// 1. The other commit's driver, and a round of pods published by it.
	swapTo(t, s, toOther, nil)
	first := publish(t, s, other.Version)

	// 2. This tree's driver resumes them, and publishes a second round.
	swapTo(t, s, toCurrent, first)
	exercise(t, s, first, "v2")
	second := publish(t, s, current.Version)

	// 3. Back to the other commit's driver, for both rounds.
	both := append(append([]*consumer{}, first...), second...)
	swapTo(t, s, toOther, both)
	exercise(t, s, both, "v3")
	for _, c := range both {
		s.AssertStillRunning(t, c.ns, podName)
	}

	// 4. It unpublishes every volume, whichever driver published it.
	unpublishAll(t, s, both)
}

// publish starts a pod of each shape, granted its share, and waits until each sees its files.
func publish(t *testing.T, s *framework.PodSuite, by string) []*consumer {
	t.Helper()
	start := time.Now()
	var consumers []*consumer
	for _, sh := range shapes {
		c := &consumer{shape: sh, by: by, source: sourceData("v1")}
		if sh.items != nil {
			c.f = s.NewListedShare(t, c.source, sh.items)
		} else {
			c.f = s.NewShare(t, c.source)
		}
		c.ns = s.PodNamespace(t, "swap-"+sh.name)
		s.CreateServiceAccount(t, c.ns, "app")
		c.revoke = s.Grant(t, c.ns, framework.KindSecret, c.f.Share, framework.ServiceAccount(c.ns, "app"))
		attrs := c.f.Attrs()
		if sh.pinned {
			attrs[framework.AttrRefreshResource] = "false"
		}
		s.CreatePod(t, c.ns, podName, framework.ConsumerSpec{Sa: "app", Attrs: attrs})
		c.published = sh.view(c.source)
		c.want = c.published
		consumers = append(consumers, c)
	}
	for _, c := range consumers {
		s.WaitRunning(t, c.ns, podName, 60*time.Second)
		s.WaitFiles(t, c.ns, podName, c.want, 10*time.Second)
	}
	t.Logf("%s published %d volumes (%s), pods Running and reading them %v after their creation",
		by, len(consumers), shapeNames(), time.Since(start).Round(100*time.Millisecond))
	return consumers
}

func shapeNames() string {
	var names []string
	for _, sh := range shapes {
		names = append(names, sh.name)
	}
	return strings.Join(names, ", ")
}

// swapTo rolls the driver to another release with roll (`helm upgrade`: PodSuite.RollTo) while
// every consumer's pod reads its volume again and again. Every read must see the files the pod
// must see; the new driver pod must run the release's image (pulled from the registry) and
// version, and resume every volume on the node (the consumers') and clean none.
func swapTo(t *testing.T, s *framework.PodSuite, roll func() error, consumers []*consumer) {
	t.Helper()
	ctx := context.Background()
	old, err := s.DriverPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var reads, failures int
	var firstFailure string
	go func() {
		defer close(done)
		for {
			if len(consumers) == 0 {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			for _, c := range consumers {
				select {
				case <-stop:
					return
				default:
				}
				got, err := s.PodFiles(c.ns, podName)
				if err == nil {
					err = framework.SameFiles(got, c.want)
				}
				reads++
				if err != nil {
					failures++
					if firstFailure == "" {
						firstFailure = fmt.Sprintf("%s: %v", c, err)
					}
				}
			}
		}
	}()
	start := time.Now()
	from := s.Release.Version
	err = roll()
	var pod *corev1.Pod
	if err == nil {
		pod, err = s.WaitDriver(ctx, old.UID, 2*time.Minute)
	}
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("helm upgrade from %s to %s: %v", from, s.Release.Version, err)
	}
	to := s.Release.Version
	t.Logf("helm upgrade from %s to %s: driver pod %s replaced by %s, Ready and registered %v later; %d reads of %d volumes meanwhile",
		from, to, old.Name, pod.Name, time.Since(start).Round(100*time.Millisecond), reads, len(consumers))
	if failures > 0 {
		t.Errorf("to %s: %d of %d reads of the volumes failed while the driver was replaced; first: %s", to, failures, reads, firstFailure)
	}
	if err := s.CheckPulledFromRelease(pod); err != nil {
		t.Error(err)
	}
	log := s.DriverLog(t)
	if !regexp.MustCompile(`"Starting" .*version="` + regexp.QuoteMeta(to) + `"`).MatchString(log) {
		t.Errorf("driver pod %s does not say it is %s (no \"Starting\" line with that version)", pod.Name, to)
	}
	m := regexp.MustCompile(`"Recovered volumes" resumed=(\d+) cleaned=(\d+)`).FindStringSubmatch(log)
	if m == nil || m[1] != strconv.Itoa(len(consumers)) || m[2] != "0" {
		t.Errorf("%s resumed the volumes of the other driver as %q, want resumed=%d cleaned=0", to, m, len(consumers))
	}
}

// exercise checks that the running driver refreshes, revokes and restores every consumer's
// volume: a new version of each source is shown in place by the volumes that refresh, and not by
// the pinned ones; every grant revoked, every volume is emptied; granted again, every volume
// shows what it must (a pinned one, what it was published with).
func exercise(t *testing.T, s *framework.PodSuite, consumers []*consumer, version string) {
	t.Helper()
	bound := framework.PodsRelist + framework.PodsRelistSlack
	by := s.Release.Version
	start := time.Now()
	for _, c := range consumers {
		c.source = sourceData(version)
		s.UpdateSecret(t, c.f.Platform, c.f.Secret, c.source)
		if !c.pinned {
			c.want = c.view(c.source)
		}
	}
	for _, c := range consumers {
		if !c.pinned {
			s.WaitFiles(t, c.ns, podName, c.want, bound)
		}
	}
	t.Logf("%s: every source at %s, shown in place by every refreshing volume %v later", by, version, time.Since(start).Round(100*time.Millisecond))
	// Two relist cycles more, each reading every source: the pinned volumes still show what
	// they were published with.
	s.WaitCycles(t, 2)
	for _, c := range consumers {
		if c.pinned {
			got, err := s.PodFiles(c.ns, podName)
			if err != nil {
				t.Fatal(err)
			}
			if err := framework.SameFiles(got, c.published); err != nil {
				t.Errorf("%s: %s changed a refreshResource \"false\" volume: %v", c, by, err)
			}
		}
	}

	start = time.Now()
	for _, c := range consumers {
		c.revoke()
	}
	for _, c := range consumers {
		s.WaitFiles(t, c.ns, podName, map[string][]byte{}, bound)
	}
	t.Logf("%s: every grant revoked, every volume empty %v later", by, time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	for _, c := range consumers {
		c.revoke = s.Grant(t, c.ns, framework.KindSecret, c.f.Share, framework.ServiceAccount(c.ns, "app"))
	}
	for _, c := range consumers {
		s.WaitFiles(t, c.ns, podName, c.want, bound)
	}
	t.Logf("%s: granted again, every volume restored %v later (the pinned ones as published)", by, time.Since(start).Round(100*time.Millisecond))
}

// unpublishAll deletes every consumer's pod and checks that the running driver unpublished each
// volume at the kubelet's call (NodeUnpublishVolume) and left nothing of it on the node.
func unpublishAll(t *testing.T, s *framework.PodSuite, consumers []*consumer) {
	t.Helper()
	ctx := context.Background()
	type onNode struct {
		c                     *consumer
		id, podDir, volumeDir string
		mounts                func() []string
	}
	var vols []onNode
	for _, c := range consumers {
		v := s.NodeVolume(t, s.GetPod(t, c.ns, podName))
		vols = append(vols, onNode{c: c, id: v.ID, podDir: v.PodDir, volumeDir: v.VolumeDir, mounts: v.Mounts})
	}
	start := time.Now()
	for _, c := range consumers {
		if err := s.Kube.CoreV1().Pods(c.ns).Delete(ctx, podName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range vols {
		framework.Eventually(t, 60*time.Second, func() error {
			if _, err := s.Kube.CoreV1().Pods(v.c.ns).Get(ctx, podName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: pod still there (err %v)", v.c, err)
			}
			if m := v.mounts(); len(m) > 0 {
				return fmt.Errorf("%s: mounts left: %q", v.c, m)
			}
			for _, p := range []string{v.volumeDir, v.podDir} {
				if _, err := os.Lstat(p); err == nil {
					return fmt.Errorf("%s: %s left", v.c, p)
				}
			}
			return nil
		})
	}
	log := s.DriverLog(t)
	for _, v := range vols {
		if !strings.Contains(log, `"Unpublished volume" volumeID="`+v.id+`"`) {
			t.Errorf("%s: %s's log has no NodeUnpublishVolume of %s", v.c, s.Release.Version, v.id)
		}
	}
	t.Logf("%s: every pod deleted, every volume unpublished and nothing left on the node %v later",
		s.Release.Version, time.Since(start).Round(100*time.Millisecond))
}

// logDriverIfFailed logs, once t has failed, the end of the log of the driver pod that runs now,
// and of its container's run before a restart if there was one.
func logDriverIfFailed(t *testing.T, s *framework.PodSuite) {
	if !t.Failed() {
		return
	}
	ctx := context.Background()
	pod, err := s.DriverPod(ctx)
	if err != nil {
		t.Logf("the driver pod: %v", err)
		return
	}
	for _, previous := range []bool{true, false} {
		b, err := s.Kube.CoreV1().Pods(framework.PodsDriverNS).GetLogs(pod.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
		if previous && err != nil {
			continue // no restart
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) > 400 {
			lines = lines[len(lines)-400:]
		}
		t.Logf("driver pod %s (image %s, previous run: %v), the last %d lines of its log (%v):\n%s",
			pod.Name, pod.Spec.Containers[0].Image, previous, len(lines), err, strings.Join(lines, "\n"))
	}
}
