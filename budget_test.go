package main

// Specification of the node's volume budget (budget.go), on a fake node (unitdriver_test.go): a
// publish that does not fit is refused with ResourceExhausted and a message naming the budget,
// the bytes in use and the flag, and fits once another volume is gone; a refresh that does not
// fit keeps the volume's last files and tells the pod once, and goes through when room is made.
// What the kernel charges, and that the driver is not OOM-killed, is measured on the cluster
// (pods_budget_integration_test.go).

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

func TestChargedBytesArePages(t *testing.T) {
	files := map[string]atomicwriter.File{"a": {Data: []byte("x")}, "b": {Data: make([]byte, 4096)}, "c": {Data: make([]byte, 4097)}, "d": {}}
	if got, want := chargedBytes(files), int64(4096+4096+8192); got != want {
		t.Errorf("chargedBytes = %d, want %d", got, want)
	}
}

func TestPublishBeyondTheBudgetIsRefusedUntilThereIsRoom(t *testing.T) {
	d, _ := nodeWorld(t)
	ns := &nodeServer{d: d}
	ctx := context.Background()
	// One volume of the share costs a page for ca.crt and one for its record.
	d.budget.limit = 3 * pageSize
	first := publishRequest(t, d, "vol-1")
	if _, err := ns.NodePublishVolume(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got := d.budget.inUse(); got != 2*pageSize {
		t.Fatalf("in use after one volume: %d, want %d", got, 2*pageSize)
	}
	second := publishRequest(t, d, "vol-2")
	second.TargetPath = filepath.Join(filepath.Dir(filepath.Dir(second.TargetPath)), "other", "mount")
	mkdirParent(t, second.TargetPath)
	_, err := ns.NodePublishVolume(ctx, second)
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--volume-bytes-budget") ||
		!strings.Contains(st.Message(), "already use 8192 of the driver's budget of 12288 bytes") {
		t.Fatalf("publish beyond the budget: %v; want ResourceExhausted naming the bytes in use, the budget and the flag", err)
	}
	if d.budget.inUse() != 2*pageSize || exists(d.store.mountPoint("vol-2")) {
		t.Fatalf("the refused publish left %d bytes charged or its volume dir", d.budget.inUse())
	}
	if _, err := ns.NodeUnpublishVolume(ctx, unpublishRequest(first)); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.NodePublishVolume(ctx, second); err != nil || d.budget.inUse() != 2*pageSize {
		t.Fatalf("publish once the first volume is gone: %v, %d bytes in use", err, d.budget.inUse())
	}
}

func TestRefreshBeyondTheBudgetKeepsTheLastFiles(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "1"},
		Data: map[string][]byte{"ca.crt": []byte("CA")}})
	d, _ := nodeWorldWith(t, client)
	events := make(chan string, 10)
	d.events = &record.FakeRecorder{Events: events}
	ctx := context.Background()
	if _, err := (&nodeServer{d: d}).NodePublishVolume(ctx, publishRequest(t, d, "vol-1")); err != nil {
		t.Fatal(err)
	}
	d.budget.limit = 3 * pageSize // the new copy (2 pages) does not fit beside the old one
	if _, err := client.CoreV1().Secrets("p").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "src", ResourceVersion: "2"},
		Data: map[string][]byte{"ca.crt": make([]byte, 5000)}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	view := filepath.Join(d.store.mountPoint("vol-1"), "data")
	for range 2 { // told once
		d.relistCycle(ctx, 0)
		files, err := atomicwriter.ReadFiles(view)
		if err != nil || string(files["ca.crt"].Data) != "CA" {
			t.Fatalf("after a refresh beyond the budget the view holds %d bytes (%v), want the last files", len(files["ca.crt"].Data), err)
		}
	}
	if n := len(events); n != 1 {
		t.Fatalf("%d events, want one", n)
	}
	if e := <-events; !strings.Contains(e, reasonRefreshFailed) || !strings.Contains(e, "do not fit on this node") {
		t.Fatalf("event %q, want %s saying the new files do not fit", e, reasonRefreshFailed)
	}
	if rec, _ := d.store.get("vol-1"); !rec.Shares[0].OverBudget || d.budget.inUse() != 2*pageSize {
		t.Fatalf("record %+v, %d bytes in use; want the share over budget and its old copy counted", rec.Shares[0], d.budget.inUse())
	}
	d.budget.limit = 0 // room made
	d.relistCycle(ctx, 0)
	files, _ := atomicwriter.ReadFiles(view)
	if len(files["ca.crt"].Data) != 5000 || d.budget.inUse() != 3*pageSize {
		t.Fatalf("after room was made: %d bytes of ca.crt, %d in use; want the new 5000 bytes and 3 pages", len(files["ca.crt"].Data), d.budget.inUse())
	}
}
