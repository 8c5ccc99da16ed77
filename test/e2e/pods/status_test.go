package pods

// Specification, in the real cluster with the chart installed, of who writes share status
// (roles.go): the status controller's Deployment, never a node plugin. One of its pods holds the
// status Lease; a new share's Ready condition is written by it (its log, and the API server's
// audit log when there is one: updates of shares only by its account); no node plugin campaigns
// or writes. That the node plugins' account may not write status is specified in
// test/e2e/api/leastprivilege_test.go; the writer's behaviour in test/e2e/api/status_test.go.

import (
	"github.com/shared-resource/csi-driver/test/e2e/framework"

	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusLogSlack is how long after a share's condition is seen the writer's log may still lack
// the line saying it wrote it.
const statusLogSlack = 15 * time.Second

func TestPodsStatusWrittenByTheStatusController(t *testing.T) {
	s := framework.PodsEnv(t, framework.PodsShared)
	ctx := context.Background()
	var mark *framework.AuditMark
	if s.AuditLog != "" {
		m, err := framework.MarkAudit(s.AuditLog)
		if err != nil {
			t.Fatal(err)
		}
		mark = &m
	}

	f := s.NewShare(t, map[string][]byte{"ca.crt": []byte("ca-" + framework.RandSuffix())})
	s.WaitShareReady(t, f.Share, metav1.ConditionTrue, framework.ReasonSourceAvailable, "Secret "+f.Platform+"/"+f.Secret)

	holder := s.LeaseHolder(t)
	writer, err := s.StatusPodHolding(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	// The writer logs a write once the API server has answered it, so the condition can be seen
	// before the line reaches the pod's log: the log is read again for a while.
	for deadline := time.Now().Add(statusLogSlack); ; time.Sleep(500 * time.Millisecond) {
		log, err := s.PodLog(ctx, framework.PodsDriverNS, writer.Name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log, `"Share status updated"`) && strings.Contains(log, `share="`+f.Share+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the Lease holder %s logged no status write of %s within %v of its Ready condition:\n%s", writer.Name, f.Share, statusLogSlack, framework.Tail([]byte(log), 30))
			break
		}
	}
	t.Logf("the status Lease is held by %s (pod %s on node %s), which wrote %s's Ready condition", holder, writer.Name, writer.Spec.NodeName, f.Share)

	for _, node := range s.Nodes {
		pod, err := s.DriverPodOn(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		log, err := s.PodLog(ctx, framework.PodsDriverNS, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log, `"Share status writer campaigning"`) || strings.Contains(log, `"Share status updated"`) {
			t.Errorf("the node plugin on %s campaigned for the status Lease or wrote status:\n%s", node, framework.Tail([]byte(log), 30))
		}
	}

	if mark == nil {
		t.Log("no audit log ($SRCSI_AUDIT_LOG): who sent the writes is checked by the pods' logs only")
		return
	}
	byUser := map[string]int{}
	events, err := mark.Events(func(ev framework.AuditEvent) bool {
		return ev.Verb == "update" && (ev.ObjectRef.Resource == "sharedsecrets" || ev.ObjectRef.Resource == "sharedconfigmaps")
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		byUser[ev.User.Username]++
	}
	if byUser[framework.StatusUser] == 0 || byUser[framework.DriverUser] != 0 {
		t.Errorf("updates of shares by user since the share was made: %v; want some by %s and none by %s", byUser, framework.StatusUser, framework.DriverUser)
	}
}
