package releasejobs

import (
	"fmt"
	"regexp"
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

// buildFromSourceOnly returns what is wrong with job n's steps: a checkout that persists its
// credentials, a setup-go that restores its cache (setup-go caches unless told cache: false), or
// a cache action.
func buildFromSourceOnly(n string, j job) []string {
	var problems []string
	for i, s := range j.Steps {
		uses := strings.ToLower(s.Uses)
		what := s.label(i)
		switch {
		case checkoutAction.MatchString(uses) && !literalFalse(s.With["persist-credentials"]):
			problems = append(problems, fmt.Sprintf("job %s checks out (%s, %s) without persist-credentials: false: the token would stay in .git/config for every later step, the build's tools and dependencies among them, to read", n, s.Uses, what))
		case setupGoAction.MatchString(uses) && !literalFalse(s.With["cache"]):
			problems = append(problems, fmt.Sprintf("job %s sets up Go (%s, %s) without cache: false: setup-go would restore the module and build cache CI's jobs write, and the release would be built from it", n, s.Uses, what))
		case cacheAction.MatchString(uses):
			problems = append(problems, fmt.Sprintf("job %s uses %s (%s): a release workflow restores and saves no cache; the release is built from the checkout and the module proxy alone", n, s.Uses, what))
		}
	}
	return problems
}
