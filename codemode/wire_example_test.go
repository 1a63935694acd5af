package codemode_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/quota"
)

// QuotaLimits puts code runs in their class and bounds it, unless the
// operator already set that class's limit.
func ExampleQuotaLimits() {
	l := codemode.QuotaLimits(quota.Limits{})
	fmt.Println(l.Classes["execute"], l.Daily[codemode.QuotaClass])
	l = codemode.QuotaLimits(quota.Limits{Daily: map[string]int64{codemode.QuotaClass: 50}})
	fmt.Println(l.Daily[codemode.QuotaClass])
	// Output:
	// execute 1000
	// 50
}
