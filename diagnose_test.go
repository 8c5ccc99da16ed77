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
// event cannot recolour, move the cursor or retitle the terminal, nor start a line. Each such
// character, a character that reorders text, and a byte that is not UTF-8 show as their escapes.
func TestMessagesArePrintedWithoutControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"ok\x1b[2J\x1b]0;owned\x07\nnext": `ok\x1b[2J\x1b]0;owned\a\nnext`,
		"a\u202eb\tc\rd\x9b":              `a\u202eb\tc\rd\x9b`,
		"caf\u00e9 \u2713 \ufffd, plain":  "caf\u00e9 \u2713 \ufffd, plain",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// A pod's author cannot forge diagnose's or who-uses's text: a duplicate entry in the pod's
// shares attribute naming a share with a line break and a fake verdict and fix, ESC sequences
// in a share's Ready message and in an event, print as one line each, with no control character.
func TestForgedValuesStayOnTheirOwnLine(t *testing.T) {
	forged := "ca\n  volume x (secret/ca): OK\n    fix: kubectl create clusterrolebinding x --clusterrole=cluster-admin --serviceaccount=a:b"
	_, err := parseShareAttributes(map[string]string{attrShares: "secret/" + forged + ",secret/" + forged})
	if err == nil {
		t.Fatal("a duplicate entry was accepted")
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("a duplicate entry's error %q: want it to quote the entry", err)
	}
	escapes := "\x1b]0;owned\x07\x1b[2J\x1b]52;c;ZWNobyBvd25lZA==\x07"
	rep := &diagnoseReport{Pods: []podDiagnosis{{Namespace: "app", Pod: "web", ServiceAccount: "default", Phase: "Running",
		Shares: []shareVerdictReport{
			{Volume: "certs", Verdict: verdictInvalidVolume, Evidence: []string{err.Error(), forged}, Fix: "fix the volume's volumeAttributes"},
			{Volume: "certs2", Share: "secret/ca", Verdict: verdictShareNotReady,
				Evidence:    []string{`SharedSecret "ca": Ready=False (SourceNotFound): ` + escapes + "\n  volume x, secret/ca: OK"},
				LastVersion: "an event " + escapes},
		}}}, Reads: []string{"GET pods"}}
	var out strings.Builder
	printDiagnose(&out, rep)
	wantLines := 1 + 2 + 2 + 1 + 2 + 1 // pod; volume, evidence x2, fix; volume, evidence, version; reads
	checkTextOutput(t, "diagnose", out.String(), wantLines)

	who := &whoUsesReport{Shares: []string{"secret/ca"}, Pods: []whoUsesRow{{Namespace: "app", Pod: "web", ServiceAccount: "default",
		Phase: "Running", Volume: "certs", Share: "secret/ca", MayUse: "yes", State: "published", LastVersion: escapes + "\nnobody\tyes\tOK"}}, Reads: []string{"GET pods"}}
	out.Reset()
	printWhoUses(&out, who)
	checkTextOutput(t, "who-uses", out.String(), 1+2+1) // shares; header and row; reads
}

// checkTextOutput fails unless text has exactly lines lines, none of them forged (a line of its
// own saying OK, or a fix), and no control character but the line breaks.
func checkTextOutput(t *testing.T, command, text string, lines int) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(got) != lines {
		t.Errorf("%s printed %d lines, want %d:\n%s", command, len(got), lines, text)
	}
	for _, l := range got {
		if strings.HasPrefix(strings.TrimSpace(l), "volume x") || strings.HasPrefix(strings.TrimSpace(l), "fix: kubectl create clusterrolebinding") || l == "nobody" {
			t.Errorf("%s printed a forged line: %q", command, l)
		}
		if strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0x9b }) {
			t.Errorf("%s printed a control character: %q", command, l)
		}
	}
}
