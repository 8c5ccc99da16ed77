package atomicwriter

// Specifies ValidateKey and ValidatePath: which names a payload may use, and that every
// rejection quotes the offending name.

import (
	"fmt"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	good := []string{
		"ca.crt", "tls.key", "tls.crt", "a-b_c.d", ".dockerconfigjson", "a",
		"A.B-C_D.0123456789", ".hidden", "a..b", "x.", strings.Repeat("k", 253),
	}
	for _, k := range good {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	bad := []string{
		"", ".", "..", "..data", "..2026_11_21_10_20_30.1", "...", "..x",
		"a/b", "/abs", "../etc", "a\x00b", " ", "a b", "tab\t", "nl\n", `back\slash`,
		"ümlaut", "a:b", "a*", strings.Repeat("k", 254),
	}
	for _, k := range bad {
		err := ValidateKey(k)
		if err == nil {
			t.Errorf("ValidateKey(%q) = nil, want an error", k)
			continue
		}
		// The message must name the key, quoted, so an operator can find it.
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", k)) {
			t.Errorf("ValidateKey(%q) error %q does not quote the key", k, err)
		}
	}
}

func TestValidatePath(t *testing.T) {
	seg := strings.Repeat("s", 253)
	deepest := strings.TrimSuffix(strings.Repeat(seg+"/", 16), "/") // 16 segments, 4063 bytes
	good := []string{
		"a", "ca.crt", "certs/ca.pem", "a/b/c", ".dockerconfigjson", "conf/.hidden", "a..b/c..d",
		"x./y.", strings.Repeat("d/", 15) + "f", deepest,
	}
	for _, p := range good {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                                    "empty",
		"/abs":                                "absolute",
		"/":                                   "absolute",
		"../x":                                "escapes upwards",
		"a/../b":                              "dot-dot segment",
		"a/..":                                "trailing dot-dot",
		"..":                                  "dot-dot",
		".":                                   "dot",
		"a/./b":                               "dot segment",
		"./a":                                 "leading dot segment",
		"a//b":                                "empty segment",
		"a/":                                  "trailing slash",
		"a/..b":                               `segment starting with ".." (reserved)`,
		"..data/x":                            "reaches ..data",
		"..2026_11_21_10_20_30.1/x":           "reaches a payload dir",
		`a\b`:                                 "backslash",
		`..\x`:                                "backslash dot-dot",
		"a b/c":                               "space",
		"a/b\x00":                             "NUL",
		"ü/x":                                 "non-ASCII",
		strings.Repeat("d/", 16) + "f":        "17 segments",
		"a/" + strings.Repeat("k", 254):       "segment longer than a key",
		strings.Repeat("a", 5000):             "longer than 4096 bytes",
		strings.Repeat("a/", 2048) + "bcdefg": "longer than 4096 bytes, many segments",
	}
	for p, why := range bad {
		err := ValidatePath(p)
		if err == nil {
			t.Errorf("ValidatePath(%q) = nil, want an error (%s)", p, why)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", p)) {
			t.Errorf("ValidatePath(%q) error %q does not quote the path", p, err)
		}
	}
}
