// Package mailauth checks inbound mail's DKIM signatures with
// github.com/emersion/go-msgauth, for mail.Options.Authenticate.
//
// It is a package of its own so that the library root does not link a
// DKIM verifier unless asked: the enclave binary turns it on (enclave
// serve --mail-dkim, on by default); an embedder sets
// Config.Mail.Authenticate = mailauth.DKIM(nil).
package mailauth

import (
	"bytes"
	"context"
	"net"
	"strings"
	"time"

	"github.com/emersion/go-msgauth/dkim"
)

// MaxSignatures bounds the DKIM signatures checked per message.
const MaxSignatures = 5

// DKIM returns a checker that verifies a message's DKIM signatures, looking
// keys up with lookupTXT (nil: the system resolver, 5 s per lookup). The
// checker returns the results as Authentication-Results style words
// ("dkim=pass header.d=example.com") and whether the message fails: it
// carries signatures and none verifies. A DNS failure is a temperror, not
// a failure (a message is not quarantined for the resolver's sake).
func DKIM(lookupTXT func(domain string) ([]string, error)) func(raw []byte) (string, bool) {
	if lookupTXT == nil {
		lookupTXT = func(domain string) ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return net.DefaultResolver.LookupTXT(ctx, domain)
		}
	}
	return func(raw []byte) (string, bool) {
		vs, err := dkim.VerifyWithOptions(bytes.NewReader(raw), &dkim.VerifyOptions{LookupTXT: lookupTXT, MaxVerifications: MaxSignatures})
		if err != nil && len(vs) == 0 {
			if dkim.IsTempFail(err) {
				return "dkim=temperror", false
			}
			return "dkim=permerror", true
		}
		if len(vs) == 0 {
			return "dkim=none", false
		}
		var words []string
		pass, temp := false, false
		for _, v := range vs {
			d := domainText(v.Domain)
			switch {
			case v.Err == nil:
				pass = true
				words = append(words, "dkim=pass header.d="+d)
			case dkim.IsTempFail(v.Err):
				temp = true
				words = append(words, "dkim=temperror header.d="+d)
			default:
				words = append(words, "dkim=fail header.d="+d)
			}
		}
		return strings.Join(words, "; "), !pass && !temp
	}
}

// domainText keeps a signing domain printable and short.
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
