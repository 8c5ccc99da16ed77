package pinnedactions

// Specification of the workflows' supply chain: every action the repository's workflows use is
// pinned by a full commit SHA with a `# vX.Y.Z` comment (TestWorkflowActionsArePinned, which
// `make check-workflows` runs), and the check refuses what it must (TestCheckRefusesMutableRefs).

import (
	"strings"
	"testing"
)

func TestWorkflowActionsArePinned(t *testing.T) {
	problems, files, err := CheckDir("../../.github/workflows")
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no workflow found in .github/workflows")
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Errorf("%d of the uses: in %d workflows are refused; pin each by the commit its tag names "+
			"(git ls-remote https://github.com/OWNER/REPO refs/tags/vX.Y.Z, the peeled ^{} line for an "+
			"annotated tag) and say the tag in a comment", len(problems), files)
	}
}

func TestCheckRefusesMutableRefs(t *testing.T) {
	const sha = "d23441a48e516b6c34aea4fa41551a30e30af803"
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"uses: actions/checkout@" + sha + " # v6.1.0", true},
		{"uses: 'actions/checkout@" + sha + "' # v6.1.0", true},
		{"uses: owner/repo/.github/workflows/build.yaml@" + sha + " # v1.2.3", true},
		{"uses: ./.github/actions/local", true},
		{"uses: docker://alpine@sha256:" + strings.Repeat("ab", 32), true},
		{"uses: actions/checkout@v4", false},
		{"uses: actions/checkout@main", false},
		{"uses: actions/checkout@" + sha[:7] + " # v6.1.0", false},
		{"uses: actions/checkout@" + strings.ToUpper(sha) + " # v6.1.0", false},
		{"uses: actions/checkout@" + sha, false}, // which release is that?
		{"uses: docker://alpine:3.20", false},
	} {
		wf := "jobs:\n  j:\n    runs-on: x\n    steps:\n      - " + tc.line + "\n"
		problems, err := Check("t.yaml", []byte(wf))
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if got := len(problems) == 0; got != tc.ok {
			t.Errorf("%q: accepted %v, want %v (%v)", tc.line, got, tc.ok, problems)
		}
	}
	// A reusable workflow's uses: (at the job, not in a step) is checked too.
	problems, err := Check("t.yaml", []byte("jobs:\n  j:\n    uses: owner/repo/.github/workflows/w.yaml@v1\n"))
	if err != nil || len(problems) != 1 {
		t.Errorf("job-level uses: %v %v, want one problem", problems, err)
	}
}
