package oauth_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// benchSignIn signs in the user named by a header: the benchmark drives the
// authorization endpoint in process only.
type benchSignIn struct{}

func (benchSignIn) Login(w http.ResponseWriter, r *http.Request, _ *oauth.AuthorizeRequest) (int64, bool) {
	id, err := strconv.ParseInt(r.Header.Get("X-Bench-User"), 10, 64)
	if err != nil {
		http.Error(w, "no user", http.StatusUnauthorized)
		return 0, false
	}
	return id, true
}

func (benchSignIn) Consent(http.ResponseWriter, *http.Request, *oauth.AuthorizeRequest, int64) (bool, bool) {
	return true, true
}

// benchToken issues a real access token: registration, authorization code
// with PKCE S256, token exchange.
func benchToken(b *testing.B, srv *oauth.Server, userID int64) string {
	b.Helper()
	ctx := context.Background()
	mux := http.NewServeMux()
	srv.Register(mux)
	const redirect = "http://127.0.0.1:9/callback"
	reg, err := srv.RegisterClient(ctx, oauth.ClientMetadata{RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none", ClientName: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	verifier := base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirect}, "scope": {oauth.ScopeMCP},
		"state": {"bench-state-0123456789"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}, "resource": {srv.Resource()},
	}
	req := httptest.NewRequest(http.MethodGet, oauth.PathAuthorize+"?"+q.Encode(), nil)
	req.Header.Set("X-Bench-User", strconv.FormatInt(userID, 10))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		b.Fatalf("authorize: %d %s", rec.Code, rec.Body.String())
	}
	form := url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "client_id": {reg.ClientID},
		"redirect_uri": {redirect}, "code_verifier": {verifier}, "resource": {srv.Resource()},
	}
	req = httptest.NewRequest(http.MethodPost, oauth.PathToken, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || tok.AccessToken == "" {
		b.Fatalf("token: %d %s", rec.Code, rec.Body.String())
	}
	return tok.AccessToken
}

// BenchmarkBearerCheck is the bearer check of every /mcp request: one
// SQL query for the token, its grant, the account state, roles and
// permissions. Run with ENCLAVE_TEST_POSTGRES set for the PostgreSQL case.
func BenchmarkBearerCheck(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			st := storagetest.Open(b, d)
			acc, err := accounts.New(ctx, st, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			u, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "bench@example.test", Username: "benchuser", Password: "bench-password-0123456789", Verified: true})
			if err != nil {
				b.Fatal(err)
			}
			srv, err := oauth.New(ctx, oauth.Options{Store: st, BaseURL: "http://127.0.0.1:9", LoginConsent: benchSignIn{}, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			token := benchToken(b, srv, u.ID)
			if _, err := srv.VerifyAccessToken(ctx, token); err != nil { // records the grant's use
				b.Fatal(err)
			}
			b.Run("valid", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := srv.VerifyAccessToken(ctx, token); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("forged", func(b *testing.B) {
				forged := token[:len(token)-4] + "AAAA"
				b.ReportAllocs()
				for b.Loop() {
					if _, err := srv.VerifyAccessToken(ctx, forged); err == nil {
						b.Fatal(fmt.Errorf("forged token accepted"))
					}
				}
			})
		})
	}
}
