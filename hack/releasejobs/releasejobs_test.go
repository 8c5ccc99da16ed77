package releasejobs

// Specification of the release's split between building and signing, and of a build from the
// checkout alone: the workflow keeps both (TestReleaseWorkflowSignsApartFromBuilding), and the
// check refuses the shapes it must (TestCheckRefusesSigningWhereCodeRuns,
// TestCheckRefusesABuildFromACacheOrWithItsToken).

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
        with: {persist-credentials: false}
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

func TestCheckRefusesABuildFromACacheOrWithItsToken(t *testing.T) {
	// A signing job the check accepts, so that each case's problems are its build job's.
	const sign = `
  sign:
    environment: release
    permissions: {id-token: write}
    steps:
      - run: gh api "repos/$GITHUB_REPOSITORY/environments/release" --jq '"\([.protection_rules[] | select(.type == "required_reviewers")] | length) \(any(.protection_rules[]; .prevent_self_review)) \(.can_admins_bypass)"'
      - run: cosign sign --yes x`
	const checkout = `
      - uses: actions/checkout@x
        with: {persist-credentials: false}`
	const setupGo = `
      - uses: actions/setup-go@x
        with: {go-version-file: go.mod, cache: false}`
	const build = `
  build:
    permissions: {contents: read, packages: write}
    steps:`
	const release = `
      - run: make release`
	for _, tc := range []struct {
		name, steps string
		want        string // in a problem; empty: none
	}{
		{"from the checkout alone", checkout + setupGo + release, ""},
		{"the inputs as strings", `
      - uses: actions/checkout@x
        with: {persist-credentials: "false"}
      - uses: actions/setup-go@x
        with: {cache: "false"}` + release, ""},
		{"the runner's Go", checkout + release, ""},
		{"a checkout that keeps its token", `
      - uses: actions/checkout@x` + setupGo + release, "job build checks out (actions/checkout@x, step 1) without persist-credentials: false"},
		{"persist-credentials true", `
      - name: checkout
        uses: actions/checkout@x
        with: {persist-credentials: true}` + setupGo + release, "checks out (actions/checkout@x, checkout) without persist-credentials: false"},
		{"persist-credentials from an expression", `
      - uses: actions/checkout@x
        with: {persist-credentials: "${{ inputs.keep }}"}` + setupGo + release, "without persist-credentials: false"},
		{"setup-go with its default cache", checkout + `
      - uses: actions/setup-go@x
        with: {go-version-file: go.mod}` + release, "job build sets up Go (actions/setup-go@x, step 2) without cache: false"},
		{"setup-go without inputs", checkout + `
      - uses: actions/setup-go@x` + release, "without cache: false"},
		{"setup-go cache true", checkout + `
      - uses: actions/setup-go@x
        with: {cache: true}` + release, "without cache: false"},
		{"actions/cache", checkout + setupGo + `
      - uses: actions/cache@x
        with: {path: ~/go/pkg/mod, key: go}` + release, "job build uses actions/cache@x (step 3): a release workflow restores and saves no cache"},
		{"actions/cache/restore", checkout + setupGo + `
      - uses: actions/cache/restore@x
        with: {path: ~/.cache/go-build, key: go}` + release, "uses actions/cache/restore@x"},
	} {
		problems, err := Check([]byte("permissions: {}\njobs:" + build + tc.steps + sign + "\n"))
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
