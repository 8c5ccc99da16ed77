package main

// Specification of the pure parts of diagnose and who-uses (diagnose.go, whouses.go,
// admincmd.go): flags as kubectl takes them (after the target too), the events that name a
// share (and not a share whose name merely starts the same), the version a pod last received,
// and the plugin's dispatch. The verdicts themselves are checked against a real cluster
// (test/e2e/pods/diagnose_test.go).

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAdminFlagsAfterTheTarget(t *testing.T) {
	o, target, err := parseAdminFlags("diagnose", []string{"web-1", "-n", "team", "-o", "json"}, &strings.Builder{})
	if err != nil || target != "web-1" || o.namespace != "team" || o.output != "json" {
		t.Fatalf("got %+v %q %v", o, target, err)
	}
	for _, args := range [][]string{{}, {"a", "b"}, {"a", "-o", "yaml"}, {"a", "--driver-service-accounts", "nocolon"}} {
		if _, _, err := parseAdminFlags("diagnose", args, &strings.Builder{}); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func TestEventsNameTheirShareExactly(t *testing.T) {
	at := func(minutes int) metav1.Time {
		return metav1.NewTime(time.Now().Add(time.Duration(minutes) * time.Minute))
	}
	evs := []corev1.Event{
		{Reason: reasonRefreshed, Message: "Updated secret/web-ca from Secret p/web-ca (resourceVersion 10)", LastTimestamp: at(-5)},
		{Reason: reasonRefreshed, Message: "Updated secret/web-ca-2 from Secret p/other (resourceVersion 99)", LastTimestamp: at(-1)},
		{Reason: reasonRevoked, Message: "The files of secret/web-ca were removed from the volume: denied", LastTimestamp: at(-4)},
		{Reason: reasonRestored, Message: "Access to secret/web-ca is granted again; its files are back", LastTimestamp: at(-3)},
	}
	sortEvents(evs)
	ref := shareRef{Kind: kindSecret, Name: "web-ca"}
	if v := lastVersion(evs, ref, nil); !strings.HasPrefix(v, "resourceVersion 10 ") {
		t.Errorf("last version %q, want resourceVersion 10 (not web-ca-2's 99)", v)
	}
	if ev := lastShareEvent(evs, ref, reasonRevoked, reasonRestored); ev == nil || ev.Reason != reasonRestored {
		t.Errorf("last of revoked/restored: %v, want restored", ev)
	}
	if v := lastVersion(nil, ref, nil); !strings.Contains(v, "first published") {
		t.Errorf("no event: %q", v)
	}
}

func TestPluginNameDispatchesAdminCommands(t *testing.T) {
	var out, errs strings.Builder
	if code := runPlugin([]string{"frobnicate"}, &out, &errs); code != 2 || !strings.Contains(errs.String(), "unknown command") {
		t.Errorf("plugin, unknown command: %d, %q; want 2 and the usage", code, errs.String())
	}
	if code := runPlugin(nil, &out, &errs); code != 2 {
		t.Errorf("plugin without a command: %d, want 2 (usage)", code)
	}
	if code := runPlugin([]string{"env-file"}, &out, &errs); code != 2 {
		t.Errorf("plugin env-file without flags: %d, want 2", code)
	}
}

// Messages written by others reach an admin's terminal without its control characters: an
// event cannot recolour, move the cursor or retitle the terminal.
func TestMessagesArePrintedWithoutControlCharacters(t *testing.T) {
	if got := printable("ok\x1b[2J\x1b]0;owned\x07\nnext"); got != "ok?[2J?]0;owned??next" {
		t.Errorf("printable: %q", got)
	}
}
