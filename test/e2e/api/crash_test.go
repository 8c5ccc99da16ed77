package api

// Specification of crash recovery: the driver is SIGKILLed at every step of publish, unpublish,
// revoke and restore (the crash points of its test build, internal/crashpoint, armed by
// SRCSI_TEST_CRASH_AT), restarted, and the kubelet's retries are replayed. After each: no leaked
// mount, dir or record, and every published volume is intact and still revoked and refreshed.
// Also: corrupt records and a wiped state dir, and no crash point in the production binary.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// crashedCall checks that a call interrupted by the crash point failed the way a kubelet sees a
// dead plugin (the transport broke), and that the driver died by SIGKILL.
func crashedCall(t *testing.T, p *framework.DriverProc, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("the call succeeded although the driver was to crash during it")
	}
	if c := status.Code(err); c != codes.Unavailable && c != codes.Internal && c != codes.Canceled {
		t.Fatalf("interrupted call: %v", err)
	}
	p.WaitKilled()
}

// crashDuringPublish starts a driver armed to crash at step, publishes a volume of a granted
// share into the crash, and starts the driver again, disarmed.
func crashDuringPublish(t *testing.T, e *framework.KubeEnv, step framework.CrashStep) (*framework.DriverProc, *sharedSecretFixture, *framework.TestVolume) {
	t.Helper()
	p := e.StartDriver(t, framework.WithCrashAt(step))
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	crashedCall(t, p, p.Publish(v))
	p.Disarm()
	p.Start()
	return p, f, v
}

func TestCrashDuringPublishThenKubeletRetries(t *testing.T) {
	e := framework.E2e(t)
	for _, step := range framework.PublishSteps {
		t.Run(string(step), func(t *testing.T) {
			p, f, v := crashDuringPublish(t, e, step)
			// The kubelet retries a publish that did not answer.
			if err := p.Publish(v); err != nil {
				t.Fatalf("retried publish: %v", err)
			}
			if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
				t.Fatal(err)
			}
			if n := len(framework.MountsUnder(filepath.Dir(v.Target))); n != 1 {
				t.Fatalf("%d mounts at the target, want 1", n)
			}
			if n := len(framework.MountsUnder(filepath.Join(p.KubeletRoot, "plugins"))); n != 1 {
				t.Fatalf("%d tmpfs mounts in the state dir, want 1", n)
			}
			// The recovered volume is still refreshed.
			rotated := map[string][]byte{"ca.crt": p.Secret("rotated")}
			e.UpdateSecret(t, f.platform, "ca-bundle", rotated)
			framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(rotated)) })
			p.UnpublishAll(t, v)
		})
	}
}

func TestCrashDuringPublishThenPodDeleted(t *testing.T) {
	e := framework.E2e(t)
	for _, step := range framework.PublishSteps {
		t.Run(string(step), func(t *testing.T) {
			p, _, v := crashDuringPublish(t, e, step)
			// The pod was deleted: the kubelet unpublishes the uncertain mount instead of retrying.
			if err := p.Unpublish(v); err != nil {
				t.Fatalf("unpublish: %v", err)
			}
			p.AssertNothingLeft(t, v)
		})
	}
}

func TestCrashDuringUnpublishThenKubeletRetries(t *testing.T) {
	e := framework.E2e(t)
	for _, step := range framework.UnpublishSteps {
		t.Run(string(step), func(t *testing.T) {
			p := e.StartDriver(t)
			_, v := publishedVolume(t, e, p)
			p.RestartArmed(step)
			crashedCall(t, p, p.Unpublish(v))
			p.Disarm()
			p.Start()
			if err := p.Unpublish(v); err != nil {
				t.Fatalf("retried unpublish: %v", err)
			}
			p.AssertNothingLeft(t, v)
		})
	}
}

func TestCrashDuringRevokeAndRestoreKeepsPinnedData(t *testing.T) {
	e := framework.E2e(t)
	for _, phase := range []string{"revoke", "restore"} {
		for _, step := range framework.ReconcileSteps {
			t.Run(phase+"/"+string(step), func(t *testing.T) {
				p := e.StartDriver(t)
				f := newSharedSecret(t, e, p, true)
				// refreshResource=false: its data must come back exactly as published, so a
				// crash mid-revoke or mid-restore must not lose it.
				v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share, framework.AttrRefreshResource: "false"})
				if err := p.Publish(v); err != nil {
					t.Fatal(err)
				}
				if phase == "restore" {
					f.revoke()
					framework.Eventually(t, relist+relistSlack, func() error { return emptyVolume(t, v) })
				}
				p.RestartArmed(step)
				if phase == "revoke" {
					f.revoke()
				} else {
					f.revoke = e.Grant(t, f.consumer, framework.KindSecret, f.share, framework.ServiceAccount(f.consumer, "app"))
				}
				p.WaitKilled()
				p.Disarm()
				p.Start()
				if phase == "revoke" {
					framework.Eventually(t, relist+relistSlack, func() error { return emptyVolume(t, v) })
					e.Grant(t, f.consumer, framework.KindSecret, f.share, framework.ServiceAccount(f.consumer, "app"))
				}
				framework.Eventually(t, relist+relistSlack, func() error { return framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)) })
				p.UnpublishAll(t, v)
			})
		}
	}
}

func emptyVolume(t *testing.T, v *framework.TestVolume) error {
	if files := framework.ReadVolume(t, v.Target); len(files) != 0 {
		return fmt.Errorf("%d files still visible", len(files))
	}
	return nil
}

func TestCorruptRecordIsCleanedAndTheDriverServes(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	other := p.Volume(f.consumer, "app", map[string]string{framework.AttrSharedSecret: f.share})
	for _, vol := range []*framework.TestVolume{v, other} {
		if err := p.Publish(vol); err != nil {
			t.Fatal(err)
		}
	}
	p.Kill()
	rec := filepath.Join(p.KubeletRoot, "plugins", framework.DriverName, "volumes", v.ID, framework.RecordFile)
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, b[:len(b)/2], 0o600); err != nil { // truncated
		t.Fatal(err)
	}
	p.Start()
	// The broken volume was cleaned (its bind, its tmpfs and its dir are gone), the whole one
	// is untouched.
	if n := len(framework.MountsUnder(filepath.Dir(v.Target))); n != 0 {
		t.Errorf("%d mounts left at the corrupt volume's target", n)
	}
	volDir := filepath.Join(p.KubeletRoot, "plugins", framework.DriverName, "volumes", v.ID)
	mounts, err := framework.ReadMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := framework.MountAt(mounts, volDir); ok {
		t.Errorf("the corrupt volume's tmpfs is still mounted: %+v", m)
	}
	if _, err := os.Lstat(volDir); err == nil {
		t.Errorf("the corrupt volume's dir %s is left", volDir)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, other.Target), asStrings(f.data)); err != nil {
		t.Fatalf("the intact volume: %v", err)
	}
	log, _ := os.ReadFile(p.LogPath)
	if !strings.Contains(string(log), "corrupt record") {
		t.Error("the driver did not log the corrupt record")
	}
	// The kubelet's next publish of the broken volume works again.
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish after corruption: %v", err)
	}
	p.UnpublishAll(t, v, other)
}

func TestWipedStateDirIsReportedAndCleaned(t *testing.T) {
	e := framework.E2e(t)
	p := e.StartDriver(t)
	f, v := publishedVolume(t, e, p)
	p.Kill()
	// A host tmp cleaner's rm -rf: it empties the tmpfs (mount points themselves are busy).
	volDir := filepath.Join(p.KubeletRoot, "plugins", framework.DriverName, "volumes", v.ID)
	entries, _ := os.ReadDir(volDir)
	for _, en := range entries {
		os.RemoveAll(filepath.Join(volDir, en.Name()))
	}
	p.Start()
	log, _ := os.ReadFile(p.LogPath)
	if !strings.Contains(string(log), "record unusable") {
		t.Error("the driver did not report the lost record")
	}
	if n := len(framework.MountsUnder(p.KubeletRoot)); n != 0 {
		t.Errorf("%d mounts left after cleaning the wiped volume", n)
	}
	// Retried by the kubelet, the volume is published anew.
	if err := p.Publish(v); err != nil {
		t.Fatalf("publish after the wipe: %v", err)
	}
	if err := framework.SameFiles(framework.ReadVolume(t, v.Target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}
	p.UnpublishAll(t, v)
}

// The production binary carries no crash point: nothing of the test hook is compiled in, so no
// environment can make it kill itself. The test build does carry it (or this could not fail).
func TestProductionBinaryHasNoCrashPoints(t *testing.T) {
	e := framework.E2e(t)
	for _, c := range []struct {
		binary string
		want   bool
	}{{e.Binary, false}, {e.CrashBinary(t), true}} {
		b, err := os.ReadFile(c.binary)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte(framework.CrashEnv)); got != c.want {
			t.Errorf("%s mentions %s: %v, want %v", c.binary, framework.CrashEnv, got, c.want)
		}
	}
}
