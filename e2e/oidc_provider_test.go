package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// The whole server is an OpenID Provider: a relying party registers, a
// person signs in and approves on the real pages, and the ID token
// verifies with go-oidc against the server's discovery document and JWKS
// (issuer, audience = the client, signature, nonce, at_hash); userinfo
// answers the person's stable id and email, and nobody else's.
func TestOIDCProviderWholeServer(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := t.Context()
		const redirect = "http://127.0.0.1:9/callback"
		body, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}, "client_name": "Relying party",
			"token_endpoint_auth_method": "client_secret_basic"})
		resp, err := http.Post(s.URL+"/oauth/register", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		var reg struct {
			ID     string `json:"client_id"`
			Secret string `json:"client_secret"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&reg)
		resp.Body.Close()
		if reg.ID == "" {
			t.Fatalf("register: %d", resp.StatusCode)
		}
		provider, err := oidc.NewProvider(ctx, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		conf := &oauth2.Config{ClientID: reg.ID, ClientSecret: reg.Secret, RedirectURL: redirect,
			Endpoint: provider.Endpoint(), Scopes: []string{oidc.ScopeOpenID, "email"}}
		verifier := provider.Verifier(&oidc.Config{ClientID: reg.ID})

		for _, name := range []string{"alice", "bob"} {
			u := s.CreateUser(t, name)
			pkce := oauth2.GenerateVerifier()
			nonce := "nonce-of-" + name + "-0123"
			authURL := conf.AuthCodeURL("state-"+name+"-0123456", oauth2.S256ChallengeOption(pkce), oidc.Nonce(nonce))
			var consent string
			got, err := oidcBrowser(s, u, &consent)(ctx, &auth.AuthorizationArgs{URL: authURL})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := conf.Exchange(ctx, got.Code, oauth2.VerifierOption(pkce))
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := tok.Extra("id_token").(string)
			idt, err := verifier.Verify(ctx, raw)
			if err != nil {
				t.Fatalf("%s: ID token: %v", name, err)
			}
			if idt.Subject != u.StableID || idt.Nonce != nonce || idt.VerifyAccessToken(tok.AccessToken) != nil {
				t.Errorf("%s: ID token sub %q nonce %q", name, idt.Subject, idt.Nonce)
			}
			info, err := provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
			if err != nil {
				t.Fatal(err)
			}
			if info.Subject != u.StableID || info.Email != u.Email || !info.EmailVerified {
				t.Errorf("%s: userinfo %+v", name, info)
			}
			// A sign-in token does not reach /mcp.
			if st := oidcMCPStatus(t, s, tok.AccessToken); st != http.StatusUnauthorized {
				t.Errorf("%s: /mcp with a sign-in token answered %d", name, st)
			}
		}
	})
}
