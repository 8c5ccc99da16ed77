//go:build integration

package main

// Specification of crash recovery: the driver is SIGKILLed at every step of publish, unpublish,
// revoke and restore (the crash points of its test build, crashsteps.go, armed by
// SRCSI_TEST_CRASH_AT), restarted, and the kubelet's retries are replayed. After each: no leaked
// mount, dir or record, and every published volume is intact and still revoked and refreshed.
// Also: corrupt records and a wiped state dir, and no crash point in the production binary.

import (
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
func crashedCall(t *testing.T, p *driverProc, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("the call succeeded although the driver was to crash during it")
	}
	if c := status.Code(err); c != codes.Unavailable && c != codes.Internal && c != codes.Canceled {
		t.Fatalf("interrupted call: %v", err)
	}
	p.waitKilled()
}

// crashDuringPublish starts a driver armed to crash at step, publishes a volume of a granted
// share into the crash, and starts the driver again, disarmed.
func crashDuringPublish(t *testing.T, e *kubeEnv, step crashStep) (*driverProc, *sharedSecretFixture, *testVolume) {
	t.Helper()
	p := e.startDriver(t, withCrashAt(step))
	f := newSharedSecret(t, e, p, true)
	v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
	crashedCall(t, p, p.publish(v))
	p.disarm()
	p.start()
	return p, f, v
}

// restartArmed kills the driver and starts it again armed to crash at step.
func (p *driverProc) restartArmed(step crashStep) {
	p.kill()
	p.binary = p.kube.crashBinary(p.t)
	p.env = []string{crashEnv + "=" + string(step)}
	p.start()
}

func TestCrashDuringPublishThenKubeletRetries(t *testing.T) {
	e := e2e(t)
	for _, step := range publishSteps {
		t.Run(string(step), func(t *testing.T) {
			p, f, v := crashDuringPublish(t, e, step)
			// The kubelet retries a publish that did not answer.
			if err := p.publish(v); err != nil {
				t.Fatalf("retried publish: %v", err)
			}
			if err := sameFiles(readVolume(t, v.target), asStrings(f.data)); err != nil {
				t.Fatal(err)
			}
			if n := len(mountsUnder(filepath.Dir(v.target))); n != 1 {
				t.Fatalf("%d mounts at the target, want 1", n)
			}
			if n := len(mountsUnder(filepath.Join(p.kubeletRoot, "plugins"))); n != 1 {
				t.Fatalf("%d tmpfs mounts in the state dir, want 1", n)
			}
			// The recovered volume is still refreshed.
			rotated := map[string][]byte{"ca.crt": p.secret("rotated")}
			e.updateSecret(t, f.platform, "ca-bundle", rotated)
			eventually(t, relist+relistSlack, func() error { return sameFiles(readVolume(t, v.target), asStrings(rotated)) })
			p.unpublishAll(t, v)
		})
	}
}

func TestCrashDuringPublishThenPodDeleted(t *testing.T) {
	e := e2e(t)
	for _, step := range publishSteps {
		t.Run(string(step), func(t *testing.T) {
			p, _, v := crashDuringPublish(t, e, step)
			// The pod was deleted: the kubelet unpublishes the uncertain mount instead of retrying.
			if err := p.unpublish(v); err != nil {
				t.Fatalf("unpublish: %v", err)
			}
			p.assertNothingLeft(t, v)
		})
	}
}

func TestCrashDuringUnpublishThenKubeletRetries(t *testing.T) {
	e := e2e(t)
	for _, step := range unpublishSteps {
		t.Run(string(step), func(t *testing.T) {
			p := e.startDriver(t)
			_, v := publishedVolume(t, e, p)
			p.restartArmed(step)
			crashedCall(t, p, p.unpublish(v))
			p.disarm()
			p.start()
			if err := p.unpublish(v); err != nil {
				t.Fatalf("retried unpublish: %v", err)
			}
			p.assertNothingLeft(t, v)
		})
	}
}

func TestCrashDuringRevokeAndRestoreKeepsPinnedData(t *testing.T) {
	e := e2e(t)
	for _, phase := range []string{"revoke", "restore"} {
		for _, step := range reconcileSteps {
			t.Run(phase+"/"+string(step), func(t *testing.T) {
				p := e.startDriver(t)
				f := newSharedSecret(t, e, p, true)
				// refreshResource=false: its data must come back exactly as published, so a
				// crash mid-revoke or mid-restore must not lose it.
				v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share, attrRefreshResource: "false"})
				if err := p.publish(v); err != nil {
					t.Fatal(err)
				}
				if phase == "restore" {
					f.revoke()
					eventually(t, relist+relistSlack, func() error { return emptyVolume(t, v) })
				}
				p.restartArmed(step)
				if phase == "revoke" {
					f.revoke()
				} else {
					f.revoke = e.grant(t, f.consumer, kindSecret, f.share, serviceAccount(f.consumer, "app"))
				}
				p.waitKilled()
				p.disarm()
				p.start()
				if phase == "revoke" {
					eventually(t, relist+relistSlack, func() error { return emptyVolume(t, v) })
					e.grant(t, f.consumer, kindSecret, f.share, serviceAccount(f.consumer, "app"))
				}
				eventually(t, relist+relistSlack, func() error { return sameFiles(readVolume(t, v.target), asStrings(f.data)) })
				p.unpublishAll(t, v)
			})
		}
	}
}

func emptyVolume(t *testing.T, v *testVolume) error {
	if files := readVolume(t, v.target); len(files) != 0 {
		return fmt.Errorf("%d files still visible", len(files))
	}
	return nil
}

func TestCorruptRecordIsCleanedAndTheDriverServes(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	f := newSharedSecret(t, e, p, true)
	v := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
	other := p.volume(f.consumer, "app", map[string]string{attrSharedSecret: f.share})
	for _, vol := range []*testVolume{v, other} {
		if err := p.publish(vol); err != nil {
			t.Fatal(err)
		}
	}
	p.kill()
	rec := filepath.Join(p.kubeletRoot, "plugins", driverName, "volumes", v.id, recordFile)
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, b[:len(b)/2], 0o600); err != nil { // truncated
		t.Fatal(err)
	}
	p.start()
	// The broken volume was cleaned (its bind, its tmpfs and its dir are gone), the whole one
	// is untouched.
	if n := len(mountsUnder(filepath.Dir(v.target))); n != 0 {
		t.Errorf("%d mounts left at the corrupt volume's target", n)
	}
	volDir := filepath.Join(p.kubeletRoot, "plugins", driverName, "volumes", v.id)
	mounts, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := mountAt(mounts, volDir); ok {
		t.Errorf("the corrupt volume's tmpfs is still mounted: %+v", m)
	}
	if _, err := os.Lstat(volDir); err == nil {
		t.Errorf("the corrupt volume's dir %s is left", volDir)
	}
	if err := sameFiles(readVolume(t, other.target), asStrings(f.data)); err != nil {
		t.Fatalf("the intact volume: %v", err)
	}
	log, _ := os.ReadFile(p.logPath)
	if !strings.Contains(string(log), "corrupt record") {
		t.Error("the driver did not log the corrupt record")
	}
	// The kubelet's next publish of the broken volume works again.
	if err := p.publish(v); err != nil {
		t.Fatalf("publish after corruption: %v", err)
	}
	p.unpublishAll(t, v, other)
}

func TestWipedStateDirIsReportedAndCleaned(t *testing.T) {
	e := e2e(t)
	p := e.startDriver(t)
	f, v := publishedVolume(t, e, p)
	p.kill()
	// A host tmp cleaner's rm -rf: it empties the tmpfs (mount points themselves are busy).
	volDir := filepath.Join(p.kubeletRoot, "plugins", driverName, "volumes", v.id)
	entries, _ := os.ReadDir(volDir)
	for _, en := range entries {
		os.RemoveAll(filepath.Join(volDir, en.Name()))
	}
	p.start()
	log, _ := os.ReadFile(p.logPath)
	if !strings.Contains(string(log), "record unusable") {
		t.Error("the driver did not report the lost record")
	}
	if n := len(mountsUnder(p.kubeletRoot)); n != 0 {
		t.Errorf("%d mounts left after cleaning the wiped volume", n)
	}
	// Retried by the kubelet, the volume is published anew.
	if err := p.publish(v); err != nil {
		t.Fatalf("publish after the wipe: %v", err)
	}
	if err := sameFiles(readVolume(t, v.target), asStrings(f.data)); err != nil {
		t.Fatal(err)
	}
	p.unpublishAll(t, v)
}

// The production binary carries no crash point: nothing of the test hook is compiled in, so no
// environment can make it kill itself. The test build does carry it (or this could not fail).
func TestProductionBinaryHasNoCrashPoints(t *testing.T) {
	e := e2e(t)
	for _, c := range []struct {
		binary string
		want   bool
	}{{e.binary, false}, {e.crashBinary(t), true}} {
		b, err := os.ReadFile(c.binary)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte(crashEnv)); got != c.want {
			t.Errorf("%s mentions %s: %v, want %v", c.binary, crashEnv, got, c.want)
		}
	}
}
