package mailauth_test

import (
	"net"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
)

// Review (#30): a From header that net/mail cannot read as an address list
// is still shown to the person (mail.Parse falls back to the header's
// decoded text), so DMARC must not answer "none" for it: a forger would
// hide a bank's address in an encoded word and land in the inbox with a
// sender of their own SPF.
func TestReviewUnreadableFromIsNotUnauthenticated(t *testing.T) {
	dns := &fakeDNS{txt: map[string][]string{
		"evil.test":           {"v=spf1 +all"},
		"_dmarc.outside.test": {"v=DMARC1; p=reject"},
	}}
	check := mailauth.Check(mailauth.Options{Resolver: dns})
	for _, from := range []string{
		"=?utf-8?q?Outside_Bank_<ceo@outside.test>?=",
		"ceo@outside.test <junk",
		"Outside Bank <ceo@outside.test",
	} {
		raw := "From: " + from + "\r\nTo: alice@mail.test\r\nSubject: pay\r\nMessage-ID: <m@x>\r\n\r\nPay now.\r\n"
		p, err := mail.Parse([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.From, "ceo@outside.test") {
			t.Fatalf("%q: the page would show %q", from, p.From)
		}
		got, fail := check(t.Context(), mail.AuthInput{Raw: []byte(raw), RemoteIP: net.ParseIP(badIP), Helo: "evil.test", MailFrom: "x@evil.test"})
		if !fail || !strings.Contains(got, "dmarc=permerror") {
			t.Errorf("From %q shown as %q: %q, fail %v; want dmarc=permerror and a quarantine", from, p.From, got, fail)
		}
	}
	// No From at all, or an empty one: nothing to align, nothing shown.
	for _, raw := range []string{"Subject: x\r\n\r\nx\r\n", "From: \r\nSubject: x\r\n\r\nx\r\n"} {
		if got, fail := check(t.Context(), mail.AuthInput{Raw: []byte(raw), RemoteIP: net.ParseIP(badIP), Helo: "evil.test", MailFrom: "x@evil.test"}); fail {
			t.Errorf("%q: %q quarantined", raw, got)
		}
	}
}
