package capabilities_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// Options.RoleGate refuses calls of capabilities that require a role, with
// its own error, before the handler runs; the capability stays visible,
// and capabilities without a role requirement never ask it.
func TestRoleGate(t *testing.T) {
	refusal := &capabilities.Error{Code: capabilities.CodeSecondFactorRequired, Message: "set up a second factor at /account/security"}
	var asked []string
	gateOn := true
	reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true, RoleGate: func(_ context.Context, c capabilities.Caller, role string) error {
		asked = append(asked, role)
		if gateOn {
			return refusal
		}
		return nil
	}})
	s := &spy{}
	if err := reg.Register(
		s.echo("adminEcho", read, capabilities.Requirement{Role: capabilities.RoleAdmin}),
		s.echo("userEcho", read, capabilities.Requirement{}),
	); err != nil {
		t.Fatal(err)
	}
	admin := capabilitiestest.Admin("a1")
	ctx := context.Background()

	_, err := reg.Invoke(ctx, admin, "adminEcho", []byte(`{"text":"x"}`))
	if !errors.Is(err, refusal) || capabilities.CodeOf(err) != capabilities.CodeSecondFactorRequired || s.runs != 0 {
		t.Fatalf("gated call: %v, runs %d", err, s.runs)
	}
	if !slices.Contains(reg.VisibleNames(ctx, admin), "adminEcho") {
		t.Fatal("the gated capability is hidden")
	}
	asked = nil
	if _, err := reg.Invoke(ctx, admin, "userEcho", []byte(`{"text":"x"}`)); err != nil || len(asked) != 0 {
		t.Fatalf("ungated call: %v, gate asked for %v", err, asked)
	}
	gateOn = false
	if _, err := reg.Invoke(ctx, admin, "adminEcho", []byte(`{"text":"x"}`)); err != nil || s.runs != 2 {
		t.Fatalf("gate open: %v, runs %d", err, s.runs)
	}
	// A plain error from the gate is internal, never shown.
	reg2 := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true, RoleGate: func(context.Context, capabilities.Caller, string) error {
		return errors.New("database down")
	}})
	_ = reg2.Register(s.echo("adminEcho", read, capabilities.Requirement{Role: capabilities.RoleAdmin}))
	if _, err := reg2.Invoke(ctx, admin, "adminEcho", []byte(`{"text":"x"}`)); capabilities.CodeOf(err) != capabilities.CodeInternal {
		t.Fatalf("failing gate: %v", err)
	}
}
