// Package releasejobs checks that the release workflow builds and signs in separate jobs: the
// job that may sign (id-token: write) runs no code of the repository or of its dependencies, and
// no job that runs that code may sign. Whoever controls what the build runs (a dependency, a
// tool, a test helper) would otherwise hold the identity that signs the release. And that no job
// builds from a cache or leaves its checkout's token behind, and that the jobs that may not sign
// use only the checkout, setup-go and upload-artifact, pinned (buildjob.go). A job that calls a
// reusable workflow is refused: what it runs is not in the file checked. `go test ./...` runs
// the check on .github/workflows/release.yaml.
package releasejobs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// signingUses is every action the signing job may use: cosign's installer, the download of what
// the build job produced, and GitHub's provenance attestation of it. Anything else (a checkout, a
// toolchain) brings code to run.
var signingUses = regexp.MustCompile(`^(sigstore/cosign-installer|actions/download-artifact|actions/attest-build-provenance)@`)

// attests says whether s signs a provenance attestation (with the job's identity, as cosign sign).
func (s step) attests() bool { return strings.HasPrefix(s.Uses, "actions/attest-build-provenance@") }

// buildCommand matches a run script that builds or runs the repository's code or tools: make, the
// go command, a script or binary of the checkout (hack/, _output/, ./...).
var buildCommand = regexp.MustCompile(`(^|[\s;&|(])(make|go|bash|sh|hack/|_output/|\./)(\s|/|$)|\bhack/|\b_output/bin/`)

type step struct {
	Name            string         `json:"name"`
	Uses            string         `json:"uses"`
	With            map[string]any `json:"with"`
	Run             string         `json:"run"`
	If              any            `json:"if"`
	ContinueOnError any            `json:"continue-on-error"`
}

// reviewGate says whether s is the step that refuses to sign unless the environment release has
// required reviewers, prevents self-review and lets no admin bypass them: it asks the API for
// those three, outside comments, and runs unconditionally, failing the job when it fails.
func (s step) reviewGate() bool {
	var code strings.Builder
	for _, line := range strings.Split(s.Run, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			code.WriteString(line + "\n")
		}
	}
	for _, want := range []string{"environments/release", "required_reviewers", "prevent_self_review", "can_admins_bypass"} {
		if !strings.Contains(code.String(), want) {
			return false
		}
	}
	return s.If == nil && s.ContinueOnError == nil
}

// label names the i-th step (from 0) of its job in a problem: its name, else its position.
func (s step) label(i int) string {
	if s.Name != "" {
		return s.Name
	}
	return fmt.Sprintf("step %d", i+1)
}

type job struct {
	Uses        string `json:"uses"`
	Permissions any    `json:"permissions"`
	Environment any    `json:"environment"`
	Steps       []step `json:"steps"`
}

type workflow struct {
	Permissions any            `json:"permissions"`
	Jobs        map[string]job `json:"jobs"`
}

// signs says whether the job's permissions grant id-token: write (write-all included).
func signs(perms any) bool {
	switch p := perms.(type) {
	case string:
		return p == "write-all"
	case map[string]any:
		return p["id-token"] == "write"
	}
	return false
}

func environmentName(env any) string {
	switch e := env.(type) {
	case string:
		return e
	case map[string]any:
		s, _ := e["name"].(string)
		return s
	}
	return ""
}

// Check returns what is wrong with a release workflow's split between building and signing.
func Check(content []byte) ([]string, error) {
	var w workflow
	if err := yaml.Unmarshal(content, &w); err != nil {
		return nil, err
	}
	var problems []string
	if signs(w.Permissions) {
		problems = append(problems, "the workflow's top-level permissions grant id-token: write to every job; grant it in the signing job only")
	}
	names := make([]string, 0, len(w.Jobs))
	for n := range w.Jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	signing := 0
	for _, n := range names {
		j := w.Jobs[n]
		if j.Uses != "" {
			// Its jobs, steps and permissions are in another file, which no check here reads.
			problems = append(problems, fmt.Sprintf("job %s calls the reusable workflow %s: the release workflow's jobs run their steps here, where their shape is checked", n, j.Uses))
		}
		problems = append(problems, buildFromSourceOnly(n, j)...)
		if !signs(j.Permissions) {
			problems = append(problems, buildActionsOnly(n, j)...)
			continue
		}
		signing++
		if environmentName(j.Environment) != "release" {
			problems = append(problems, fmt.Sprintf("job %s may sign but does not run in the protected environment release", n))
		}
		checked := false
		for i, s := range j.Steps {
			what := s.label(i)
			if s.Uses != "" && !signingUses.MatchString(s.Uses) {
				problems = append(problems, fmt.Sprintf("job %s may sign (id-token: write) but uses %s (%s): the signing job checks out and sets up nothing, only cosign and the build's artifacts", n, s.Uses, what))
			}
			for _, line := range strings.Split(s.Run, "\n") {
				if buildCommand.MatchString(line) {
					problems = append(problems, fmt.Sprintf("job %s may sign (id-token: write) but runs %q (%s): build in a job without id-token and sign its digests here", n, strings.TrimSpace(line), what))
				}
			}
			if s.reviewGate() {
				checked = true
			}
			if (strings.Contains(s.Run, "cosign sign") || s.attests()) && !checked {
				problems = append(problems, fmt.Sprintf("job %s signs (%s) before a step that refuses when the environment release lacks required reviewers, prevent_self_review, or can_admins_bypass false", n, what))
			}
		}
	}
	if signing != 1 {
		problems = append(problems, fmt.Sprintf("%d jobs may sign (id-token: write), want exactly one", signing))
	}
	return problems, nil
}
