package cluster

import "testing"

// TestChannelPerSchema: deployments sharing a database in separate
// schemas never share a bus channel, even when their schema names differ
// only in case (PostgreSQL schema names are case-sensitive).
func TestChannelPerSchema(t *testing.T) {
	seen := map[string]string{}
	for _, schema := range []string{"public", "tenant", "Tenant", "TENANT", "tenant_a", "tenant-a", "tenant a", "ünicode", "Ünicode",
		"s_0123456789012345678901234567890123456789012345678901234567890", "s_0123456789012345678901234567890123456789012345678901234567891"} {
		ch := channelFor("enclave_bus", schema)
		if len(ch) > 63 {
			t.Fatalf("channel for %q is %d bytes: %s", schema, len(ch), ch)
		}
		if other, ok := seen[ch]; ok {
			t.Fatalf("schemas %q and %q share channel %s", other, schema, ch)
		}
		seen[ch] = schema
	}
	if got := channelFor("enclave_bus", "tenant"); got != "enclave_bus_tenant" {
		t.Fatalf("plain schema: %s", got)
	}
}
