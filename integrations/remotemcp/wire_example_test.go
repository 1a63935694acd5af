package remotemcp_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/quota"
)

// QuotaLimits puts every remote tool in the class "remote" and bounds
// it, unless the operator already set that class's limit.
func ExampleQuotaLimits() {
	l := remotemcp.QuotaLimits(quota.Limits{})
	fmt.Println(l.Classes[remotemcp.Prefix+"*"], l.Daily[remotemcp.QuotaClass])
	l = remotemcp.QuotaLimits(quota.Limits{Daily: map[string]int64{remotemcp.QuotaClass: 10}})
	fmt.Println(l.Daily[remotemcp.QuotaClass])
	// Output:
	// remote 2000
	// 10
}
