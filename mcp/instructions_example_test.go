package mcp_test

import (
	"fmt"
	"strings"

	"github.com/enclave-mcp/enclave/mcp"
)

// DefaultInstructions names the domains whose capabilities the registry
// holds (here only memories), never the others.
func ExampleDefaultInstructions() {
	has := func(name string) bool { return name == "memorySave" }
	text := mcp.DefaultInstructions("Acme", has)
	fmt.Println(strings.HasPrefix(text, "Acme is a multi-user MCP server"))
	fmt.Println(strings.Contains(text, "memorySearch"), strings.Contains(text, "execute"))
	// Output:
	// true
	// true false
}
