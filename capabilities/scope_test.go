package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// An admin capability needs the admin scope from a token: without it an
// admin's agent lists only what a user's would, and calling one is
// answered insufficient_scope naming "admin" (never run, never "unknown"),
// while a user holding the scope still does not learn it exists. Callers
// without a token (AllScopes) are not affected.
func TestAdminScope(t *testing.T) {
	audit := &capabilitiestest.Auditor{}
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: audit, NoBuiltins: true})
	s := &spy{}
	get := func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
		return capabilities.PromptResult{Messages: []capabilities.PromptMessage{{Role: "user", Content: capabilities.Text{Text: "hi"}}}}, nil
	}
	readText := func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "x"}}, nil
	}
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	if err := reg.Register(
		s.echo("plain", read, capabilities.Requirement{}),
		s.echo("adminWrite", write, admin),
		s.echo("adminRead", read, admin),
		s.echo("notesWrite", write, capabilities.Requirement{Scopes: []string{"notes:write"}}),
	); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterPrompt(capabilities.Prompt{Name: "adminPrompt", Requires: admin, Get: get}); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterResource(capabilities.Resource{URI: "test://admin", Name: "admin", Requires: admin, Read: readText}); err != nil {
		t.Fatal(err)
	}
	token := func(c capabilities.Caller, scopes ...string) capabilities.Caller {
		c.AllScopes, c.Scopes = false, scopes
		return c
	}
	ctx := t.Context()
	args := json.RawMessage(`{"text":"hi"}`)

	tests := []struct {
		name      string
		caller    capabilities.Caller
		wantNames []string
		// wantCode is what calling adminWrite answers ("" runs it).
		wantCode capabilities.Code
	}{
		{"admin, mcp only", token(capabilitiestest.Admin("a"), "mcp"), []string{"notesWrite", "plain"}, capabilities.CodeInsufficientScope},
		{"admin, no scope at all", token(capabilitiestest.Admin("a")), []string{"notesWrite", "plain"}, capabilities.CodeInsufficientScope},
		{"admin, mcp and admin", token(capabilitiestest.Admin("a"), "mcp", "admin"), []string{"adminRead", "adminWrite", "notesWrite", "plain"}, ""},
		{"admin without a token", capabilitiestest.Admin("a"), []string{"adminRead", "adminWrite", "notesWrite", "plain"}, ""},
		{"user, mcp and admin", token(capabilitiestest.User("u"), "mcp", "admin"), []string{"notesWrite", "plain"}, capabilities.CodeNotFound},
		{"user, mcp only", token(capabilitiestest.User("u"), "mcp"), []string{"notesWrite", "plain"}, capabilities.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reg.VisibleNames(ctx, tt.caller); !slices.Equal(got, tt.wantNames) {
				t.Errorf("VisibleNames = %v, want %v", got, tt.wantNames)
			}
			var names []string
			for _, c := range reg.Visible(ctx, tt.caller) {
				names = append(names, c.Name)
			}
			if !slices.Equal(names, tt.wantNames) {
				t.Errorf("Visible = %v, want %v", names, tt.wantNames)
			}
			listed := slices.Contains(tt.wantNames, "adminWrite")
			if got := reg.IsVisible(ctx, tt.caller, "adminWrite"); got != listed {
				t.Errorf("IsVisible(adminWrite) = %v, want %v", got, listed)
			}
			if got := len(reg.VisiblePrompts(ctx, tt.caller)) == 1; got != listed {
				t.Errorf("adminPrompt listed = %v, want %v", got, listed)
			}
			if got := len(reg.VisibleResources(ctx, tt.caller)) == 1; got != listed {
				t.Errorf("admin resource listed = %v, want %v", got, listed)
			}

			runs := s.runs
			_, err := reg.Invoke(ctx, tt.caller, "adminWrite", args)
			if got := capabilities.CodeOf(err); tt.wantCode == "" && err != nil || tt.wantCode != "" && got != tt.wantCode {
				t.Fatalf("Invoke(adminWrite) = %v (%s), want %q", err, got, tt.wantCode)
			}
			if ran := s.runs > runs; ran != (tt.wantCode == "") {
				t.Errorf("the handler ran: %v", ran)
			}
			screened := reg.Screen(ctx, tt.caller, "adminWrite")
			scopeErr := reg.CheckScope(ctx, tt.caller, "adminWrite")
			_, promptErr := reg.GetPrompt(ctx, tt.caller, "adminPrompt", nil)
			_, resErr := reg.ReadResource(ctx, tt.caller, "test://admin")
			switch tt.wantCode {
			case capabilities.CodeInsufficientScope:
				var e *capabilities.Error
				if !errors.As(err, &e) || !slices.Equal(e.Scopes, []string{capabilities.ScopeAdmin}) {
					t.Errorf("the scope error names %v, want [admin]", e)
				}
				if screened {
					t.Error("Screen hides it: the transport would answer unknown tool instead of the step-up")
				}
				if scopeErr == nil || !slices.Equal(scopeErr.Scopes, []string{capabilities.ScopeAdmin}) {
					t.Errorf("CheckScope = %v, want the admin scope", scopeErr)
				}
				if capabilities.CodeOf(promptErr) != capabilities.CodeInsufficientScope || capabilities.CodeOf(resErr) != capabilities.CodeInsufficientScope {
					t.Errorf("prompt %v, resource %v: want insufficient_scope", promptErr, resErr)
				}
			case capabilities.CodeNotFound:
				if !screened || scopeErr != nil {
					t.Errorf("Screen %v, CheckScope %v: a user must not learn that the capability exists", screened, scopeErr)
				}
			default:
				if screened || scopeErr != nil || promptErr != nil || resErr != nil {
					t.Errorf("Screen %v, CheckScope %v, prompt %v, resource %v", screened, scopeErr, promptErr, resErr)
				}
			}
		})
	}

	// Another scope still leaves what needs it listed (step-up as before).
	admin1 := token(capabilitiestest.Admin("a"), "mcp")
	if !reg.IsVisible(ctx, admin1, "notesWrite") {
		t.Error("a capability needing a scope other than admin is hidden")
	}
	if e := reg.CheckScope(ctx, admin1, "notesWrite"); e == nil || !slices.Equal(e.Scopes, []string{"notes:write"}) {
		t.Errorf("CheckScope(notesWrite) = %v", e)
	}

	// The admin scope is part of the visibility key.
	k1, ok1 := reg.VisibilityKey(admin1)
	k2, ok2 := reg.VisibilityKey(token(capabilitiestest.Admin("a"), "mcp", "admin"))
	if !ok1 || !ok2 || k1 == k2 {
		t.Errorf("keys %x (%v) and %x (%v): the admin scope changes the visible set, so it must change the key", k1, ok1, k2, ok2)
	}

	if got := (capabilities.Requirement{Role: capabilities.RoleAdmin, Scopes: []string{"x"}}).TokenScopes(); !slices.Equal(got, []string{"x", "admin"}) {
		t.Errorf("TokenScopes = %v", got)
	}
	if got := (capabilities.Requirement{Scopes: []string{"x"}}).TokenScopes(); !slices.Equal(got, []string{"x"}) {
		t.Errorf("TokenScopes of a user capability = %v", got)
	}
}
