//go:build gcp || full

package main

// The gcp cloud drivers, linked by -tags gcp (or -tags full).
import _ "github.com/enclave-mcp/enclave/storage/clouddrivers/gcp"
