package mail_test

import (
	"testing"

	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/quota"
)

// Received mail counts under the meter a plan limits (quota.Plans), so a
// plan's mail_receive window applies on top of --mail-receives-per-day.
func TestReceiveClassIsThePlanMeter(t *testing.T) {
	if mail.ReceiveClass != quota.MeterMailReceive {
		t.Fatalf("mail counts receives as %q, plans limit %q", mail.ReceiveClass, quota.MeterMailReceive)
	}
}
