package community_test

import (
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// The community is on whenever code mode is, unless turned off; its
// tables' retention is declared either way (they exist either way).
func TestWireOffWithoutCodeModeOrWhenDisabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  enclave.Config
		on   bool
	}{
		{"default", enclave.Config{}, true},
		{"disabled", enclave.Config{Community: community.Options{Disabled: true}}, false},
		{"code mode off", enclave.Config{CodeMode: codemode.Options{Disabled: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := enclavetest.Start(t, enclavetest.Options{Config: tc.cfg})
			for _, name := range []string{"communityPublish", "communitySearch", "adminCommunityDelist"} {
				if got := s.Registry().Has(name); got != tc.on {
					t.Errorf("%s registered: %v, want %v", name, got, tc.on)
				}
			}
			for _, p := range community.RetentionPolicies() {
				if _, ok := s.Retention().Policy(p.Table); !ok {
					t.Errorf("no retention policy for %s", p.Table)
				}
			}
			// Plans are wired whether or not the community is on.
			if !s.Registry().Has("usageGet") {
				t.Error("usageGet is not registered")
			}
		})
	}
}
