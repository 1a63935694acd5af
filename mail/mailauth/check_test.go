package mailauth_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
)

// fakeDNS answers from its maps; a name it does not hold does not exist.
// Names in temp fail temporarily; with block set every lookup waits for
// its context to end. It counts lookups.
type fakeDNS struct {
	txt   map[string][]string
	ips   map[string][]string
	temp  map[string]bool
	block bool
	n     atomic.Int32
}

func (f *fakeDNS) answer(ctx context.Context, name string) error {
	f.n.Add(1)
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if f.block {
		<-ctx.Done()
		return &net.DNSError{Err: "timeout", Name: name, IsTimeout: true, IsTemporary: true}
	}
	if f.temp[name] {
		return &net.DNSError{Err: "server failure", Name: name, IsTemporary: true}
	}
	return nil
}

func notFound(name string) error {
	return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func (f *fakeDNS) LookupTXT(ctx context.Context, name string) ([]string, error) {
	if err := f.answer(ctx, name); err != nil {
		return nil, err
	}
	if v, ok := f.txt[strings.TrimSuffix(strings.ToLower(name), ".")]; ok {
		return v, nil
	}
	return nil, notFound(name)
}

func (f *fakeDNS) LookupIPAddr(ctx context.Context, name string) ([]net.IPAddr, error) {
	if err := f.answer(ctx, name); err != nil {
		return nil, err
	}
	var out []net.IPAddr
	for _, s := range f.ips[strings.TrimSuffix(strings.ToLower(name), ".")] {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	if out == nil {
		return nil, notFound(name)
	}
	return out, nil
}

func (f *fakeDNS) LookupMX(ctx context.Context, name string) ([]*net.MX, error) {
	if err := f.answer(ctx, name); err != nil {
		return nil, err
	}
	return nil, notFound(name)
}

func (f *fakeDNS) LookupAddr(ctx context.Context, addr string) ([]string, error) {
	if err := f.answer(ctx, addr); err != nil {
		return nil, err
	}
	return nil, notFound(addr)
}

const (
	goodIP = "192.0.2.10"   // outside.test's and bank.test's mail server
	badIP  = "198.51.100.7" // anyone else
)

func TestCheckSPFAndDMARC(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key := "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(pub)
	dns := &fakeDNS{
		txt: map[string][]string{
			"outside.test":                {"v=spf1 ip4:192.0.2.0/24 -all"},
			"_dmarc.outside.test":         {"v=DMARC1; p=reject"},
			"mail.outside.test":           {"v=spf1 ip4:192.0.2.0/24 -all"},
			"soft.test":                   {"v=spf1 ip4:192.0.2.0/24 ~all"},
			"_dmarc.soft.test":            {"v=DMARC1; p=none"},
			"hard.test":                   {"v=spf1 ip4:192.0.2.0/24 -all"},
			"_dmarc.hard.test":            {"v=DMARC1; p=none"},
			"bank.test":                   {"v=spf1 ip4:192.0.2.0/24 -all"},
			"_dmarc.bank.test":            {"v=DMARC1; p=none; sp=quarantine; adkim=r; aspf=r"},
			"strict.test":                 {"v=spf1 a:mx.strict.test -all"},
			"mail.strict.test":            {"v=spf1 ip4:192.0.2.0/24 -all"},
			"_dmarc.strict.test":          {"v=DMARC1; p=quarantine; aspf=s"},
			"evil.test":                   {"v=spf1 +all"},
			"sel._domainkey.outside.test": {key},
			"sel._domainkey.evil.test":    {key},
			"loop.test":                   {"v=spf1 include:loop.test -all"},
			"many.test":                   {"v=spf1 " + includes(12) + " -all"},
			"_dmarc.flaky.test":           {"v=DMARC1; p=reject"},
			"flaky.test":                  {"v=spf1 ip4:192.0.2.0/24 -all"},
		},
		ips:  map[string][]string{"mx.strict.test": {goodIP}},
		temp: map[string]bool{"_dmarc.flaky.test": true},
	}
	for i := range 12 {
		dns.txt[fmt.Sprintf("i%d.many.test", i)] = []string{"v=spf1 a:nothing.many.test ?all"}
	}
	check := mailauth.Check(mailauth.Options{Resolver: dns})
	msg := func(from string) string {
		return "From: Someone <" + from + ">\r\nTo: alice@mail.test\r\nSubject: hello\r\nMessage-ID: <m@x>\r\n\r\nHello.\r\n"
	}
	sign := func(domain, m string) string {
		var out bytes.Buffer
		if err := dkim.Sign(&out, strings.NewReader(m), &dkim.SignOptions{Domain: domain, Selector: "sel", Signer: priv}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	for _, tc := range []struct {
		name, raw, ip, mailFrom string
		want                    string
		fail                    bool
	}{
		{"spf pass, aligned", msg("carol@outside.test"), goodIP, "carol@outside.test",
			"spf=pass smtp.mailfrom=outside.test; dkim=none; dmarc=pass header.from=outside.test", false},
		{"spf fail, dmarc reject", msg("carol@outside.test"), badIP, "carol@outside.test",
			"spf=fail smtp.mailfrom=outside.test; dkim=none; dmarc=fail header.from=outside.test policy=reject", true},
		{"forwarded: spf fails but an aligned signature passes", sign("outside.test", msg("carol@outside.test")), badIP, "carol@outside.test",
			"spf=fail smtp.mailfrom=outside.test; dkim=pass header.d=outside.test; dmarc=pass header.from=outside.test", false},
		{"signed by another domain, From forged, dmarc reject", sign("evil.test", msg("ceo@outside.test")), badIP, "x@evil.test",
			"spf=pass smtp.mailfrom=evil.test; dkim=pass header.d=evil.test; dmarc=fail header.from=outside.test policy=reject", true},
		{"softfail, policy none: recorded only", msg("a@soft.test"), badIP, "a@soft.test",
			"spf=softfail smtp.mailfrom=soft.test; dkim=none; dmarc=fail header.from=soft.test policy=none", false},
		{"hard spf fail, policy none: quarantined for spf", msg("a@hard.test"), badIP, "a@hard.test",
			"spf=fail smtp.mailfrom=hard.test; dkim=none; dmarc=fail header.from=hard.test policy=none", true},
		{"subdomain policy of the organisational domain", msg("alerts@alerts.bank.test"), badIP, "x@evil.test",
			"spf=pass smtp.mailfrom=evil.test; dkim=none; dmarc=fail header.from=alerts.bank.test policy=quarantine", true},
		{"relaxed spf alignment: a subdomain's envelope", msg("carol@outside.test"), goodIP, "bounce@mail.outside.test",
			"spf=pass smtp.mailfrom=mail.outside.test; dkim=none; dmarc=pass header.from=outside.test", false},
		{"strict spf alignment refuses the subdomain", msg("a@strict.test"), goodIP, "bounce@mail.strict.test",
			"spf=pass smtp.mailfrom=mail.strict.test; dkim=none; dmarc=fail header.from=strict.test policy=quarantine", true},
		{"dmarc record lookup fails temporarily: nothing quarantined", msg("a@flaky.test"), goodIP, "a@flaky.test",
			"spf=pass smtp.mailfrom=flaky.test; dkim=none; dmarc=temperror header.from=flaky.test", false},
		{"no records at all", msg("someone@nowhere.test"), badIP, "someone@nowhere.test",
			"spf=none smtp.mailfrom=nowhere.test; dkim=none; dmarc=none header.from=nowhere.test", false},
		{"two From domains", "From: a@outside.test, b@evil.test\r\nSubject: x\r\n\r\nx\r\n", goodIP, "a@outside.test",
			"spf=pass smtp.mailfrom=outside.test; dkim=none; dmarc=permerror", true},
		{"two From headers", "From: a@evil.test\r\nFrom: b@outside.test\r\nSubject: x\r\n\r\nx\r\n", goodIP, "a@evil.test",
			"spf=pass smtp.mailfrom=evil.test; dkim=none; dmarc=permerror", true},
		{"an include loop ends as permerror", msg("a@loop.test"), badIP, "a@loop.test",
			"spf=permerror smtp.mailfrom=loop.test; dkim=none; dmarc=none header.from=loop.test", false},
		{"more than 10 lookups ends as permerror", msg("a@many.test"), badIP, "a@many.test",
			"spf=permerror smtp.mailfrom=many.test; dkim=none; dmarc=none header.from=many.test", false},
		{"a bounce: SPF checks the HELO name", msg("mailer-daemon@outside.test"), goodIP, "",
			"spf=pass smtp.mailfrom=outside.test; dkim=none; dmarc=pass header.from=outside.test", false},
		{"not over SMTP: no SPF", msg("carol@outside.test"), "", "carol@outside.test",
			"spf=none; dkim=none; dmarc=fail header.from=outside.test policy=reject", true},
	} {
		dns.n.Store(0)
		in := mail.AuthInput{Raw: []byte(tc.raw), RemoteIP: net.ParseIP(tc.ip), Helo: "outside.test", MailFrom: tc.mailFrom}
		got, fail := check(t.Context(), in)
		if got != tc.want || fail != tc.fail {
			t.Errorf("%s:\n got %q, fail %v\nwant %q, %v", tc.name, got, fail, tc.want, tc.fail)
		}
		if n := dns.n.Load(); n > 25 {
			t.Errorf("%s: %d DNS lookups", tc.name, n)
		}
	}
}

func includes(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf("include:i%d.many.test", i))
	}
	return strings.Join(parts, " ")
}

// A resolver that never answers holds a message no longer than the
// check's timeout: every result is a temperror and nothing is
// quarantined.
func TestCheckBoundedByTimeout(t *testing.T) {
	dns := &fakeDNS{block: true}
	check := mailauth.Check(mailauth.Options{Resolver: dns, Timeout: 50 * time.Millisecond})
	raw := "From: carol@outside.test\r\nSubject: x\r\nDKIM-Signature: v=1; a=ed25519-sha256; d=outside.test; s=sel; h=from; bh=x; b=x\r\n\r\nx\r\n"
	got, fail := check(t.Context(), mail.AuthInput{Raw: []byte(raw), RemoteIP: net.ParseIP(goodIP), Helo: "outside.test", MailFrom: "carol@outside.test"})
	if fail || !strings.Contains(got, "spf=temperror") || !strings.Contains(got, "dmarc=temperror") || !strings.Contains(got, "dkim=temperror") {
		t.Errorf("blocked resolver: %q, fail %v", got, fail)
	}
}

// The checks can be turned off one by one.
func TestCheckOptions(t *testing.T) {
	dns := &fakeDNS{txt: map[string][]string{"outside.test": {"v=spf1 -all"}, "_dmarc.outside.test": {"v=DMARC1; p=reject"}}}
	raw := []byte("From: carol@outside.test\r\nSubject: x\r\n\r\nx\r\n")
	in := mail.AuthInput{Raw: raw, RemoteIP: net.ParseIP(badIP), MailFrom: "carol@outside.test"}
	for _, tc := range []struct {
		o    mailauth.Options
		want string
		fail bool
	}{
		{mailauth.Options{NoDKIM: true}, "spf=fail smtp.mailfrom=outside.test; dmarc=fail header.from=outside.test policy=reject", true},
		{mailauth.Options{NoSPF: true, NoDMARC: true}, "dkim=none", false},
		{mailauth.Options{NoDMARC: true}, "spf=fail smtp.mailfrom=outside.test; dkim=none", true},
		{mailauth.Options{NoSPF: true, NoDKIM: true}, "", false},
	} {
		tc.o.Resolver = dns
		if got, fail := mailauth.Check(tc.o)(t.Context(), in); got != tc.want || fail != tc.fail {
			t.Errorf("%+v: %q %v, want %q %v", tc.o, got, fail, tc.want, tc.fail)
		}
	}
}
