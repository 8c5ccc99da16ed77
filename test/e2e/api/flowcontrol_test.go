package api

// Specification of the drivers' place in API Priority and Fairness: the API server accepts the
// chart's FlowSchema and PriorityLevelConfiguration (installed with deploy.yaml) and classifies
// every request of the driver's service account into that level, and nobody else's.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const flowControlName = "shared-resource-csi"

// classifiedAs sends one request with kubeconfig's identity and returns the FlowSchema and
// priority level UIDs the API server names in its response headers.
func classifiedAs(t *testing.T, kubeconfig string) (flowSchema, priorityLevel string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/apis/" + framework.ShareGroup + "/v1alpha1/sharedsecrets?limit=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("list of sharedsecrets: %s", resp.Status)
	}
	return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
}

func TestDriverRequestsHaveTheirOwnPriorityLevel(t *testing.T) {
	e := framework.E2e(t)
	ctx := context.Background()
	fs, err := e.Kube.FlowcontrolV1().FlowSchemas().Get(ctx, flowControlName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy.yaml's FlowSchema: %v", err)
	}
	pl, err := e.Kube.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, flowControlName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("deploy.yaml's PriorityLevelConfiguration: %v", err)
	}
	// The API server's flow-control config controller picks new objects up a moment later.
	framework.Eventually(t, 30*time.Second, func() error {
		gotFS, gotPL := classifiedAs(t, e.DriverKubeconfig)
		if gotFS != string(fs.UID) || gotPL != string(pl.UID) {
			return fmt.Errorf("the driver's request was classified as FlowSchema %q, priority level %q; want %q, %q", gotFS, gotPL, fs.UID, pl.UID)
		}
		return nil
	})
	for _, c := range fs.Status.Conditions {
		if c.Type == "Dangling" && c.Status == "True" {
			t.Errorf("FlowSchema is dangling: %s", c.Message)
		}
	}
	// Anybody else (here the cluster admin) is classified elsewhere.
	if gotFS, _ := classifiedAs(t, e.Kubeconfig); gotFS == string(fs.UID) {
		t.Errorf("the admin's request was classified into the drivers' FlowSchema")
	}
}
