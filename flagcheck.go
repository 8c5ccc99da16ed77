package main

// Refusing flags: what the driver says when its flags cannot run. Under a DaemonSet a refusal is a
// crash loop whose only trace is the container's log, so every refusal names the flag, the value
// given and what is allowed, and goes to klog (stderr, what `kubectl logs` shows) before the
// process exits 2.

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"

	"k8s.io/klog/v2"
)

// checkOptions refuses values the flag package accepts but the driver cannot run with: a relist
// interval of 0 would relist without pause, a burst of 0 would block every request, and so on.
func checkOptions(o *options) error {
	for _, c := range []struct {
		bad     bool
		flag    string
		value   any
		allowed string
	}{
		{o.qps <= 0, "kube-api-qps", o.qps, "more than 0 (requests per second)"},
		{o.burst < 1, "kube-api-burst", o.burst, "at least 1"},
		{o.relistInterval <= 0, "relist-interval", o.relistInterval, "a positive duration (60s, 2m)"},
		{o.relistSpread < 0 || o.relistSpread > 1, "relist-spread", o.relistSpread, "between 0 and 1 (0: as fast as the rate limit allows, 0.5: half the interval)"},
		{o.cacheEntries < 1, "cache-max-entries", o.cacheEntries, "at least 1"},
		{o.cacheBytes < 0, "cache-max-bytes", o.cacheBytes, "0 or more bytes"},
		{o.cacheTTL < 0, "cache-ttl", o.cacheTTL, "0 or a positive duration (10s)"},
		{o.authzTTL < 0, "authz-cache-ttl", o.authzTTL, "0 or a positive duration (10s)"},
		{o.healthMaxConns < 1, "health-max-connections", o.healthMaxConns, "at least 1"},
		{o.statusLease < time.Second, "status-lease-duration", o.statusLease, "at least 1s"},
	} {
		if c.bad {
			return fmt.Errorf("--%s=%v: must be %s", c.flag, c.value, c.allowed)
		}
	}
	return nil
}

// The flag package's own errors: an unknown flag, or a value it cannot parse ("for flag -name",
// or for a boolean "for -name").
var (
	unknownFlagError = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	badValueError    = regexp.MustCompile(`^invalid (?:boolean )?value ".*" for (?:flag )?-+([^:]*): `)
)

// explainParseError adds to the flag package's error what is allowed: the flag's own usage for a
// value it could not parse, the way to list the flags for one it does not know.
func explainParseError(fs *flag.FlagSet, err error) error {
	if m := badValueError.FindStringSubmatch(err.Error()); m != nil {
		if f := fs.Lookup(m[1]); f != nil {
			return fmt.Errorf("%w; --%s is %s (default %q)", err, f.Name, f.Usage, f.DefValue)
		}
	}
	if unknownFlagError.MatchString(err.Error()) {
		return fmt.Errorf("%w; run with --help for the flags there are", err)
	}
	return err
}

// refuseFlags logs why the flags were refused and exits 2, the exit code of a usage error.
func refuseFlags(err error) {
	klog.ErrorS(err, "Refusing to start: a flag or argument is not valid")
	klog.Flush()
	os.Exit(2)
}

// errNoArguments says what a stray positional argument is refused for.
var errNoArguments = fmt.Errorf("the driver takes flags only, no arguments (a boolean flag takes its value after =: --version=true); "+
	"the subcommands are %s (run with --help for the flags and the subcommands)", subcommandNames())
