package secrets

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// MaxAllowedHosts is how many host patterns one secret may carry.
const MaxAllowedHosts = 32

// NormalizeHost checks one allowed-host pattern and returns its canonical
// form. A pattern is an exact host name ("api.example.com"), a subdomain
// form ("*.example.com": every name under example.com, not example.com
// itself), or an IPv4 address. Names are lowercased and internationalized
// names are converted to their ASCII (punycode) form; a trailing dot is
// dropped. Schemes, ports, paths, user info, IPv6 literals and a '*'
// anywhere but a leading "*." are refused, as is a subdomain form over a
// single label ("*.com").
func NormalizeHost(pattern string) (string, error) {
	p := strings.TrimSpace(pattern)
	if p == "" {
		return "", fmt.Errorf("%w: an allowed host is empty", ErrInvalid)
	}
	if strings.ContainsAny(p, "/:@?#[]\\ \t") {
		return "", fmt.Errorf("%w: allowed host %q must be a bare host name, without scheme, port or path", ErrInvalid, pattern)
	}
	wildcard := strings.HasPrefix(p, "*.")
	if wildcard {
		p = p[2:]
	}
	if strings.Contains(p, "*") {
		return "", fmt.Errorf("%w: allowed host %q may use '*' only as a leading \"*.\"", ErrInvalid, pattern)
	}
	p = strings.TrimSuffix(p, ".")
	if a, err := netip.ParseAddr(p); err == nil {
		if wildcard || !a.Is4() {
			return "", fmt.Errorf("%w: allowed host %q: only a plain IPv4 address may stand for a host", ErrInvalid, pattern)
		}
		return a.String(), nil
	}
	ascii, err := canonicalHost(p)
	if err != nil {
		return "", fmt.Errorf("%w: allowed host %q is not a valid host name", ErrInvalid, pattern)
	}
	if wildcard {
		if !strings.Contains(ascii, ".") {
			return "", fmt.Errorf("%w: allowed host %q would match a whole top-level domain", ErrInvalid, pattern)
		}
		return "*." + ascii, nil
	}
	return ascii, nil
}

// canonicalHost lowercases a host name, converts it to ASCII and checks
// every label is letters, digits and inner hyphens (1-63 characters).
func canonicalHost(h string) (string, error) {
	ascii, err := idna.Lookup.ToASCII(strings.ToLower(h))
	if err != nil {
		return "", err
	}
	ascii = strings.ToLower(ascii)
	if ascii == "" || len(ascii) > 253 {
		return "", fmt.Errorf("bad length")
	}
	for label := range strings.SplitSeq(ascii, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("bad label")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("bad label")
			}
		}
	}
	return ascii, nil
}

// NormalizeHosts normalizes a list of patterns, dropping duplicates and
// keeping their order.
func NormalizeHosts(patterns []string) ([]string, error) {
	out := make([]string, 0, len(patterns))
	seen := map[string]bool{}
	for _, p := range patterns {
		n, err := NormalizeHost(p)
		if err != nil {
			return nil, err
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) > MaxAllowedHosts {
		return nil, fmt.Errorf("%w: at most %d allowed hosts per secret", ErrInvalid, MaxAllowedHosts)
	}
	return out, nil
}

// CanonicalRequestHost returns the form of a request's host name (without
// port) that HostAllowed compares: lowercase ASCII, no trailing dot.
func CanonicalRequestHost(host string) (string, error) {
	h := strings.TrimSuffix(host, ".")
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return a.String(), nil
	}
	return canonicalHost(h)
}

// HostAllowed reports whether host (in CanonicalRequestHost form) is
// approved by one of the normalized patterns: an exact match, or a name
// strictly under a "*.domain" pattern.
func HostAllowed(patterns []string, host string) bool {
	for _, p := range patterns {
		if suffix, ok := strings.CutPrefix(p, "*"); ok {
			if len(host) > len(suffix) && strings.HasSuffix(host, suffix) {
				return true
			}
			continue
		}
		if p == host {
			return true
		}
	}
	return false
}
