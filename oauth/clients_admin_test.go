package oauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An admin lists the clients and blocks one: its tokens stop at the next
// bearer check (still one query), it can no longer refresh or authorize;
// other clients are untouched; unblocking restores it. Non-admins cannot
// call the capabilities.
func TestAdminBlocksClient(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st)
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(e.srv.AdminCapabilities()...); err != nil {
			t.Fatal(err)
		}
		admin := capabilities.Caller{UserID: "admin", Roles: []string{capabilities.RoleAdmin}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		user := capabilities.Caller{UserID: "user", Roles: []string{"user"}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		invoke := func(c capabilities.Caller, name string, in any, out any) error {
			raw, _ := json.Marshal(in)
			res, err := reg.Invoke(ctx, c, name, raw)
			if err != nil {
				return err
			}
			if out != nil {
				b, _ := json.Marshal(res.Structured)
				return json.Unmarshal(b, out)
			}
			return nil
		}

		conf, _, tok := e.signIn()
		other, _, otherTok := e.signIn()
		var list oauth.ClientListOutput
		if err := invoke(admin, "adminOAuthClientList", struct{}{}, &list); err != nil {
			t.Fatal(err)
		}
		var found *oauth.RegisteredClient
		for i := range list.Clients {
			if list.Clients[i].ID == conf.ClientID {
				found = &list.Clients[i]
			}
		}
		if found == nil || found.Grants != 1 || len(found.RedirectURIs) != 1 || !found.Public || found.BlockedAt != nil || found.CreatedAt.IsZero() {
			t.Fatalf("listed client: %+v", found)
		}
		if err := invoke(user, "adminOAuthClientList", struct{}{}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("a user lists clients: %v", err)
		}
		if err := invoke(user, "adminOAuthClientBlock", oauth.ClientBlockInput{ClientID: conf.ClientID}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("a user blocks a client: %v", err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Fatal("token refused before the block")
		}

		var out oauth.ClientBlockOutput
		if err := invoke(admin, "adminOAuthClientBlock", oauth.ClientBlockInput{ClientID: conf.ClientID}, &out); err != nil || !out.Changed || !out.Blocked {
			t.Fatalf("block: %+v %v", out, err)
		}
		_, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken)
		if !isErr(err, oauth.ErrClientBlocked) || !isErr(err, oauth.ErrInvalidToken) {
			t.Fatalf("token of a blocked client: %v", err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
			t.Fatal("a blocked client's token still works")
		}
		if r := e.refresh(conf, tok.RefreshToken); r.Status == http.StatusOK {
			t.Fatal("a blocked client refreshed")
		}
		if e.mcpStatus(otherTok.AccessToken) != http.StatusOK {
			t.Fatal("another client's token stopped")
		}
		_ = other
		if err := invoke(admin, "adminOAuthClientBlock", oauth.ClientBlockInput{ClientID: conf.ClientID}, &out); err != nil || out.Changed {
			t.Fatalf("second block: %+v %v", out, err)
		}
		if err := invoke(admin, "adminOAuthClientBlock", oauth.ClientBlockInput{ClientID: "no-such-client"}, nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("block of an unknown client: %v", err)
		}
		if err := invoke(admin, "adminOAuthClientList", struct{}{}, &list); err != nil {
			t.Fatal(err)
		}
		for _, c := range list.Clients {
			if c.ID == conf.ClientID && c.BlockedAt == nil {
				t.Fatal("the list does not show the block")
			}
		}

		if err := invoke(admin, "adminOAuthClientUnblock", oauth.ClientBlockInput{ClientID: conf.ClientID}, &out); err != nil || !out.Changed || out.Blocked {
			t.Fatalf("unblock: %+v %v", out, err)
		}
		if e.mcpStatus(tok.AccessToken) != http.StatusOK {
			t.Fatal("token refused after the unblock")
		}
	})
}

// A block stops the code exchange of a code issued before it, and a new
// authorization; the refused refresh does not burn the refresh token, so
// an unblocked client carries on.
func TestBlockedClientCodeAndAuthorize(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		e := newEnv(t, st)
		conf, _, tok := e.signIn()
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		if _, err := e.srv.SetClientBlocked(ctx, conf.ClientID, true); err != nil {
			t.Fatal(err)
		}
		if r := e.exchange(conf, u.Query().Get("code"), nil); r.Status == http.StatusOK || r.AccessToken != "" {
			t.Fatalf("a blocked client exchanged a code issued before the block: %+v", r)
		}
		if resp := e.do(http.MethodGet, e.authURL(conf, nil), nil); resp.StatusCode == http.StatusOK {
			t.Fatal("a blocked client got the sign-in page")
		}
		if r := e.refresh(conf, tok.RefreshToken); r.Status == http.StatusOK {
			t.Fatal("a blocked client refreshed")
		}
		if _, err := e.srv.SetClientBlocked(ctx, conf.ClientID, false); err != nil {
			t.Fatal(err)
		}
		if r := e.refresh(conf, tok.RefreshToken); r.Status != http.StatusOK {
			t.Fatalf("refresh after the unblock: %d %s %s", r.Status, r.Error, r.Description)
		}
	})
}
