package capabilities_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// TestPublicCapabilities proves Requirement.Public: an unauthenticated
// caller (Anonymous or the zero Caller) runs a public read and nothing
// else, every other capability refuses it exactly as before (hidden,
// audited as unauthenticated), and a signed-in caller is checked as usual.
func TestPublicCapabilities(t *testing.T) {
	perm := []capabilities.Permission{capabilities.ReadUserOwn}
	user := capabilitiestest.User("u1")
	noPerm := capabilitiestest.User("u2")
	noPerm.Permissions = nil
	suspended := capabilitiestest.User("u3")
	suspended.State = capabilities.AccountSuspended
	tokenCaller := capabilitiestest.User("u4")
	tokenCaller.AllScopes, tokenCaller.Scopes = false, []string{"mcp"}

	tests := []struct {
		name       string
		caller     capabilities.Caller
		capability string
		wantCode   capabilities.Code
		wantReason capabilities.DenialReason
	}{
		{"anonymous runs a public read", capabilities.Anonymous(), "publicRead", "", ""},
		{"zero caller runs a public read", capabilities.Caller{}, "publicRead", "", ""},
		{"anonymous needs no permission or scope of a public read", capabilities.Anonymous(), "publicScoped", "", ""},
		{"anonymous refused a plain read", capabilities.Anonymous(), "plainRead", capabilities.CodeNotFound, capabilities.ReasonUnauthenticated},
		{"anonymous refused a write", capabilities.Anonymous(), "plainWrite", capabilities.CodeNotFound, capabilities.ReasonUnauthenticated},
		{"anonymous refused an admin read", capabilities.Anonymous(), "adminRead", capabilities.CodeNotFound, capabilities.ReasonUnauthenticated},
		{"anonymous refused a flagged-off public read", capabilities.Anonymous(), "publicFlagged", capabilities.CodeNotFound, capabilities.ReasonFeature},
		{"anonymous with an active state is still anonymous", capabilities.Caller{State: capabilities.AccountActive}, "plainRead", capabilities.CodeNotFound, capabilities.ReasonUnauthenticated},
		{"signed-in user runs a public read", user, "publicRead", "", ""},
		{"signed-in user still needs the permission", noPerm, "publicScoped", capabilities.CodeNotFound, capabilities.ReasonPermission},
		{"signed-in token still needs the scope", tokenCaller, "publicScoped", capabilities.CodeInsufficientScope, capabilities.ReasonScope},
		{"suspended user refused a public read", suspended, "publicRead", capabilities.CodeAccountSuspended, capabilities.ReasonSuspended},
		{"confined anonymous refused", capabilities.Caller{Only: []string{"other"}}, "publicRead", capabilities.CodeNotFound, capabilities.ReasonConfined},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			audit := &capabilitiestest.Auditor{}
			var quotaCallers []capabilities.Caller
			reg := capabilities.NewRegistry(capabilities.Options{
				Auditor: audit,
				Quota: quotaFunc(func(_ context.Context, c capabilities.Caller, _ string) error {
					quotaCallers = append(quotaCallers, c)
					return nil
				}),
			})
			s := &spy{}
			if err := reg.Register(
				s.echo("publicRead", read, capabilities.Requirement{Public: true}),
				s.echo("publicScoped", read, capabilities.Requirement{Public: true, Permissions: perm, Scopes: []string{"catalogue:read"}}),
				s.echo("publicFlagged", read, capabilities.Requirement{Public: true, Feature: "alpha"}),
				s.echo("plainRead", read, capabilities.Requirement{}),
				s.echo("plainWrite", write, capabilities.Requirement{}),
				s.echo("adminRead", read, capabilities.Requirement{Role: capabilities.RoleAdmin}),
			); err != nil {
				t.Fatal(err)
			}
			_, err := reg.Invoke(t.Context(), tt.caller, tt.capability, json.RawMessage(`{"text":"x"}`))
			if got := codeOrEmpty(err); got != tt.wantCode {
				t.Fatalf("code = %q (err %v), want %q", got, err, tt.wantCode)
			}
			if ran := s.runs == 1; ran != (tt.wantCode == "") {
				t.Fatalf("handler ran %d times, want ran=%v", s.runs, tt.wantCode == "")
			}
			if tt.wantCode == "" && len(quotaCallers) != 1 {
				t.Fatalf("quota asked %d times, want once (anonymous calls are metered too)", len(quotaCallers))
			}
			denials := audit.Denials()
			if tt.wantReason == "" {
				if len(denials) != 0 {
					t.Fatalf("denials = %+v, want none", denials)
				}
			} else if len(denials) != 1 || denials[0].Reason != tt.wantReason || denials[0].Name != tt.capability {
				t.Fatalf("denials = %+v, want one %q", denials, tt.wantReason)
			} else if tt.caller.UserID == "" && (denials[0].UserID != "" || denials[0].Subject != "") {
				t.Fatalf("an anonymous denial names a subject: %+v", denials[0])
			}
			// Listing agrees with Invoke.
			visible := reg.IsVisible(t.Context(), tt.caller, tt.capability)
			wantVisible := tt.wantCode == "" || tt.wantCode == capabilities.CodeInsufficientScope
			if visible != wantVisible {
				t.Fatalf("IsVisible = %v, want %v", visible, wantVisible)
			}
		})
	}
}

// TestPublicAnonymousSeesOnlyPublic: an anonymous caller's listing holds
// the public capabilities and nothing else (not even the builtins).
func TestPublicAnonymousSeesOnlyPublic(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	s := &spy{}
	if err := reg.Register(
		s.echo("publicRead", read, capabilities.Requirement{Public: true}),
		s.echo("plainRead", read, capabilities.Requirement{}),
	); err != nil {
		t.Fatal(err)
	}
	got := reg.VisibleNames(t.Context(), capabilities.Anonymous())
	if len(got) != 1 || got[0] != "publicRead" {
		t.Fatalf("anonymous sees %v, want only publicRead", got)
	}
}

// TestPublicRefusedUnlessReadOnly: Register refuses Public on a capability
// that may write, or on one kept to a role, a session or a deletion.
func TestPublicRefusedUnlessReadOnly(t *testing.T) {
	s := &spy{}
	for name, c := range map[string]capabilities.Capability{
		"write":           s.echo("pubWrite", write, capabilities.Requirement{Public: true}),
		"non-destructive": s.echo("pubWrite", capabilities.Annotations{Idempotent: true}, capabilities.Requirement{Public: true}),
		"role":            s.echo("pubAdmin", read, capabilities.Requirement{Public: true, Role: capabilities.RoleAdmin}),
		"session":         s.echo("pubSession", read, capabilities.Requirement{Public: true, SessionOnly: true}),
		"during deletion": s.echo("pubDeletion", read, capabilities.Requirement{Public: true, DuringDeletion: true}),
	} {
		t.Run(name, func(t *testing.T) {
			reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true})
			if err := reg.Register(c); err == nil {
				t.Fatal("registered a public capability that is not a plain read")
			}
		})
	}
}
