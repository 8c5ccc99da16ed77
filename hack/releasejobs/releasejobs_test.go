package releasejobs

// Specification of the release's split between building and signing: the workflow keeps it
// (TestReleaseWorkflowSignsApartFromBuilding), and the check refuses the shapes it must
// (TestCheckRefusesSigningWhereCodeRuns).

import (
	"os"
	"strings"
	"testing"
)

func TestReleaseWorkflowSignsApartFromBuilding(t *testing.T) {
	content, err := os.ReadFile("../../.github/workflows/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Check(content)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// signingJob is a job "sign" that may sign, in the environment release, running steps.
func signingJob(steps string) string {
	return `
  sign:
    environment: release
    permissions: {id-token: write}
    steps:` + steps
}

func TestCheckRefusesSigningWhereCodeRuns(t *testing.T) {
	const gateRun = `run: gh api "repos/$GITHUB_REPOSITORY/environments/release" --jq '"\([.protection_rules[] | select(.type == "required_reviewers")] | length) \(any(.protection_rules[]; .prevent_self_review)) \(.can_admins_bypass)"'`
	const gate = "\n      - " + gateRun
	for _, tc := range []struct {
		name, jobs string
		want       string // in a problem; empty: none
	}{
		{"split", `
  build:
    permissions: {contents: read, packages: write}
    steps:
      - uses: actions/checkout@x
      - run: make release
  sign:
    environment: release
    permissions: {id-token: write, contents: write}
    steps:` + gate + `
      - uses: sigstore/cosign-installer@x
      - uses: actions/download-artifact@x
      - run: cosign sign --yes "$REGISTRY/x@$DIGEST"`, ""},
		{"one job", `
  release:
    environment: release
    permissions: {id-token: write}
    steps:` + gate + `
      - uses: actions/checkout@x
      - run: make release
      - run: cosign sign --yes x`, "uses actions/checkout@x"},
		{"make where it signs", `
  sign:
    environment: release
    permissions: {id-token: write}
    steps:` + gate + `
      - run: make release VERSION=v1.2.3`, `runs "make release VERSION=v1.2.3"`},
		{"a tool of the checkout", `
  sign:
    environment: release
    permissions: {id-token: write}
    steps:` + gate + `
      - run: _output/bin/helm push x`, "runs"},
		{"an attestation before the reviewer gate", signingJob(`
      - uses: actions/attest-build-provenance@x
        with: {subject-checksums: SHA256SUMS}` + gate), "before a step that refuses"},
		{"an attestation after the gate", signingJob(gate + `
      - uses: actions/attest-build-provenance@x
        with: {subject-checksums: SHA256SUMS}`), ""},
		{"no reviewer gate", `
  sign:
    environment: release
    permissions: {id-token: write}
    steps:
      - run: cosign sign --yes x`, "before a step that refuses"},
		{"reviewers but self-review allowed", signingJob(`
      - run: gh api "repos/$GITHUB_REPOSITORY/environments/release" --jq '[.protection_rules[] | select(.type == "required_reviewers")] | length'
      - run: cosign sign --yes x`), "before a step that refuses"},
		{"the checks named in a comment alone", signingJob(`
      - run: |
          # prevent_self_review and can_admins_bypass are checked elsewhere
          gh api "repos/$GITHUB_REPOSITORY/environments/release" --jq '[.protection_rules[] | select(.type == "required_reviewers")] | length'
      - run: cosign sign --yes x`), "before a step that refuses"},
		{"a gate that may be skipped", signingJob(`
      - if: github.event_name == 'workflow_dispatch'
        ` + gateRun + `
      - run: cosign sign --yes x`), "before a step that refuses"},
		{"a gate whose failure is ignored", signingJob(`
      - continue-on-error: true
        ` + gateRun + `
      - run: cosign sign --yes x`), "before a step that refuses"},
		{"outside the environment", `
  sign:
    permissions: {id-token: write}
    steps:` + gate, "protected environment release"},
		{"no signing job", `
  build:
    permissions: {contents: read}
    steps:
      - run: make release`, "0 jobs may sign"},
		{"two signing jobs", `
  a:
    environment: release
    permissions: {id-token: write}
    steps:` + gate + `
  b:
    environment: release
    permissions: write-all
    steps:` + gate, "2 jobs may sign"},
	} {
		problems, err := Check([]byte("permissions: {}\njobs:" + tc.jobs + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := strings.Join(problems, "\n")
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s: refused: %s", tc.name, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s: problems %q, want one with %q", tc.name, got, tc.want)
		}
	}
}
