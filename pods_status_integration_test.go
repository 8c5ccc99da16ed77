//go:build integration

package main

// Specification, in the real cluster with the chart installed, of who writes share status
// (roles.go): the status controller's Deployment, never a node plugin. One of its pods holds the
// status Lease; a new share's Ready condition is written by it (its log, and the API server's
// audit log when there is one: updates of shares only by its account); no node plugin campaigns
// or writes. That the node plugins' account may not write status is specified in
// leastprivilege_integration_test.go; the writer's behaviour in status_integration_test.go.

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodsStatusWrittenByTheStatusController(t *testing.T) {
	s := podsEnv(t, podsShared)
	ctx := context.Background()
	var mark *auditMark
	if s.auditLog != "" {
		m, err := markAudit(s.auditLog)
		if err != nil {
			t.Fatal(err)
		}
		mark = &m
	}

	f := s.newShare(t, map[string][]byte{"ca.crt": []byte("ca-" + randSuffix())})
	s.waitShareReady(t, f.share, metav1.ConditionTrue, reasonSourceAvailable, "Secret "+f.platform+"/"+f.secret)

	holder := s.leaseHolder(t)
	writer, err := s.statusPodHolding(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	log, err := s.podLog(ctx, podsDriverNS, writer.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, `"Share status updated"`) || !strings.Contains(log, `share="`+f.share+`"`) {
		t.Errorf("the Lease holder %s logged no status write of %s:\n%s", writer.Name, f.share, tail([]byte(log), 30))
	}
	t.Logf("the status Lease is held by %s (pod %s on node %s), which wrote %s's Ready condition", holder, writer.Name, writer.Spec.NodeName, f.share)

	for _, node := range s.nodes {
		pod, err := s.driverPodOn(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		log, err := s.podLog(ctx, podsDriverNS, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log, `"Share status writer campaigning"`) || strings.Contains(log, `"Share status updated"`) {
			t.Errorf("the node plugin on %s campaigned for the status Lease or wrote status:\n%s", node, tail([]byte(log), 30))
		}
	}

	if mark == nil {
		t.Log("no audit log ($SRCSI_AUDIT_LOG): who sent the writes is checked by the pods' logs only")
		return
	}
	byUser := map[string]int{}
	events, err := mark.events(func(ev auditEvent) bool {
		return ev.Verb == "update" && (ev.ObjectRef.Resource == "sharedsecrets" || ev.ObjectRef.Resource == "sharedconfigmaps")
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		byUser[ev.User.Username]++
	}
	if byUser[statusUser] == 0 || byUser[driverUser] != 0 {
		t.Errorf("updates of shares by user since the share was made: %v; want some by %s and none by %s", byUser, statusUser, driverUser)
	}
}
