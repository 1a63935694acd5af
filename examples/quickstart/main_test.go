package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

func TestGreet(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	if err := reg.Register(greet); err != nil {
		t.Fatal(err)
	}
	res, err := reg.Invoke(context.Background(), capabilitiestest.User("ada"), "greet", json.RawMessage(`{"name":"Grace"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Structured.(greetOut).Greeting; got != "Hello, Grace, from ada!" {
		t.Fatalf("greeting = %q", got)
	}
}
