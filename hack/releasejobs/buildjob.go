package releasejobs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// What the release is built from: the checkout of the tagged commit and the module proxy, never
// a cache another workflow wrote (CI's jobs run `make test` as root, and what they leave in Go's
// module and build caches would be compiled into what is signed), and no step after the checkout
// can read the job's token from .git/config.
var (
	checkoutAction = regexp.MustCompile(`^actions/checkout@`)
	setupGoAction  = regexp.MustCompile(`^actions/setup-go@`)
	cacheAction    = regexp.MustCompile(`^actions/cache(/[^@]*)?@`)
)

// buildActions is every action a job that may not sign may use, each by a full commit SHA: the
// checkout, Go, and the upload of what the build produced. The checks of buildFromSourceOnly see
// only the step itself; anything else (a local composite action ./..., a container docker://...,
// another owner's checkout or cache action, a reusable workflow) could restore a cache or keep the
// token where they do not look.
var buildActions = regexp.MustCompile(`^(actions/checkout|actions/setup-go|actions/upload-artifact)@[0-9a-f]{40}$`)

// literalFalse says whether an action input is the literal false (a YAML boolean or the string
// "false"): an expression or anything else is not provably off.
func literalFalse(v any) bool {
	switch x := v.(type) {
	case bool:
		return !x
	case string:
		return strings.EqualFold(x, "false")
	}
	return false
}

// inputs returns a step's with: keyed by lower-case name, as the runner reads them (an action's
// inputs are case-insensitive: Persist-Credentials sets persist-credentials), and the names two or
// more keys fold to, whose value the check could not know.
func (s step) inputs() (map[string]any, []string) {
	in := make(map[string]any, len(s.With))
	var clash []string
	for k, v := range s.With {
		lk := strings.ToLower(k)
		if _, dup := in[lk]; dup {
			clash = append(clash, lk)
		}
		in[lk] = v
	}
	sort.Strings(clash)
	return in, clash
}

// buildFromSourceOnly returns what is wrong with job n's steps: a checkout that persists its
// credentials, a setup-go that restores its cache (setup-go caches unless told cache: false), a
// cache action, or inputs whose names differ only in case.
func buildFromSourceOnly(n string, j job) []string {
	var problems []string
	for i, s := range j.Steps {
		uses := strings.ToLower(s.Uses)
		what := s.label(i)
		in, clash := s.inputs()
		for _, k := range clash {
			problems = append(problems, fmt.Sprintf("job %s sets the input %s twice (%s, %s), in names that differ only in case: inputs are case-insensitive, so which one the action reads is not what the check can see; set it once", n, k, s.Uses, what))
		}
		switch {
		case checkoutAction.MatchString(uses) && !literalFalse(in["persist-credentials"]):
			problems = append(problems, fmt.Sprintf("job %s checks out (%s, %s) without persist-credentials: false: the token would stay in .git/config for every later step, the build's tools and dependencies among them, to read", n, s.Uses, what))
		case setupGoAction.MatchString(uses) && !literalFalse(in["cache"]):
			problems = append(problems, fmt.Sprintf("job %s sets up Go (%s, %s) without cache: false: setup-go would restore the module and build cache CI's jobs write, and the release would be built from it", n, s.Uses, what))
		case cacheAction.MatchString(uses):
			problems = append(problems, fmt.Sprintf("job %s uses %s (%s): a release workflow restores and saves no cache; the release is built from the checkout and the module proxy alone", n, s.Uses, what))
		}
	}
	return problems
}

// buildActionsOnly returns the steps of job n, a job that may not sign, that use an action
// buildActions does not list.
func buildActionsOnly(n string, j job) []string {
	var problems []string
	for i, s := range j.Steps {
		if s.Uses == "" || buildActions.MatchString(strings.ToLower(s.Uses)) {
			continue
		}
		problems = append(problems, fmt.Sprintf("job %s uses %s (%s): a job of the release workflow other than the signing one uses only actions/checkout, actions/setup-go and actions/upload-artifact, each pinned by a full commit SHA (owner/repo@<40 hex>); a local action, a container, another action or a reusable workflow could restore a cache or keep the token where this check does not look", n, s.Uses, s.label(i)))
	}
	return problems
}
