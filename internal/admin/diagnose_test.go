package admin

// Specification of the pure parts of diagnose and who-uses (diagnose.go, whouses.go,
// admincmd.go): flags as kubectl takes them (after the target too), the events that name a
// share (and not a share whose name merely starts the same), the version a pod last received,
// and what they print. The plugin's dispatch is the root's (commands_test.go). The verdicts
// themselves are checked against a real cluster (test/e2e/pods/diagnose_test.go).

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

func TestAdminFlagsAfterTheTarget(t *testing.T) {
	accepting := Driver{CheckAccounts: func(string) error { return nil }}
	o, target, err := parseAdminFlags(accepting, "diagnose", []string{"web-1", "-n", "team", "-o", "json"}, &strings.Builder{})
	if err != nil || target != "web-1" || o.namespace != "team" || o.output != "json" {
		t.Fatalf("got %+v %q %v", o, target, err)
	}
	// The driver's check of --driver-service-accounts: TestAdminCommandsCheckAccountsAsTheDriver.
	for _, args := range [][]string{{}, {"a", "b"}, {"a", "-o", "yaml"}} {
		if _, _, err := parseAdminFlags(accepting, "diagnose", args, &strings.Builder{}); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func TestEventsNameTheirShareExactly(t *testing.T) {
	at := func(minutes int) metav1.Time {
		return metav1.NewTime(time.Now().Add(time.Duration(minutes) * time.Minute))
	}
	evs := []corev1.Event{
		{Reason: shareapi.ReasonRefreshed, Message: "Updated secret/web-ca from Secret p/web-ca (resourceVersion 10)", LastTimestamp: at(-5)},
		{Reason: shareapi.ReasonRefreshed, Message: "Updated secret/web-ca-2 from Secret p/other (resourceVersion 99)", LastTimestamp: at(-1)},
		{Reason: shareapi.ReasonRevoked, Message: "The files of secret/web-ca were removed from the volume: denied", LastTimestamp: at(-4)},
		{Reason: shareapi.ReasonRestored, Message: "Access to secret/web-ca is granted again; its files are back", LastTimestamp: at(-3)},
	}
	sortEvents(evs)
	ref := shareapi.Ref{Kind: shareapi.KindSecret, Name: "web-ca"}
	if v := lastVersion(evs, ref, nil); !strings.HasPrefix(v, "resourceVersion 10 ") {
		t.Errorf("last version %q, want resourceVersion 10 (not web-ca-2's 99)", v)
	}
	if ev := lastShareEvent(evs, ref, shareapi.ReasonRevoked, shareapi.ReasonRestored); ev == nil || ev.Reason != shareapi.ReasonRestored {
		t.Errorf("last of revoked/restored: %v, want restored", ev)
	}
	if v := lastVersion(nil, ref, nil); !strings.Contains(v, "first published") {
		t.Errorf("no event: %q", v)
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
	// The driver's error for a volume listing the forged entry twice (TestForgedShareEntryIsQuoted).
	err := fmt.Errorf("volumeAttribute shares: %q is listed twice", "secret/"+forged)
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

// The JSON report and the error lines carry others' text too: in JSON every character a terminal
// does not print as itself is an escape, and the values decode as they were; an error prints on
// one line, escaped, as the permissions the caller lacked.
func TestJSONAndErrorsCarryNoControlCharacters(t *testing.T) {
	hostile := "ca\x1b]0;owned\x07\x1b[2J\u009b2J\u202egnp.exe\u2028\u0085\n  volume x, secret/ca: OK\U000e0001\xff"
	rep := &diagnoseReport{Pods: []podDiagnosis{{Namespace: "app", Pod: "web" + hostile, ServiceAccount: "default", Phase: "Running",
		Shares: []shareVerdictReport{{Volume: "certs", Share: "secret/" + hostile, Verdict: verdictShareNotReady,
			Evidence: []string{`SharedSecret "ca": Ready=False (SourceNotFound): ` + hostile}, Fix: "fix " + hostile}}}},
		CallerLacked: []string{"list pods -n " + hostile}, Reads: []string{"GET pod"}}
	who := &whoUsesReport{Shares: []string{"secret/" + hostile}, Pods: []whoUsesRow{{Namespace: "app", Pod: hostile, ServiceAccount: "default",
		Volume: "certs", Share: "secret/ca", MayUse: "yes", State: "published", LastVersion: hostile}}, Reads: []string{"GET pods"}}
	for _, report := range []any{rep, who} {
		var out strings.Builder
		if err := printJSON(&out, report); err != nil {
			t.Fatal(err)
		}
		checkNoControlCharacters(t, "the JSON report", out.String())
		// A script reads the same values the encoder was given (invalid UTF-8 aside, which JSON
		// cannot carry and the encoder always wrote as U+FFFD).
		var plain strings.Builder
		enc := json.NewEncoder(&plain)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			t.Fatal(err)
		}
		var got, want any
		if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
			t.Fatalf("the JSON report does not decode: %v\n%s", err, out.String())
		}
		if err := json.Unmarshal([]byte(plain.String()), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the JSON report decodes to\n%v\nwant\n%v", got, want)
		}
	}

	var errs strings.Builder
	printFailure(&errs, "diagnose", fmt.Errorf("deployment app/web: its selector %s cannot select pods", hostile), []string{"list pods -n " + hostile})
	if lines := strings.Split(strings.TrimSuffix(errs.String(), "\n"), "\n"); len(lines) != 2 {
		t.Errorf("the failure printed %d lines, want 2 (the error, what the caller lacked):\n%s", len(lines), errs.String())
	}
	checkNoControlCharacters(t, "the failure", errs.String())
}

// checkNoControlCharacters fails on a character a terminal does not print as itself, a line
// break aside.
func checkNoControlCharacters(t *testing.T, what, text string) {
	t.Helper()
	for _, r := range text {
		if r != '\n' && r != ' ' && !unicode.IsPrint(r) {
			t.Errorf("%s holds %U:\n%s", what, r, text)
			return
		}
	}
	if strings.Contains(text, "\n  volume x") {
		t.Errorf("%s holds a forged line:\n%s", what, text)
	}
}
