package mcp

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// TestSessionOnlyNeverOverToken: a capability marked SessionOnly (secret
// reveal, password change, account deletion) is for a person in the web
// shell; a bearer-token caller never reaches it, even when the embedder's
// verifier or loader hands back a caller with Session set (for example one
// built by the same code the web shell uses). It is hidden from tools/list
// and answers tools/call like an unknown name.
func TestSessionOnlyNeverOverToken(t *testing.T) {
	for _, via := range []string{"verifier", "loader", "anonymous"} {
		t.Run(via, func(t *testing.T) {
			ran := false
			f := newFixture(t, func(o *Options) {
				must(t, o.Registry.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
					Name: "revealSecret", Domain: "test", Description: "Web shell only.", Annotations: readOnly,
					Requires: capabilities.Requirement{SessionOnly: true, InteractiveOnly: true},
					Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
						ran = true
						return capabilities.TextResult("the secret"), nil
					},
				})))
				if via == "anonymous" {
					anon := capabilitiestest.User("alice")
					anon.Session = true
					o.Anonymous = &anon
				}
				if via == "verifier" {
					inner := o.Verifier
					o.Verifier = TokenVerifierFunc(func(ctx context.Context, token string) (TokenInfo, error) {
						info, err := inner.VerifyToken(ctx, token)
						if err == nil && info.UserID == "alice" {
							c, _ := o.Loader.LoadCaller(ctx, "alice")
							c.Session = true
							info.Caller = &c
						}
						return info, err
					})
				}
			})
			if via == "loader" {
				c, _ := f.loader.LoadCaller(t.Context(), "alice")
				c.Session = true
				f.loader.Set(c)
			}
			token := "alice-token"
			if via == "anonymous" {
				token = ""
			}
			sid := f.initialize(token)
			resp := f.request(http.MethodPost, token, sid, rpc(2, "tools/list", nil))
			if body := readAll(resp); strings.Contains(body, "revealSecret") {
				t.Fatalf("tools/list shows a session-only capability to a token: %s", body)
			}
			resp = f.request(http.MethodPost, token, sid, rpc(3, "tools/call", map[string]any{"name": "revealSecret"}))
			body := readAll(resp)
			if ran || strings.Contains(body, "the secret") {
				t.Fatalf("a token caller ran a session-only capability: %s", body)
			}
			unknown := readAll(f.request(http.MethodPost, token, sid, rpc(3, "tools/call", map[string]any{"name": "noSuchThing"})))
			if strings.ReplaceAll(body, "revealSecret", "X") != strings.ReplaceAll(unknown, "noSuchThing", "X") {
				t.Fatalf("hidden answer differs from unknown:\n%s\n%s", body, unknown)
			}
		})
	}
}

// TestForeignCallerFromVerifierFailsClosed: a verifier or loader that hands
// back another account's caller for a token (a bug in an embedder's
// verifier, a cache keyed wrongly) never lends that account's roles or
// owner key to the token's subject: the request is served without roles.
func TestForeignCallerFromVerifierFailsClosed(t *testing.T) {
	for _, via := range []string{"verifier", "loader"} {
		t.Run(via, func(t *testing.T) {
			f := newFixture(t, func(o *Options) {
				inner, loader := o.Verifier, o.Loader
				adminOf := func(ctx context.Context) capabilities.Caller {
					c, _ := loader.LoadCaller(ctx, "admin")
					c.OwnerID = 99
					return c
				}
				if via == "verifier" {
					o.Verifier = TokenVerifierFunc(func(ctx context.Context, token string) (TokenInfo, error) {
						info, err := inner.VerifyToken(ctx, token)
						if err == nil && info.UserID == "alice" {
							c := adminOf(ctx)
							info.Caller = &c
						}
						return info, err
					})
					return
				}
				o.Loader = capabilities.CallerLoaderFunc(func(ctx context.Context, id string) (capabilities.Caller, error) {
					if id == "alice" {
						return adminOf(ctx), nil
					}
					return loader.LoadCaller(ctx, id)
				})
			})
			sid := f.initialize("alice-token")
			body := readAll(f.request(http.MethodPost, "alice-token", sid, rpc(2, "tools/list", nil)))
			if strings.Contains(body, "adminOnly") || !strings.Contains(body, "echo") {
				t.Fatalf("alice's token got the admin's caller: %s", body)
			}
		})
	}
}
