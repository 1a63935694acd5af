//go:build aws || full

package main

// The aws cloud drivers, linked by -tags aws (or -tags full).
import _ "github.com/enclave-mcp/enclave/storage/clouddrivers/aws"
