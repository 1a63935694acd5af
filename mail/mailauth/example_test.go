package mailauth_test

import (
	"context"
	"fmt"
	"net"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
)

// A server sets Config.Mail.Authenticate to mailauth.Check; here the DNS is
// an in-memory resolver holding the sender domain's SPF and DMARC records.
func ExampleCheck() {
	dns := &fakeDNS{txt: map[string][]string{
		"bank.test":        {"v=spf1 ip4:192.0.2.0/24 -all"},
		"_dmarc.bank.test": {"v=DMARC1; p=reject"},
	}}
	check := mailauth.Check(mailauth.Options{Resolver: dns})
	raw := []byte("From: alerts@bank.test\r\nSubject: Your statement\r\n\r\nHello.\r\n")

	// From the bank's own mail server: delivered to the inbox.
	results, quarantine := check(context.Background(), mail.AuthInput{Raw: raw, RemoteIP: net.ParseIP("192.0.2.25"), Helo: "mx.bank.test", MailFrom: "alerts@bank.test"})
	fmt.Println(results, quarantine)
	// From anywhere else: the bank's DMARC policy quarantines it.
	results, quarantine = check(context.Background(), mail.AuthInput{Raw: raw, RemoteIP: net.ParseIP("203.0.113.9"), Helo: "somewhere.test", MailFrom: "alerts@bank.test"})
	fmt.Println(results, quarantine)
	// Output:
	// spf=pass smtp.mailfrom=bank.test; dkim=none; dmarc=pass header.from=bank.test false
	// spf=fail smtp.mailfrom=bank.test; dkim=none; dmarc=fail header.from=bank.test policy=reject true
}
