//go:build azure || full

package main

// The azure cloud drivers, linked by -tags azure (or -tags full).
import _ "github.com/enclave-mcp/enclave/storage/clouddrivers/azure"
