package api

// Specification of what the share informers keep (internal/share/index.go's cacheTransform): a node plugin
// and a status controller hold only the fields of a share they read, whatever size its writer
// made the rest. Forty shares carrying all the annotations the API server allows (256 KiB each)
// and the longest description the CRD allows leave both processes' heaps where they were, and the
// status controller's status writes, made from those trimmed objects, keep every field the
// shares' writers set.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// heapInUse is the least go_memstats_heap_inuse_bytes the process at addr reports over a few
// seconds: its live heap, as closely as can be read from outside (it runs with GOGC=10, so its
// garbage is collected once it is a tenth of what is live).
func heapInUse(t *testing.T, addr string) float64 {
	t.Helper()
	least := math.Inf(1)
	for range 12 {
		least = min(least, metricsOf(t, "http://"+addr+"/metrics").Sum("go_memstats_heap_inuse_bytes", nil))
		time.Sleep(250 * time.Millisecond)
	}
	return least
}

func TestShareCachesHoldOnlyWhatTheDriverReads(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	gogc := framework.WithEnv("GOGC=10")
	nodeAddr, statusAddr := framework.FreeLocalAddr(t), framework.FreeLocalAddr(t)
	e.StartDriver(t, gogc, framework.WithArgs("--health-address="+nodeAddr))
	e.StartStatusController(t, gogc, framework.WithArgs("--health-address="+statusAddr))
	time.Sleep(2 * time.Second) // past the start-up's own allocations
	before := map[string]float64{"node plugin": heapInUse(t, nodeAddr), "status controller": heapInUse(t, statusAddr)}

	const shares = 40
	ns := e.SourceNamespace(t, "heap")
	e.CreateSecret(t, ns, "src", map[string][]byte{"k": []byte("v")})
	sfx := framework.RandSuffix()
	description := strings.Repeat("d", 4096)
	var held int
	for i := range shares {
		name := fmt.Sprintf("heap-%s-%d", sfx, i)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": framework.ShareGroup + "/v1alpha1",
			"kind":       framework.KindSecret.ShareTypeName(),
			"metadata": map[string]any{"name": name,
				// The API server allows 256 KiB of annotations, keys and values together.
				"annotations": map[string]any{"example.com/bulk": strings.Repeat(fmt.Sprint(i%10), 250<<10)},
				"labels":      map[string]any{"example.com/team": "payments"}},
			"spec": map[string]any{"description": description,
				framework.ShareRefField(framework.KindSecret): map[string]any{"namespace": ns, "name": "src"}},
		}}
		if _, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating share %d: %v", i, err)
		}
		t.Cleanup(func() { e.DeleteShare(t, framework.KindSecret, name) })
		held += 250<<10 + len(description)
	}
	// The status controller writes every share's status from its cache: the shares have reached
	// it (and the node plugin, on the same watch), and its writes keep what the writers set.
	last := fmt.Sprintf("heap-%s-%d", sfx, shares-1)
	framework.Eventually(t, 60*time.Second, func() error {
		for i := range shares {
			name := fmt.Sprintf("heap-%s-%d", sfx, i)
			u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if _, found, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); !found {
				return fmt.Errorf("share %s has no status yet", name)
			}
		}
		return nil
	})
	u, err := e.Dyn.Resource(framework.ShareGVR(framework.KindSecret)).Get(ctx, last, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "description"); got != description ||
		len(u.GetAnnotations()["example.com/bulk"]) != 250<<10 || u.GetLabels()["example.com/team"] != "payments" {
		t.Errorf("after the status write, share %s has a description of %d bytes, an annotation of %d, labels %v: want them as created",
			last, len(got), len(u.GetAnnotations()["example.com/bulk"]), u.GetLabels())
	}
	time.Sleep(2 * time.Second)
	for proc, addr := range map[string]string{"node plugin": nodeAddr, "status controller": statusAddr} {
		after := heapInUse(t, addr)
		grew := after - before[proc]
		t.Logf("%s: heap in use %.1f MiB before %d shares holding %.1f MiB, %.1f MiB after (grew %.1f MiB)",
			proc, before[proc]/(1<<20), shares, float64(held)/(1<<20), after/(1<<20), grew/(1<<20))
		// Trimmed, the heap grows by what the informers keep per share whatever its size (measured
		// 1.3 to 2.0 MiB for the forty, on a quiet machine); untrimmed, by the whole 9.9 MiB. A
		// third of what the writers put in separates the two with room for the collector's timing.
		if grew > float64(held)/3 {
			t.Errorf("%s: the heap grew %.1f MiB with %d shares holding %.1f MiB it does not read; want it flat (under a third of that)",
				proc, grew/(1<<20), shares, float64(held)/(1<<20))
		}
	}
}
