package oauth_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// realMCP serves /mcp with package mcp, its tokens checked by srv and its
// registry holding the connected-apps capabilities.
func realMCP(t testing.TB, st *storage.Store) func(*oauth.Server) http.Handler {
	return func(srv *oauth.Server) http.Handler {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		ownerOf := func(ctx context.Context, c capabilities.Caller) (capabilities.Owner, error) {
			var id int64
			err := st.Reader.NewRaw("SELECT id FROM users WHERE stable_user_id = ?", c.UserID).Scan(ctx, &id)
			return storage.Owner{ID: id, StableID: c.UserID}, err
		}
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet})
		if err := reg.Register(srv.Capabilities(ownerOf)...); err != nil {
			t.Fatal(err)
		}
		vocab, _ := capabilities.NewVocabulary()
		m, err := mcp.New(mcp.Options{
			Registry: reg,
			BaseURL:  srv.Issuer(),
			Logger:   quiet,
			Verifier: mcp.TokenVerifierFunc(func(ctx context.Context, token string) (mcp.TokenInfo, error) {
				a, err := srv.VerifyAccessToken(ctx, token)
				if err != nil {
					return mcp.TokenInfo{}, fmt.Errorf("%w: %w", mcp.ErrInvalidToken, err)
				}
				return mcp.TokenInfo{UserID: a.StableUserID, Scopes: a.Scopes, Audience: a.Audience, ExpiresAt: a.ExpiresAt}, nil
			}),
			Loader: capabilities.CallerLoaderFunc(func(_ context.Context, id string) (capabilities.Caller, error) {
				return capabilities.Caller{UserID: id, Roles: []string{"user"}, Permissions: vocab.RolePermissions(capabilities.RoleUser),
					State: capabilities.AccountActive, Interactive: true}, nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
}

// The end-to-end flow with mcp-go's OAuth client: 401 → metadata →
// dynamic registration → authorize (PKCE S256, resource) → token → MCP
// initialize, tools/list, tools/call → refresh → revoke → 401.
func TestMCPGoClient(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := startEnv(t, st, realMCP(t, st))
		_, email := e.createUser(userState{})
		ctx := t.Context()
		tokens := transport.NewMemoryTokenStore()
		tr, err := transport.NewStreamableHTTP(e.ts.URL+"/mcp", transport.WithHTTPOAuth(transport.OAuthConfig{
			RedirectURI: "http://127.0.0.1:9/callback",
			Scopes:      []string{"mcp"},
			TokenStore:  tokens,
			PKCEEnabled: true,
		}))
		if err != nil {
			t.Fatal(err)
		}
		c := mcpclient.NewClient(tr, mcpclient.WithProtocolVersion("2025-11-25"))
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		initialize := func() error {
			_, err := c.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
				ProtocolVersion: "2025-11-25",
				ClientInfo:      mcpgo.Implementation{Name: "oauth-test", Version: "1"},
			}})
			return err
		}

		err = initialize()
		if !mcpclient.IsOAuthAuthorizationRequiredError(err) {
			t.Fatalf("initialize without a token: %v, want authorization required", err)
		}
		h := mcpclient.GetOAuthHandler(err)
		if err := h.RegisterClient(ctx, "mcp-go test client"); err != nil {
			t.Fatal(err)
		}
		verifier, _ := mcpclient.GenerateCodeVerifier()
		state, _ := mcpclient.GenerateState()
		authURL, err := h.GetAuthorizationURL(ctx, state, mcpclient.GenerateCodeChallenge(verifier))
		if err != nil {
			t.Fatal(err)
		}
		au, _ := url.Parse(authURL)
		if au.Query().Get("resource") != e.srv.Resource() || au.Query().Get("code_challenge_method") != "S256" {
			t.Fatalf("authorization URL %s", authURL)
		}
		if resp := e.do(http.MethodGet, authURL, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("login page: %d", resp.StatusCode)
		}
		resp := e.do(http.MethodPost, authURL, url.Values{"email": {email}, "decision": {"approve"}})
		back, _ := url.Parse(resp.Header.Get("Location"))
		if back.Query().Get("iss") != e.ts.URL {
			t.Fatalf("authorization response %s", back)
		}
		if err := h.ProcessAuthorizationResponse(ctx, back.Query().Get("code"), back.Query().Get("state"), verifier); err != nil {
			t.Fatal(err)
		}
		if err := initialize(); err != nil {
			t.Fatalf("initialize with the token: %v", err)
		}
		tools, err := c.ListTools(ctx, mcpgo.ListToolsRequest{})
		if err != nil || !slices.ContainsFunc(tools.Tools, func(t mcpgo.Tool) bool { return t.Name == "oauthGrantList" }) {
			t.Fatalf("tools/list: %v %v", tools, err)
		}
		res, err := c.CallTool(ctx, mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "oauthGrantList", Arguments: map[string]any{}}})
		if err != nil || res.IsError {
			t.Fatalf("tools/call: %+v %v", res, err)
		}
		if got := mustJSON(res.StructuredContent); !strings.Contains(got, "mcp-go test client") {
			t.Errorf("tools/call result %s does not list the grant", got)
		}

		// Refresh: an expired access token makes the client rotate the pair.
		first, _ := tokens.GetToken(ctx)
		stale := *first
		stale.ExpiresAt = time.Now().Add(-time.Minute)
		_ = tokens.SaveToken(ctx, &stale)
		if _, err := c.ListTools(ctx, mcpgo.ListToolsRequest{}); err != nil {
			t.Fatalf("tools/list after refresh: %v", err)
		}
		second, _ := tokens.GetToken(ctx)
		if second.RefreshToken == first.RefreshToken || second.AccessToken == first.AccessToken {
			t.Fatal("the client did not refresh")
		}

		// Revoke: the resource refuses the grant's tokens.
		resp = e.do(http.MethodPost, e.ts.URL+"/oauth/revoke", url.Values{"token": {second.RefreshToken}, "client_id": {h.GetClientID()}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("revoke: %d", resp.StatusCode)
		}
		_, err = c.ListTools(ctx, mcpgo.ListToolsRequest{})
		if !mcpclient.IsOAuthAuthorizationRequiredError(err) && !errors.Is(err, transport.ErrUnauthorized) {
			t.Fatalf("tools/list after revoke: %v, want 401", err)
		}
	})
}
