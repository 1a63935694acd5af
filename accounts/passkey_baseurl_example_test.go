package accounts_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/accounts"
)

// ForBaseURL takes the relying party from the base URL unless it is set.
func ExamplePasskeyConfig_ForBaseURL() {
	c := accounts.PasskeyConfig{}.ForBaseURL("https://mcp.example.com:8443/base")
	fmt.Println(c.RPID, c.Origins)
	c = accounts.PasskeyConfig{RPID: "example.com"}.ForBaseURL("https://mcp.example.com")
	fmt.Println(c.RPID, c.Origins)
	// Output:
	// mcp.example.com [https://mcp.example.com:8443]
	// example.com [https://mcp.example.com]
}
