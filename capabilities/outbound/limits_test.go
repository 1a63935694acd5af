package outbound_test

import (
	"testing"

	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/quota"
)

// --quota outbound=N/day sets the gateway's daily requests unless its own
// limits set them.
func TestLimitsWithQuota(t *testing.T) {
	q := quota.Limits{Daily: map[string]int64{outbound.QuotaClass: 7, "default": 100}}
	for _, tc := range []struct {
		name string
		l    outbound.Limits
		q    quota.Limits
		want int64
	}{
		{"from the quota", outbound.Limits{}, q, 7},
		{"its own wins", outbound.Limits{DailyRequests: 3}, q, 3},
		{"unlimited wins", outbound.Limits{DailyRequests: -1}, q, -1},
		{"no quota class", outbound.Limits{}, quota.Limits{Daily: map[string]int64{"default": 100}}, 0},
		{"no quota", outbound.Limits{}, quota.Limits{}, 0},
	} {
		if got := tc.l.WithQuota(tc.q).DailyRequests; got != tc.want {
			t.Errorf("%s: DailyRequests %d, want %d", tc.name, got, tc.want)
		}
	}
}
