// Package mailauth checks inbound mail's sender authentication for
// mail.Options.Authenticate: DKIM signatures (github.com/emersion/go-msgauth),
// SPF of the SMTP client for the envelope sender (blitiri.com.ar/go/spf),
// and DMARC (go-msgauth's record parser): whether the From domain is
// aligned with a passing DKIM signature or SPF, and the domain's policy
// when it is not.
//
// It is a package of its own so that the library root does not link the
// verifiers unless asked: the enclave binary turns them on (enclave serve
// --mail-dkim, --mail-spf, --mail-dmarc, on by default); an embedder sets
// Config.Mail.Authenticate = mailauth.Check(mailauth.Options{}).
//
// Every DNS lookup goes through Options.Resolver (a *net.Resolver, or a
// fake one in tests) and is bounded: one check takes at most
// Options.Timeout however many lookups it makes, SPF makes at most 10
// DNS-querying lookups (RFC 7208), DKIM checks at most MaxSignatures
// signatures, DMARC looks up at most two records.
package mailauth

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/mail"
	"strings"
	"time"

	"blitiri.com.ar/go/spf"
	"github.com/emersion/go-msgauth/dkim"
	"github.com/emersion/go-msgauth/dmarc"
	"golang.org/x/net/publicsuffix"

	encmail "github.com/enclave-mcp/enclave/mail"
)

// MaxSignatures bounds the DKIM signatures checked per message.
const MaxSignatures = 5

// DefaultTimeout bounds one message's checks, all DNS lookups included.
const DefaultTimeout = 10 * time.Second

// Resolver is what the checks look up in DNS; *net.Resolver implements
// it.
type Resolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
	LookupMX(ctx context.Context, name string) ([]*net.MX, error)
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupAddr(ctx context.Context, addr string) ([]string, error)
}

// Options configure Check. The zero value checks DKIM, SPF and DMARC
// with the system resolver.
type Options struct {
	// Resolver answers the DNS lookups. Nil: net.DefaultResolver.
	Resolver Resolver
	// Timeout bounds one message's checks. Default DefaultTimeout.
	Timeout time.Duration
	// NoDKIM, NoSPF and NoDMARC turn a check off (its result is not
	// recorded; DMARC without DKIM and SPF can only fail, so NoDMARC is
	// implied when both are off).
	NoDKIM, NoSPF, NoDMARC bool
}

// Check returns a sender check for mail.Options.Authenticate. It records
// Authentication-Results style words, e.g.
//
//	spf=pass smtp.mailfrom=example.com; dkim=pass header.d=example.com; dmarc=pass header.from=example.com
//
// and fails (quarantines) a message when
//   - DMARC fails (no passing DKIM signature or SPF aligned with the From
//     domain) and the domain's policy is quarantine or reject, or the
//     message has several From domains or a From it cannot read; or
//   - DMARC does not pass and SPF fails (-all) or the message carries
//     DKIM signatures and every one fails.
//
// A DNS failure (temperror) never fails a message: it is not quarantined
// for the resolver's sake.
func Check(o Options) func(ctx context.Context, in encmail.AuthInput) (string, bool) {
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return func(ctx context.Context, in encmail.AuthInput) (string, bool) {
		ctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		var words []string
		var sp spfOutcome
		if !o.NoSPF {
			sp = checkSPF(ctx, o.Resolver, in)
			words = append(words, sp.words())
		}
		var dk dkimOutcome
		if !o.NoDKIM {
			dk = checkDKIM(bytes.NewReader(in.Raw), lookupTXT(ctx, o.Resolver))
			words = append(words, dk.words())
		}
		var dm dmarcOutcome
		if !o.NoDMARC && (!o.NoDKIM || !o.NoSPF) {
			dm = checkDMARC(ctx, o.Resolver, in.Raw, dk, sp)
			words = append(words, dm.words())
		}
		fail := dm.fail() || dm.result != "pass" && (sp.result == spf.Fail || dk.failed())
		return strings.Join(words, "; "), fail
	}
}

// DKIM returns a checker that verifies a message's DKIM signatures only,
// looking keys up with lookupTXT (nil: the system resolver, 5 s per
// lookup): "dkim=pass header.d=example.com"; it fails a message that
// carries signatures none of which verifies.
func DKIM(lookup func(domain string) ([]string, error)) func(ctx context.Context, in encmail.AuthInput) (string, bool) {
	if lookup == nil {
		lookup = func(domain string) ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return net.DefaultResolver.LookupTXT(ctx, domain)
		}
	}
	return func(_ context.Context, in encmail.AuthInput) (string, bool) {
		o := checkDKIM(bytes.NewReader(in.Raw), lookup)
		return o.words(), o.failed()
	}
}

// lookupTXT is r's TXT lookup bounded by ctx, as go-msgauth calls it.
func lookupTXT(ctx context.Context, r Resolver) func(string) ([]string, error) {
	return func(name string) ([]string, error) {
		if err := ctx.Err(); err != nil {
			return nil, &net.DNSError{Err: "lookup budget spent", Name: name, IsTimeout: true, IsTemporary: true}
		}
		return r.LookupTXT(ctx, name)
	}
}

// ---- DKIM ----

type dkimSig struct {
	domain string
	result string // pass, fail, temperror
}

type dkimOutcome struct {
	result string // none, permerror, temperror, or "" when sigs holds the results
	sigs   []dkimSig
}

func checkDKIM(raw *bytes.Reader, lookup func(string) ([]string, error)) dkimOutcome {
	vs, err := dkim.VerifyWithOptions(raw, &dkim.VerifyOptions{LookupTXT: lookup, MaxVerifications: MaxSignatures})
	if err != nil && len(vs) == 0 {
		if dkim.IsTempFail(err) {
			return dkimOutcome{result: "temperror"}
		}
		return dkimOutcome{result: "permerror"}
	}
	if len(vs) == 0 {
		return dkimOutcome{result: "none"}
	}
	var o dkimOutcome
	for _, v := range vs {
		s := dkimSig{domain: domainText(v.Domain), result: "fail"}
		switch {
		case v.Err == nil:
			s.result = "pass"
		case dkim.IsTempFail(v.Err):
			s.result = "temperror"
		}
		o.sigs = append(o.sigs, s)
	}
	return o
}

func (o dkimOutcome) words() string {
	if o.result != "" {
		return "dkim=" + o.result
	}
	w := make([]string, 0, len(o.sigs))
	for _, s := range o.sigs {
		w = append(w, "dkim="+s.result+" header.d="+s.domain)
	}
	return strings.Join(w, "; ")
}

// failed reports whether the message carries signatures and none passes
// (a temporary failure of any is not a failure).
func (o dkimOutcome) failed() bool {
	if o.result == "permerror" {
		return true
	}
	if len(o.sigs) == 0 {
		return false
	}
	for _, s := range o.sigs {
		if s.result != "fail" {
			return false
		}
	}
	return true
}

// passing returns the domains of the signatures that verify.
func (o dkimOutcome) passing() []string {
	var ds []string
	for _, s := range o.sigs {
		if s.result == "pass" {
			ds = append(ds, s.domain)
		}
	}
	return ds
}

// ---- SPF ----

type spfOutcome struct {
	result spf.Result
	domain string // the domain checked: MAIL FROM's, else HELO's
}

func checkSPF(ctx context.Context, r Resolver, in encmail.AuthInput) spfOutcome {
	if in.RemoteIP == nil {
		return spfOutcome{result: spf.None}
	}
	domain := ""
	if _, d, ok := strings.Cut(in.MailFrom, "@"); ok {
		domain = d
	}
	if domain == "" {
		domain = in.Helo
	}
	domain = strings.ToLower(strings.TrimSuffix(domainText(domain), "."))
	if domain == "" {
		return spfOutcome{result: spf.None}
	}
	res, _ := spf.CheckHostWithSender(in.RemoteIP, domainText(in.Helo), domainText(in.MailFrom),
		spf.WithContext(ctx), spf.WithResolver(r))
	if res == "" {
		res = spf.TempError
	}
	return spfOutcome{result: res, domain: domain}
}

func (o spfOutcome) words() string {
	if o.domain == "" {
		return "spf=" + string(o.result)
	}
	return "spf=" + string(o.result) + " smtp.mailfrom=" + o.domain
}

// ---- DMARC ----

type dmarcOutcome struct {
	result string // pass, fail, none, temperror, permerror
	from   string
	policy dmarc.Policy
}

func (o dmarcOutcome) words() string {
	w := "dmarc=" + o.result
	if o.from != "" {
		w += " header.from=" + o.from
	}
	if o.result == "fail" && o.policy != "" {
		w += " policy=" + string(o.policy)
	}
	return w
}

// fail reports whether DMARC asks for the message to be quarantined.
func (o dmarcOutcome) fail() bool {
	switch {
	case o.result == "permerror" && o.policy == dmarc.PolicyReject: // several From domains, or an unreadable one
		return true
	case o.result == "fail":
		return o.policy == dmarc.PolicyQuarantine || o.policy == dmarc.PolicyReject
	}
	return false
}

// errSeveralFrom marks a message whose From header names several domains:
// DMARC cannot pick one, and a forger could hide behind the second.
var errSeveralFrom = errors.New("several From domains")

// errUnreadableFrom marks a message whose From header is not empty but
// names no address net/mail can read: the mailbox still shows its text
// (say an encoded word "Bank <ceo@bank.example>"), so it must not pass as
// a message without a From (dmarc=none), which nothing quarantines.
var errUnreadableFrom = errors.New("unreadable From")

func checkDMARC(ctx context.Context, r Resolver, raw []byte, dk dkimOutcome, sp spfOutcome) dmarcOutcome {
	from, err := fromDomain(raw)
	if errors.Is(err, errSeveralFrom) || errors.Is(err, errUnreadableFrom) {
		return dmarcOutcome{result: "permerror", policy: dmarc.PolicyReject}
	}
	if err != nil || from == "" {
		return dmarcOutcome{result: "none"}
	}
	o := dmarcOutcome{from: from}
	lookup := &dmarc.LookupOptions{LookupTXT: lookupTXT(ctx, r)}
	rec, err := dmarc.LookupWithOptions(from, lookup)
	org, _ := publicsuffix.EffectiveTLDPlusOne(from)
	sub := false
	if errors.Is(err, dmarc.ErrNoPolicy) && org != "" && org != from {
		rec, err = dmarc.LookupWithOptions(org, lookup)
		sub = true
	}
	switch {
	case errors.Is(err, dmarc.ErrNoPolicy):
		o.result = "none"
		return o
	case dmarc.IsTempFail(err) || isTemporary(err):
		o.result = "temperror"
		return o
	case err != nil:
		o.result = "permerror"
		return o
	}
	o.policy = rec.Policy
	if sub && rec.SubdomainPolicy != "" {
		o.policy = rec.SubdomainPolicy
	}
	for _, d := range dk.passing() {
		if aligned(d, from, rec.DKIMAlignment) {
			o.result = "pass"
			return o
		}
	}
	if sp.result == spf.Pass && aligned(sp.domain, from, rec.SPFAlignment) {
		o.result = "pass"
		return o
	}
	o.result = "fail"
	return o
}

// isTemporary reports whether err is a DNS failure that may go away.
func isTemporary(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && (dnsErr.IsTemporary || dnsErr.IsTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// aligned reports whether domain d is aligned with the From domain: the
// same name (strict), or the same organisational domain (relaxed, the
// default).
func aligned(d, from string, mode dmarc.AlignmentMode) bool {
	d, from = strings.ToLower(strings.TrimSuffix(d, ".")), strings.ToLower(strings.TrimSuffix(from, "."))
	if d == "" {
		return false
	}
	if d == from {
		return true
	}
	if mode == dmarc.AlignmentStrict {
		return false
	}
	a, err1 := publicsuffix.EffectiveTLDPlusOne(d)
	b, err2 := publicsuffix.EffectiveTLDPlusOne(from)
	return err1 == nil && err2 == nil && a == b
}

// maxHeaderBytes bounds the header section fromDomain reads.
const maxHeaderBytes = 1 << 20

// fromDomain returns the domain of the message's From header, lowercase;
// "" without one; errSeveralFrom when it names more than one domain (or
// the header appears twice); errUnreadableFrom when it is not empty but
// not an address list.
func fromDomain(raw []byte) (string, error) {
	if len(raw) > maxHeaderBytes {
		if i := bytes.Index(raw[:maxHeaderBytes], []byte("\r\n\r\n")); i >= 0 {
			raw = raw[:i+4]
		} else {
			raw = raw[:maxHeaderBytes]
		}
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	values := msg.Header["From"]
	if len(values) == 0 {
		return "", nil
	}
	if len(values) > 1 {
		return "", errSeveralFrom
	}
	if strings.TrimSpace(values[0]) == "" {
		return "", nil
	}
	addrs, err := mail.ParseAddressList(values[0])
	if err != nil {
		return "", errUnreadableFrom
	}
	if len(addrs) == 0 { // an empty group ("undisclosed:;") names no one
		return "", nil
	}
	domain := ""
	for _, a := range addrs {
		d := strings.ToLower(strings.TrimSuffix(a.Address[strings.LastIndex(a.Address, "@")+1:], "."))
		if domain != "" && d != domain {
			return "", errSeveralFrom
		}
		domain = d
	}
	return domainText(domain), nil
}

// domainText keeps a domain printable and short.
func domainText(d string) string {
	d = strings.Map(func(r rune) rune {
		if r <= ' ' || r == ';' || r == 0x7f {
			return -1
		}
		return r
	}, d)
	if len(d) > 253 {
		d = d[:253]
	}
	return d
}
