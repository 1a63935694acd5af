package mail

import (
	"errors"
	"regexp"
	"slices"
	"strings"
)

// DefaultReserved are the local parts that belong to the platform, not to
// any user: mail to them lands in a system mailbox that admins read.
var DefaultReserved = []string{"postmaster", "abuse", "security", "support", "admin", "hostmaster", "webmaster"}

// Recipient is an address of the mail domain, resolved by its shape.
type Recipient struct {
	// Local is the mailbox's name: a username, or a reserved local part
	// when System is set.
	Local string
	// Tag is what followed "+" (RFC 5233 subaddress), lowercased; empty
	// when there was none.
	Tag string
	// System marks a reserved local part.
	System bool
}

// Address is the recipient as it is stored: local[+tag]@domain.
func (r Recipient) Address(domain string) string {
	if r.Tag != "" {
		return r.Local + "+" + r.Tag + "@" + domain
	}
	return r.Local + "@" + domain
}

// ErrNotOurs refuses an address that is not one of the mail domain's.
var ErrNotOurs = errors.New("mail: no such mailbox here")

var (
	localName = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$`)
	tagName   = regexp.MustCompile(`^[a-z0-9._=-]{1,64}$`)
)

// ParseRecipient resolves addr, as given in RCPT TO (angle brackets
// already removed), against the mail domain: "user@domain" and
// "user+tag@domain" name a user's mailbox (the caller checks the user
// exists), a reserved local part a system mailbox. Everything else is
// ErrNotOurs: another domain, quoted local parts, source routes, percent
// and bang hacks, a second "@", control characters, or a name no username
// could have.
func ParseRecipient(addr, domain string, reserved []string) (Recipient, error) {
	if domain == "" || len(addr) > 254 {
		return Recipient{}, ErrNotOurs
	}
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 {
		return Recipient{}, ErrNotOurs
	}
	local, dom := addr[:at], addr[at+1:]
	// ASCII case only: strings.EqualFold folds Unicode too (the long s
	// to "s", the Kelvin sign to "k"), which would take another name.
	if !asciiEqualFold(dom, domain) {
		return Recipient{}, ErrNotOurs
	}
	for _, c := range local {
		// Quotes, routing and percent hacks, and anything outside the
		// characters of a username and a tag, are refused outright.
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == '_' || c == '=') {
			return Recipient{}, ErrNotOurs
		}
	}
	local = strings.ToLower(local)
	name, tag, tagged := strings.Cut(local, "+")
	if !localName.MatchString(name) {
		return Recipient{}, ErrNotOurs
	}
	if tagged && !tagName.MatchString(tag) {
		return Recipient{}, ErrNotOurs
	}
	return Recipient{Local: name, Tag: tag, System: slices.Contains(reserved, name)}, nil
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if x >= 0x80 || y >= 0x80 {
			return false
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
