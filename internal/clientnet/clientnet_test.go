package clientnet_test

import (
	"testing"

	"github.com/enclave-mcp/enclave/internal/clientnet"
)

func TestNetwork(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":          "203.0.113.0/24",
		"203.0.113.0/24":       "203.0.113.0/24",
		"::ffff:10.0.0.9":      "10.0.0.0/24",
		"2001:db8:1:2::1":      "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::9": "2001:db8:1:2::/64",
		"2001:db8:1:2::/64":    "2001:db8:1:2::/64",
		"fe80::1%eth0":         "fe80::/64",
		"":                     "",
		"not an ip":            "",
		"unknown":              "",
	} {
		if got := clientnet.Network(in); got != want {
			t.Errorf("Network(%q) = %q, want %q", in, got, want)
		}
		if got := clientnet.Network(clientnet.Network(in)); got != want {
			t.Errorf("Network is not idempotent on %q: %q", in, got)
		}
	}
}
