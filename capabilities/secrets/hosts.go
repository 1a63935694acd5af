package secrets

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// MaxAllowedHosts is how many host patterns one secret may carry.
const MaxAllowedHosts = 32

// NormalizeHost checks one allowed-host pattern and returns its canonical
// form. A pattern is an exact host name ("api.example.com"), a subdomain
// form ("*.example.com": every name under example.com, not example.com
// itself), or an IPv4 address. Names are lowercased and internationalized
// names are converted to their ASCII (punycode) form; a trailing dot is
// dropped. A port may follow (":8443"); without one the pattern approves
// port 443 only, the https default, and ":443" is dropped as redundant.
// Schemes, paths, user info, IPv6 literals and a '*' anywhere but a
// leading "*." are refused, as is a subdomain form over a single label
// ("*.com") or over a public suffix ("*.co.uk", "*.github.io"), whose
// names belong to many unrelated owners.
func NormalizeHost(pattern string) (string, error) {
	p := strings.TrimSpace(pattern)
	if p == "" {
		return "", fmt.Errorf("%w: an allowed host is empty", ErrInvalid)
	}
	p, port, err := cutPort(p)
	if err != nil {
		return "", fmt.Errorf("%w: allowed host %q: %v", ErrInvalid, pattern, err)
	}
	if strings.ContainsAny(p, "/:@?#[]\\ \t") {
		return "", fmt.Errorf("%w: allowed host %q must be a host name with an optional port, without scheme or path", ErrInvalid, pattern)
	}
	h, err := normalizeName(p, pattern)
	if err != nil {
		return "", err
	}
	if port != "" {
		return h + ":" + port, nil
	}
	return h, nil
}

// DefaultPort is the port a pattern without one approves: https's.
const DefaultPort = "443"

// cutPort splits a trailing ":port" off a pattern: a decimal 1-65535
// without leading zeros. The default port is returned as "".
func cutPort(p string) (host, port string, err error) {
	i := strings.LastIndexByte(p, ':')
	if i < 0 || strings.Count(p, ":") > 1 || strings.ContainsAny(p, "/@?#[]") {
		return p, "", nil // none, or a URL or IPv6 literal (refused by the caller)
	}
	host, port = p[:i], p[i+1:]
	n, convErr := strconv.Atoi(port)
	if convErr != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", "", fmt.Errorf("the port must be a number from 1 to 65535")
	}
	if port == DefaultPort {
		port = ""
	}
	return host, port, nil
}

// normalizeName is NormalizeHost for the name part of a pattern.
func normalizeName(p, pattern string) (string, error) {
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
		if ps, _ := publicsuffix.PublicSuffix(ascii); ps == ascii {
			// *.co.uk, *.github.io, *.herokuapp.com: every name under a
			// public suffix belongs to someone else.
			return "", fmt.Errorf("%w: allowed host %q would match every site under the public suffix %s; list the exact hosts instead", ErrInvalid, pattern, ascii)
		}
		if numericTail(ascii) {
			// "*.0.113.7" names no domain; it would only ever match
			// IP addresses.
			return "", fmt.Errorf("%w: allowed host %q: a subdomain form needs a domain name, not part of an address", ErrInvalid, pattern)
		}
		return "*." + ascii, nil
	}
	return ascii, nil
}

// canonicalHost converts a host name to ASCII, lowercases it and checks
// every label is letters, digits and inner hyphens (1-63 characters).
//
// The conversion is IDNA's lookup mapping applied to the name as given,
// which is what net/http applies before it resolves a non-ASCII host. The
// name must not be lowercased first: strings.ToLower maps U+0130 (İ) to a
// plain "i" where IDNA maps it to "i" plus a combining dot, so "gİthub.com"
// would compare as github.com while the request went to another,
// registrable, domain.
func canonicalHost(h string) (string, error) {
	ascii, err := idna.Lookup.ToASCII(h)
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

// numericTail reports whether a name's last label is all digits: no
// top-level domain is, so such a name is (part of) an address.
func numericTail(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// HostAllowed reports whether host (in CanonicalRequestHost form) on port
// (a URL's port: "" is 443) is approved by one of the normalized patterns:
// the same port (443 when the pattern names none) and an exact match, or a name
// strictly under a "*.domain" pattern. A subdomain form never reaches
// across a public suffix: "*.amazonaws.com" approves sts.amazonaws.com but
// not anyone.s3.amazonaws.com, whose registrable domain is its own (the
// public suffix list says so). An IP address only ever matches itself.
func HostAllowed(patterns []string, host, port string) bool {
	if port == "" || port == DefaultPort {
		port = DefaultPort
	}
	numeric := numericTail(host)
	site, siteErr := publicsuffix.EffectiveTLDPlusOne(host)
	for _, p := range patterns {
		p, pport, err := cutPort(p)
		if err != nil {
			continue
		}
		if pport == "" {
			pport = DefaultPort
		}
		if pport != port {
			continue
		}
		if suffix, ok := strings.CutPrefix(p, "*"); ok {
			base := suffix[1:]
			if !numeric && siteErr == nil && (base == site || strings.HasSuffix(base, "."+site)) &&
				len(host) > len(suffix) && strings.HasSuffix(host, suffix) {
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
