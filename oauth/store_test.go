package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ory/fosite"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The fosite storage contract, including the errors fosite's flows rely
// on, on every dialect.
func TestStoreContract(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		srv, err := New(ctx, Options{Store: st, BaseURL: "https://as.example"})
		if err != nil {
			t.Fatal(err)
		}
		s := srv.store
		reg, err := srv.RegisterClient(ctx, ClientMetadata{RedirectURIs: []string{"https://agent.example/cb"}, TokenEndpointAuthMethod: "none"})
		if err != nil {
			t.Fatal(err)
		}
		var uid int64
		now := time.Now().UTC()
		if err := st.DB.NewRaw(`INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, 'c@example.test', 'c', ?, ?) RETURNING id`,
			"c000000000000000000000000000000000000000000000000000000000000000", now, now).Scan(ctx, &uid); err != nil {
			t.Fatal(err)
		}
		client, err := s.GetClient(ctx, reg.ClientID)
		if err != nil {
			t.Fatal(err)
		}
		newRequest := func(id string) *fosite.Request {
			sess := &session{UserID: uid, Subject: "c"}
			sess.SetExpiresAt(fosite.AuthorizeCode, now.Add(AuthorizationCodeLifetime))
			sess.SetExpiresAt(fosite.AccessToken, now.Add(time.Hour))
			sess.SetExpiresAt(fosite.RefreshToken, now.Add(24*time.Hour))
			r := fosite.NewRequest()
			r.ID = id
			r.Client = client
			r.Session = sess
			r.Form = url.Values{"redirect_uri": {"https://agent.example/cb"}, "password": {"never stored"}}
			r.GrantScope("mcp")
			r.GrantAudience("https://as.example/mcp")
			return r
		}

		t.Run("clients", func(t *testing.T) {
			if _, err := s.GetClient(ctx, "nobody"); !errors.Is(err, fosite.ErrNotFound) {
				t.Errorf("unknown client: %v", err)
			}
			// A private_key_jwt assertion's jti is accepted once until it
			// expires; a second record of it fails (the insert decides).
			if err := s.ClientAssertionJWTValid(ctx, "jti"); err != nil {
				t.Errorf("unseen jti: %v", err)
			}
			if err := s.SetClientAssertionJWT(ctx, "jti", time.Now().Add(time.Minute)); err != nil {
				t.Fatalf("record jti: %v", err)
			}
			if err := s.ClientAssertionJWTValid(ctx, "jti"); !errors.Is(err, fosite.ErrJTIKnown) {
				t.Errorf("seen jti: %v", err)
			}
			if err := s.SetClientAssertionJWT(ctx, "jti", time.Now().Add(time.Minute)); !errors.Is(err, fosite.ErrJTIKnown) {
				t.Errorf("second record of a jti: %v", err)
			}
			if err := s.SetClientAssertionJWT(ctx, "long", time.Now().Add(2*time.Hour)); err == nil {
				t.Error("an assertion living two hours was recorded")
			}
		})

		t.Run("authorization code", func(t *testing.T) {
			req := newRequest("req-code")
			if err := s.CreateAuthorizeCodeSession(ctx, "code-sig", req); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetAuthorizeCodeSession(ctx, "code-sig", &session{})
			if err != nil || got.GetID() != "req-code" || got.GetClient().GetID() != client.GetID() {
				t.Fatalf("get: %v %v", got, err)
			}
			if got.GetRequestForm().Get("redirect_uri") == "" || got.GetRequestForm().Has("password") {
				t.Errorf("stored form: %v", got.GetRequestForm())
			}
			if got.GetSession().(*session).UserID != uid {
				t.Errorf("session: %+v", got.GetSession())
			}
			if err := s.InvalidateAuthorizeCodeSession(ctx, "code-sig"); err != nil {
				t.Fatal(err)
			}
			got, err = s.GetAuthorizeCodeSession(ctx, "code-sig", &session{})
			if !errors.Is(err, fosite.ErrInvalidatedAuthorizeCode) || got == nil || got.GetID() != "req-code" {
				t.Fatalf("used code: %v %v (want the request with ErrInvalidatedAuthorizeCode)", got, err)
			}
			if err := s.InvalidateAuthorizeCodeSession(ctx, "code-sig"); !errors.Is(err, fosite.ErrInvalidatedAuthorizeCode) {
				t.Errorf("second invalidation: %v", err)
			}
			if _, err := s.GetAuthorizeCodeSession(ctx, "other", &session{}); !errors.Is(err, fosite.ErrNotFound) {
				t.Errorf("unknown code: %v", err)
			}
		})

		t.Run("pkce", func(t *testing.T) {
			req := newRequest("req-pkce")
			if err := s.CreateAuthorizeCodeSession(ctx, "shared-sig", req); err != nil {
				t.Fatal(err)
			}
			if err := s.CreatePKCERequestSession(ctx, "shared-sig", req); err != nil {
				t.Fatal(err)
			}
			if got, err := s.GetPKCERequestSession(ctx, "shared-sig", &session{}); err != nil || got.GetID() != "req-pkce" {
				t.Fatalf("get: %v %v", got, err)
			}
			if err := s.DeletePKCERequestSession(ctx, "shared-sig"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetPKCERequestSession(ctx, "shared-sig", &session{}); !errors.Is(err, fosite.ErrNotFound) {
				t.Errorf("deleted: %v", err)
			}
			if _, err := s.GetAuthorizeCodeSession(ctx, "shared-sig", &session{}); err != nil {
				t.Errorf("deleting the PKCE row touched the code: %v", err)
			}
		})

		t.Run("access and refresh tokens", func(t *testing.T) {
			req := newRequest("req-tok")
			if err := s.CreateAccessTokenSession(ctx, "at-sig", req); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateRefreshTokenSession(ctx, "rt-sig", "at-sig", req); err != nil {
				t.Fatal(err)
			}
			var exp time.Time
			if err := st.Reader.NewSelect().Table("oauth_tokens").Column("expires_at").Where("signature = 'rt-sig'").Scan(ctx, &exp); err != nil {
				t.Fatal(err)
			}
			if d := exp.Sub(now.Add(24 * time.Hour)); d > time.Second || d < -time.Second {
				t.Errorf("refresh token expires at %v, want %v", exp, now.Add(24*time.Hour))
			}
			if got, err := s.GetAccessTokenSession(ctx, "at-sig", &session{}); err != nil || got.GetGrantedScopes()[0] != "mcp" {
				t.Fatalf("access: %v %v", got, err)
			}
			if err := s.RotateRefreshToken(ctx, "req-tok", "rt-sig"); err != nil {
				t.Fatal(err)
			}
			if got, err := s.GetRefreshTokenSession(ctx, "rt-sig", &session{}); !errors.Is(err, fosite.ErrInactiveToken) || got == nil {
				t.Errorf("rotated: %v %v (want the request with ErrInactiveToken)", got, err)
			}
			if err := s.RotateRefreshToken(ctx, "req-tok", "rt-sig"); !errors.Is(err, fosite.ErrSerializationFailure) {
				t.Errorf("second rotation: %v", err)
			}
			if err := s.RevokeAccessToken(ctx, "req-tok"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetAccessTokenSession(ctx, "at-sig", &session{}); !errors.Is(err, fosite.ErrNotFound) {
				t.Errorf("revoked access: %v", err)
			}
			if err := s.RevokeRefreshToken(ctx, "req-tok"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetRefreshTokenSession(ctx, "rt-sig", &session{}); !errors.Is(err, fosite.ErrNotFound) {
				t.Errorf("revoked refresh: %v", err)
			}
		})

		t.Run("transactions", func(t *testing.T) {
			for _, commit := range []bool{true, false} {
				txCtx, err := s.BeginTX(ctx)
				if err != nil {
					t.Fatal(err)
				}
				sig := "tx-rollback"
				if commit {
					sig = "tx-commit"
				}
				if err := s.CreateAccessTokenSession(txCtx, sig, newRequest("req-"+sig)); err != nil {
					t.Fatal(err)
				}
				if commit {
					err = s.Commit(txCtx)
				} else {
					err = s.Rollback(txCtx)
				}
				if err != nil {
					t.Fatal(err)
				}
				_, err = s.GetAccessTokenSession(ctx, sig, &session{})
				if commit != (err == nil) {
					t.Errorf("commit %v: get %v", commit, err)
				}
			}
		})
	})
}

// A code past its 10 minutes is refused with invalid_grant; the same code
// inside them is accepted.
func TestExpiredCode(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		srv, err := New(ctx, Options{Store: st, BaseURL: "https://as.example"})
		if err != nil {
			t.Fatal(err)
		}
		reg, err := srv.RegisterClient(ctx, ClientMetadata{RedirectURIs: []string{"https://agent.example/cb"}, TokenEndpointAuthMethod: "none"})
		if err != nil {
			t.Fatal(err)
		}
		client, err := srv.store.GetClient(ctx, reg.ClientID)
		if err != nil {
			t.Fatal(err)
		}
		var uid int64
		now := time.Now().UTC()
		if err := st.DB.NewRaw(`INSERT INTO users (stable_user_id, email, username, email_verified_at, created_at, updated_at) VALUES (?, 'x@example.test', 'x', ?, ?, ?) RETURNING id`,
			"d000000000000000000000000000000000000000000000000000000000000000", now, now, now).Scan(ctx, &uid); err != nil {
			t.Fatal(err)
		}
		const verifier = "verifier-verifier-verifier-verifier-verifier"
		sum := sha256.Sum256([]byte(verifier))
		for _, tt := range []struct {
			name      string
			age       time.Duration
			wantCode  int
			wantError string
		}{
			{"fresh", time.Minute, http.StatusOK, ""},
			{"expired", AuthorizationCodeLifetime + time.Minute, http.StatusBadRequest, "invalid_grant"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := fosite.NewRequest()
				r.ID = "req-" + tt.name
				r.Client = client
				r.RequestedAt = now.Add(-tt.age)
				sess := &session{UserID: uid, Subject: "x"}
				sess.SetExpiresAt(fosite.AuthorizeCode, r.RequestedAt.Add(AuthorizationCodeLifetime))
				r.Session = sess
				r.Form = url.Values{"redirect_uri": {"https://agent.example/cb"}, "code_challenge_method": {"S256"},
					"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}}
				r.GrantScope(ScopeMCP)
				r.GrantAudience(srv.Resource())
				code, sig, err := srv.strategy.GenerateAuthorizeCode(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.store.CreateAuthorizeCodeSession(ctx, sig, r); err != nil {
					t.Fatal(err)
				}
				if err := srv.store.CreatePKCERequestSession(ctx, sig, r); err != nil {
					t.Fatal(err)
				}
				form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {reg.ClientID},
					"redirect_uri": {"https://agent.example/cb"}, "code_verifier": {verifier}}
				req := httptest.NewRequest(http.MethodPost, PathToken, strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, req)
				if rec.Code != tt.wantCode || (tt.wantError != "" && !strings.Contains(rec.Body.String(), `"error":"`+tt.wantError+`"`)) {
					t.Fatalf("got %d %s, want %d %s", rec.Code, rec.Body, tt.wantCode, tt.wantError)
				}
			})
		}
	})
}
