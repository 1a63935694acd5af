package remotemcp_test

import (
	"fmt"

	"github.com/enclave-mcp/enclave/integrations/remotemcp"
)

// A remote server's tool is its owner's capability under the provider's
// prefix and the server's short name: it can never take a built-in name.
func ExampleCapabilityName() {
	fmt.Println(remotemcp.CapabilityName("github", "create_issue"))
	fmt.Println(remotemcp.CapabilityName("b", "mcpServerList"))
	// Output:
	// mcp_github__create_issue
	// mcp_b__mcpServerList
}
