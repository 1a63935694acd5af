package integrations_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/retention"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// A server builds the outbound gateway (and the account deletion) before
// connected accounts: both are given a Deferred, which Set later names
// the service Wire returned. Until then, and for good when integrations
// are off (Wire returns nil), no connection is found and RevokeAll
// revokes nothing.
func ExampleDeferred() {
	ctx := context.Background()
	ada := storage.Owner{ID: 1, StableID: "ada"}

	var connections integrations.Deferred
	var gateway outbound.Connections = &connections // what the gateway holds

	_, err := gateway.Use(ctx, ada, "github")
	fmt.Println("before Set:", errors.Is(err, integrations.ErrNotFound))

	// Later in the assembly: integrations are turned off here.
	svc, err := integrations.Wire(integrations.Config{Options: integrations.Options{Disabled: true}},
		schedules.New(nil), retention.NewSet())
	if err != nil {
		log.Fatal(err)
	}
	connections.Set(svc)
	_, err = gateway.Use(ctx, ada, "github")
	fmt.Println("off:", svc == nil, errors.Is(err, integrations.ErrNotFound))
	fmt.Println("revoke all:", connections.RevokeAll(ctx, ada))
	// Output:
	// before Set: true
	// off: true true
	// revoke all: <nil>
}
