package mailauth_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
)

func TestDKIM(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	record := "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(pub)
	lookups := 0
	check := mailauth.DKIM(func(domain string) ([]string, error) {
		lookups++
		switch domain {
		case "sel._domainkey.outside.test":
			return []string{record}, nil
		case "sel._domainkey.down.test":
			return nil, &dnsTemp{}
		}
		return nil, errors.New("no such record")
	})
	sign := func(domain, msg string) string {
		var out bytes.Buffer
		if err := dkim.Sign(&out, strings.NewReader(msg), &dkim.SignOptions{Domain: domain, Selector: "sel", Signer: priv}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	msg := "From: carol@outside.test\r\nTo: alice@mail.test\r\nSubject: signed\r\n\r\nHello.\r\n"
	for _, tc := range []struct {
		name, raw, want string
		fail            bool
	}{
		{"unsigned", msg, "dkim=none", false},
		{"signed", sign("outside.test", msg), "dkim=pass header.d=outside.test", false},
		{"body changed", strings.Replace(sign("outside.test", msg), "Hello.", "Send money.", 1), "dkim=fail header.d=outside.test", true},
		{"subject changed", strings.Replace(sign("outside.test", msg), "Subject: signed", "Subject: urgent", 1), "dkim=fail header.d=outside.test", true},
		{"no key", sign("elsewhere.test", msg), "dkim=fail header.d=elsewhere.test", true},
	} {
		got, fail := check(t.Context(), mail.AuthInput{Raw: []byte(tc.raw)})
		if got != tc.want || fail != tc.fail {
			t.Errorf("%s: %q, fail %v; want %q, %v", tc.name, got, fail, tc.want, tc.fail)
		}
	}
	if lookups == 0 {
		t.Error("no key was looked up")
	}
}

type dnsTemp struct{}

func (*dnsTemp) Error() string   { return "timeout" }
func (*dnsTemp) Temporary() bool { return true }
func (*dnsTemp) Timeout() bool   { return true }
