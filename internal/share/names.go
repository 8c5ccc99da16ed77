package share

import "regexp"

var (
	// RFC 1123 subdomain: the API server's rule for object names (shares, Secrets, ConfigMaps).
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// RFC 1123 label: namespaces and service accounts' namespaces.
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

// ValidName says whether s is an object name the API server accepts (shares, Secrets, ConfigMaps).
func ValidName(s string) bool { return len(s) <= 253 && dnsSubdomain.MatchString(s) }

// ValidLabel says whether s is a namespace name the API server accepts.
func ValidLabel(s string) bool { return len(s) <= 63 && dnsLabel.MatchString(s) }
