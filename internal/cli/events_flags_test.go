package cli

import (
	"flag"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/events"
)

func TestEventFlags(t *testing.T) {
	o := &options{}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c := o.cfg; c.WebhookAllowPrivate || c.DenialBurst.Threshold != events.DefaultBurstThreshold || c.DenialBurst.Window != events.DefaultBurstWindow {
		t.Fatalf("defaults %+v %+v", c.WebhookAllowPrivate, c.DenialBurst)
	}
	o = &options{}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	o.register(fs)
	if err := applyEnv(fs, func(k string) string {
		return map[string]string{"ENCLAVE_WEBHOOK_ALLOW_PRIVATE": "true", "ENCLAVE_DENIAL_BURST_WINDOW": "10m"}[k]
	}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--denial-burst-threshold", "7", "--denial-burst-cooldown", "2h"}); err != nil {
		t.Fatal(err)
	}
	if c := o.cfg; !c.WebhookAllowPrivate || c.DenialBurst.Threshold != 7 || c.DenialBurst.Window != 10*time.Minute || c.DenialBurst.Cooldown != 2*time.Hour {
		t.Fatalf("parsed %+v %+v", c.WebhookAllowPrivate, c.DenialBurst)
	}
}
