package releasejobs

// Specification of the release's split between building and signing, and of a build from the
// checkout alone: the workflow keeps both (TestReleaseWorkflowSignsApartFromBuilding), and the
// check refuses the shapes it must (TestCheckRefusesSigningWhereCodeRuns,
// TestCheckRefusesABuildFromACacheOrWithItsToken, TestCheckRefusesWhatItCannotSeeInto).

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

// pin is a full commit SHA, as every action of a job that may not sign is pinned.
const pin = "@0123456789abcdef0123456789abcdef01234567"

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
      - uses: actions/checkout` + pin + `
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

// acceptedSign is a signing job the check accepts, so that a case's problems are its build job's.
const acceptedSign = `
  sign:
    environment: release
    permissions: {id-token: write}
    steps:
      - run: gh api "repos/$GITHUB_REPOSITORY/environments/release" --jq '"\([.protection_rules[] | select(.type == "required_reviewers")] | length) \(any(.protection_rules[]; .prevent_self_review)) \(.can_admins_bypass)"'
      - run: cosign sign --yes x`

func TestCheckRefusesABuildFromACacheOrWithItsToken(t *testing.T) {
	const sign = acceptedSign
	const checkout = `
      - uses: actions/checkout@0123456789abcdef0123456789abcdef01234567
        with: {persist-credentials: false}`
	const setupGo = `
      - uses: actions/setup-go@0123456789abcdef0123456789abcdef01234567
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
      - uses: actions/checkout@0123456789abcdef0123456789abcdef01234567
        with: {persist-credentials: "false"}
      - uses: actions/setup-go@0123456789abcdef0123456789abcdef01234567
        with: {cache: "false"}` + release, ""},
		{"the runner's Go", checkout + release, ""},
		{"a checkout that keeps its token", `
      - uses: actions/checkout@0123456789abcdef0123456789abcdef01234567` + setupGo + release, "job build checks out (actions/checkout@0123456789abcdef0123456789abcdef01234567, step 1) without persist-credentials: false"},
		{"persist-credentials true", `
      - name: checkout
        uses: actions/checkout@0123456789abcdef0123456789abcdef01234567
        with: {persist-credentials: true}` + setupGo + release, "checks out (actions/checkout@0123456789abcdef0123456789abcdef01234567, checkout) without persist-credentials: false"},
		{"persist-credentials from an expression", `
      - uses: actions/checkout@0123456789abcdef0123456789abcdef01234567
        with: {persist-credentials: "${{ inputs.keep }}"}` + setupGo + release, "without persist-credentials: false"},
		{"setup-go with its default cache", checkout + `
      - uses: actions/setup-go@0123456789abcdef0123456789abcdef01234567
        with: {go-version-file: go.mod}` + release, "job build sets up Go (actions/setup-go@0123456789abcdef0123456789abcdef01234567, step 2) without cache: false"},
		{"setup-go without inputs", checkout + `
      - uses: actions/setup-go@0123456789abcdef0123456789abcdef01234567` + release, "without cache: false"},
		{"setup-go cache true", checkout + `
      - uses: actions/setup-go@0123456789abcdef0123456789abcdef01234567
        with: {cache: true}` + release, "without cache: false"},
		{"actions/cache", checkout + setupGo + `
      - uses: actions/cache@0123456789abcdef0123456789abcdef01234567
        with: {path: ~/go/pkg/mod, key: go}` + release, "job build uses actions/cache@0123456789abcdef0123456789abcdef01234567 (step 3): a release workflow restores and saves no cache"},
		{"actions/cache/restore", checkout + setupGo + `
      - uses: actions/cache/restore@0123456789abcdef0123456789abcdef01234567
        with: {path: ~/.cache/go-build, key: go}` + release, "uses actions/cache/restore@0123456789abcdef0123456789abcdef01234567"},
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

// A job that may not sign uses only actions/checkout, actions/setup-go and actions/upload-artifact
// by commit, whose inputs the check reads as the runner does (case-insensitive); a reusable
// workflow, a local or container action, or another owner's action hides steps from the check.
func TestCheckRefusesWhatItCannotSeeInto(t *testing.T) {
	const build = `
  build:
    permissions: {contents: read, packages: write}
    steps:
      - uses: actions/checkout` + pin + `
        with: {persist-credentials: false}
      - uses: actions/setup-go` + pin + `
        with: {cache: false}`
	const upload = `
      - uses: actions/upload-artifact` + pin + `
        with: {name: release, path: _output/release/}`
	for _, tc := range []struct {
		name, jobs string
		want       string // in a problem; empty: none
	}{
		{"checkout, Go and the upload, pinned", build + `
      - run: make release` + upload + acceptedSign, ""},
		{"inputs in another case", `
  build:
    steps:
      - uses: actions/checkout` + pin + `
        with: {Persist-Credentials: false}
      - uses: Actions/Setup-Go` + pin + `
        with: {CACHE: "FALSE"}` + acceptedSign, ""},
		{"an input set twice in two cases", `
  build:
    steps:
      - uses: actions/checkout` + pin + `
        with: {persist-credentials: false, Persist-Credentials: true}` + acceptedSign,
			"job build sets the input persist-credentials twice (actions/checkout" + pin + ", step 1)"},
		{"an owner in capitals", `
  build:
    steps:
      - uses: Actions/Checkout` + pin + acceptedSign, "without persist-credentials: false"},
		{"a reusable workflow as the build", `
  build:
    uses: ./.github/workflows/build.yaml` + acceptedSign, "job build calls the reusable workflow ./.github/workflows/build.yaml"},
		{"another repository's reusable workflow", `
  build:
    uses: someone/workflows/.github/workflows/go.yaml@0123456789abcdef0123456789abcdef01234567` + acceptedSign, "job build calls the reusable workflow someone/workflows"},
		{"a reusable workflow where it signs", `
  sign:
    environment: release
    permissions: {id-token: write}
    uses: ./.github/workflows/sign.yaml`, "job sign calls the reusable workflow ./.github/workflows/sign.yaml"},
		{"a local composite action", build + `
      - name: restore
        uses: ./.github/actions/go-cache
      - run: make release` + acceptedSign, "job build uses ./.github/actions/go-cache (restore): a job of the release workflow other than the signing one uses only"},
		{"another owner's cache action", build + `
      - uses: someone/cache` + pin + `
        with: {path: ~/.cache/go-build, key: go}` + acceptedSign, "job build uses someone/cache" + pin + " (step 3)"},
		{"another owner's checkout", `
  build:
    steps:
      - uses: someone/checkout` + pin + acceptedSign, "uses someone/checkout" + pin + " (step 1): a job of the release workflow other than the signing one uses only"},
		{"a container action", build + `
      - uses: docker://golang@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef` + acceptedSign, "uses docker://golang@sha256:"},
		{"a checkout by tag", `
  build:
    steps:
      - uses: actions/checkout@v6
        with: {persist-credentials: false}` + acceptedSign, "uses actions/checkout@v6 (step 1): a job of the release workflow other than the signing one uses only"},
		{"a checkout by a short SHA", `
  build:
    steps:
      - uses: actions/checkout@0123456789ab
        with: {persist-credentials: false}` + acceptedSign, "uses actions/checkout@0123456789ab (step 1)"},
		{"the upload's sub-action", build + `
      - uses: actions/upload-artifact/merge` + pin + acceptedSign, "uses actions/upload-artifact/merge"},
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
