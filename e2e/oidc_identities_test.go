package e2e

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/federation"
)

// TestOIDCIdentityCapabilities: identityList and identityUnlink through
// Registry.Invoke with a browser session's authority. Bob neither sees nor
// removes alice's linked identity; alice removes hers (she has a
// password); an account whose only way to sign in is its identity cannot
// remove it; an agent's token does not reach them.
func TestOIDCIdentityCapabilities(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := t.Context()
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		if err := s.Federation().Link(ctx, alice.ID, &federation.Result{Provider: "corp", Issuer: "https://idp.example.com", Subject: "alice-at-corp"}); err != nil {
			t.Fatal(err)
		}
		session := func(u *enclavetest.User) capabilities.Caller {
			c := u.Caller(t)
			c.Session = true
			return c
		}
		list := func(c capabilities.Caller) []federation.Identity {
			t.Helper()
			r, err := s.Registry().Invoke(ctx, c, "identityList", json.RawMessage(`{}`))
			if err != nil {
				t.Fatalf("identityList: %v", err)
			}
			raw, _ := json.Marshal(r.Structured)
			var out federation.IdentityListOutput
			if err := json.Unmarshal(raw, &out); err != nil || out.Identities == nil {
				t.Fatalf("identityList output %s: %v", raw, err)
			}
			return out.Identities
		}
		unlink := func(c capabilities.Caller, id int64) error {
			args, _ := json.Marshal(federation.IdentityUnlinkInput{ID: id})
			_, err := s.Registry().Invoke(ctx, c, "identityUnlink", args)
			return err
		}
		ids := list(session(alice))
		if len(ids) != 1 || ids[0].Subject != "alice-at-corp" {
			t.Fatalf("alice's identities: %+v", ids)
		}
		if got := list(session(bob)); len(got) != 0 {
			t.Fatalf("bob sees %+v", got)
		}
		var ce *capabilities.Error
		if err := unlink(session(bob), ids[0].ID); !errors.As(err, &ce) || ce.Code != capabilities.CodeNotFound {
			t.Fatalf("bob unlinks alice's identity: %v", err)
		}
		if got := list(session(alice)); len(got) != 1 {
			t.Fatalf("alice's identity after bob's attempt: %+v", got)
		}
		// An agent's token does not reach them (session-only).
		if r, err := alice.MCP(t).Call("identityList", map[string]any{}); err == nil && !r.IsError {
			t.Fatalf("an agent listed the identities: %+v", r)
		}
		if err := unlink(session(alice), ids[0].ID); err != nil {
			t.Fatalf("alice unlinks: %v", err)
		}
		if got := list(session(alice)); len(got) != 0 {
			t.Fatalf("after the unlink: %+v", got)
		}

		// carol signed up with her identity: it is her only way in.
		res := &federation.Result{Provider: "corp", Issuer: "https://idp.example.com", Subject: "carol-at-corp"}
		cu, err := s.Accounts().Identity.SignupExternal(ctx, accounts.ExternalSignupInput{Email: "carol@example.com",
			OnCreated: s.Federation().LinkOnCreate(res)})
		if err != nil || !cu.EmailVerified() {
			t.Fatalf("external signup: %+v %v", cu, err)
		}
		cc, err := s.Accounts().LoadCaller(ctx, cu.StableID)
		if err != nil {
			t.Fatal(err)
		}
		cc.Interactive, cc.AllScopes, cc.Session = true, true, true
		cids := list(cc)
		if len(cids) != 1 {
			t.Fatalf("carol's identities: %+v", cids)
		}
		if err := unlink(cc, cids[0].ID); !errors.As(err, &ce) || ce.Code != capabilities.CodeConflict {
			t.Fatalf("carol removed her last way to sign in: %v", err)
		}
	})
}
