package web

import (
	"regexp"
	"strings"
	"unicode"
)

// refusedMessage is what a page says of a refusal whose own words cannot
// be shown (empty, or carrying internal detail).
const refusedMessage = "That request could not be completed. Check what you entered and try again."

// leakMarkers are fragments that only internal errors carry: a database's
// or driver's words, a Go runtime's, a network dial. A message holding one
// is never shown to a person.
var leakMarkers = []string{
	"sql", "sqlite", "pq:", "pgx", "pgconn", "bun:", "constraint failed", "duplicate key",
	"no rows in result set", "goroutine", "panic:", "runtime error", "nil pointer",
	"context deadline exceeded", "context canceled", "dial tcp", "connection refused", "i/o timeout",
	"%!", ".go:", "unexpected eof", "invalid memory address",
}

// goChain matches the opening of a Go error chain: two lowercase package
// or operation prefixes, each with its colon ("feedback: reload 12: ...");
// one field-like prefix ("description: at most 500 characters") is a
// domain's own wording.
var goChain = regexp.MustCompile(`^[a-z][a-z0-9_./-]*: [a-z][a-z0-9_./ -]*: `)

// leaksDetail reports whether msg carries internal detail.
func leaksDetail(msg string) bool {
	if goChain.MatchString(msg) {
		return true
	}
	low := strings.ToLower(msg)
	for _, m := range leakMarkers {
		if strings.Contains(low, m) {
			return true
		}
	}
	return false
}

// pageMessage is a domain or capability refusal as a page shows it: a
// full sentence (capital first letter, full stop), an opening identifier
// (a field such as maxRole) named as a field, and never internal detail:
// a message that carries some, or none at all, becomes refusedMessage.
func pageMessage(msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" || leaksDetail(msg) {
		return refusedMessage
	}
	first, rest, _ := strings.Cut(msg, " ")
	if camelIdentifier(first) {
		msg = "The " + first + " field " + rest
	}
	return sentence(msg)
}

// camelIdentifier reports whether w is a lowerCamelCase identifier (an
// input field's name, as agents see it).
func camelIdentifier(w string) bool {
	if w == "" || !unicode.IsLower(rune(w[0])) {
		return false
	}
	upper := false
	for _, c := range w {
		switch {
		case unicode.IsUpper(c):
			upper = true
		case c < unicode.MaxASCII && (unicode.IsLetter(c) || unicode.IsDigit(c)):
		default:
			return false
		}
	}
	return upper
}
