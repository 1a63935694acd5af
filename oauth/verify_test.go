package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// queryCounter counts the SQL statements run on the handles it is added to.
type queryCounter struct {
	n   atomic.Int64
	srv *oauth.Server
}

func (c *queryCounter) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) AfterQuery(context.Context, *bun.QueryEvent) {}

// count returns the queries f ran: through bun, plus the prepared bearer
// check (which bypasses bun's hooks) when srv is set.
func (c *queryCounter) count(f func()) int64 {
	before, prepared := c.n.Load(), c.prepared()
	f()
	return c.n.Load() - before + c.prepared() - prepared
}

func (c *queryCounter) prepared() int64 {
	if c.srv == nil {
		return 0
	}
	return c.srv.BearerChecks()
}

func countQueries(st *storage.Store) *queryCounter {
	c := &queryCounter{}
	st.DB.AddQueryHook(c)
	if st.Reader != st.DB {
		st.Reader.AddQueryHook(c)
	}
	return c
}

func TestVerifyAccessToken(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		queries := countQueries(st)
		queries.srv = e.srv
		ctx := context.Background()

		t.Run("one query, with roles and permissions", func(t *testing.T) {
			_, uid, tok := e.signIn()
			if _, err := st.DB.NewRaw("INSERT INTO user_roles (user_id, role_name, granted_at) VALUES (?, 'user', ?)", uid, time.Now().UTC()).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			var a *oauth.Access
			n := queries.count(func() {
				var err error
				if a, err = e.srv.VerifyAccessToken(ctx, tok.AccessToken); err != nil {
					t.Fatal(err)
				}
			})
			if n != 1 {
				t.Errorf("verify ran %d queries, want 1", n)
			}
			if !slices.Equal(a.Roles, []string{"user"}) || !slices.Contains(a.Permissions, "read:user:own") || slices.Contains(a.Permissions, "read:user:any") {
				t.Errorf("roles %v permissions %v", a.Roles, a.Permissions)
			}
			if len(a.StableUserID) != 64 || a.UserID != uid {
				t.Errorf("subject: %+v", a)
			}
			c := a.Caller()
			if c.UserID != a.StableUserID || !c.HasRole("user") || !c.HasPermission(capabilities.ReadUserOwn) || !c.HasScope("mcp") || c.HasScope("other") || c.State != capabilities.AccountActive {
				t.Errorf("caller: %+v", c)
			}
		})

		t.Run("last use is written at most every few minutes", func(t *testing.T) {
			_, _, tok := e.signIn()
			e.clock.Advance(6 * time.Minute)
			defer e.clock.Advance(-6 * time.Minute)
			for i, want := range []int64{2, 1} {
				if n := queries.count(func() { _, _ = e.srv.VerifyAccessToken(ctx, tok.AccessToken) }); n != want {
					t.Errorf("verify %d ran %d queries, want %d", i, n, want)
				}
			}
		})

		t.Run("malformed costs no query", func(t *testing.T) {
			for _, tok := range []string{"", "garbage", "ory_at_a.b", "a.b.c"} {
				var err error
				if n := queries.count(func() { _, err = e.srv.VerifyAccessToken(ctx, tok) }); n != 0 || !errors.Is(err, oauth.ErrInvalidToken) {
					t.Errorf("%q: %d queries, err %v", tok, n, err)
				}
			}
		})

		refused := []struct {
			name  string
			spoil func(t *testing.T, uid int64, tok tokenResponse)
			after func()
		}{
			{name: "expired", spoil: func(*testing.T, int64, tokenResponse) {
				e.clock.Advance(oauth.DefaultAccessTokenLifetime + time.Second)
			},
				after: func() { e.clock.Advance(-(oauth.DefaultAccessTokenLifetime + time.Second)) }},
			{name: "foreign audience", spoil: func(t *testing.T, uid int64, _ tokenResponse) {
				if _, err := st.DB.NewRaw("UPDATE oauth_tokens SET audience = ? WHERE user_id = ? AND kind = 'access'", "https://elsewhere.example/mcp", uid).Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}},
			{name: "password changed after issue", spoil: func(t *testing.T, uid int64, _ tokenResponse) {
				e.setUser(uid, "password_changed_at", time.Now().UTC().Add(time.Second))
			}},
			{name: "revoke all", spoil: func(t *testing.T, uid int64, _ tokenResponse) {
				if err := e.srv.RevokeAll(ctx, uid); err != nil {
					t.Fatal(err)
				}
			}},
			{name: "revoke all in the password change transaction", spoil: func(t *testing.T, uid int64, _ tokenResponse) {
				err := st.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error { return e.srv.RevokeAllInTx(ctx, tx, uid) })
				if err != nil {
					t.Fatal(err)
				}
			}},
			{name: "grant revoked", spoil: func(t *testing.T, uid int64, _ tokenResponse) {
				grants, err := e.srv.Grants(ctx, uid)
				if err != nil || len(grants) != 1 {
					t.Fatalf("grants: %v %v", grants, err)
				}
				if err := e.srv.RevokeGrant(ctx, uid, grants[0].ID); err != nil {
					t.Fatal(err)
				}
			}},
			{name: "user deleted", spoil: func(t *testing.T, uid int64, _ tokenResponse) {
				if _, err := st.DB.NewRaw("DELETE FROM users WHERE id = ?", uid).Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, tt := range refused {
			t.Run(tt.name, func(t *testing.T) {
				_, uid, tok := e.signIn()
				if e.mcpStatus(tok.AccessToken) != http.StatusOK {
					t.Fatal("token does not work to begin with")
				}
				tt.spoil(t, uid, tok)
				if tt.after != nil {
					defer tt.after()
				}
				if _, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken); !errors.Is(err, oauth.ErrInvalidToken) {
					t.Fatalf("verify: %v, want ErrInvalidToken", err)
				}
				if got := e.mcpStatus(tok.AccessToken); got != http.StatusUnauthorized {
					t.Fatalf("/mcp: %d", got)
				}
			})
		}
	})
}

func TestGrants(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		ctx := context.Background()
		conf, alice, aliceTok := e.signIn()
		_, bob, bobTok := e.signIn()

		grants, err := e.srv.Grants(ctx, alice)
		if err != nil || len(grants) != 1 {
			t.Fatalf("alice's grants: %v %v", grants, err)
		}
		g := grants[0]
		if g.ClientID != conf.ClientID || g.ClientName == "" || !slices.Equal(g.Scopes, []string{"mcp"}) || g.CreatedAt.IsZero() || g.LastUsedAt.IsZero() {
			t.Errorf("grant: %+v", g)
		}
		if err := e.srv.RevokeGrant(ctx, bob, g.ID); !errors.Is(err, oauth.ErrGrantNotFound) {
			t.Fatalf("bob revoking alice's grant: %v", err)
		}
		if e.mcpStatus(aliceTok.AccessToken) != http.StatusOK {
			t.Fatal("bob's attempt revoked alice's grant")
		}
		if err := e.srv.RevokeGrant(ctx, alice, g.ID); err != nil {
			t.Fatal(err)
		}
		if e.mcpStatus(aliceTok.AccessToken) != http.StatusUnauthorized {
			t.Error("alice's access token survived the revocation")
		}
		if got := e.refresh(conf, aliceTok.RefreshToken); got.Error != "invalid_grant" {
			t.Errorf("alice's refresh token survived: %+v", got)
		}
		if e.mcpStatus(bobTok.AccessToken) != http.StatusOK {
			t.Error("revoking alice's grant touched bob's")
		}
		if err := e.srv.RevokeAll(ctx, alice); err != nil {
			t.Fatal(err)
		}
		if e.mcpStatus(bobTok.AccessToken) != http.StatusOK {
			t.Error("revoking all of alice's grants touched bob's")
		}
		// Consent was forgotten with the grant: the next authorization asks.
		_, consents := e.login.pages()
		e.do(http.MethodPost, e.authURL(conf, nil), map[string][]string{"email": {emailOf(t, st, alice)}})
		if _, c := e.login.pages(); c != consents+1 {
			t.Error("consent not asked again after revocation")
		}
	})
}

func emailOf(t *testing.T, st *storage.Store, id int64) string {
	t.Helper()
	var email string
	if err := st.Reader.NewRaw("SELECT email FROM users WHERE id = ?", id).Scan(context.Background(), &email); err != nil {
		t.Fatal(err)
	}
	return email
}

func TestCleanup(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st, func(o *oauth.Options) { o.ClientIdleTTL = 48 * time.Hour })
		ctx := context.Background()
		conf, uid, tok := e.signIn()
		idle := e.publicClient()

		e.clock.Advance(2 * time.Hour) // access tokens and the code expire
		tokens, clients, err := e.srv.Cleanup(ctx)
		if err != nil || tokens < 2 || clients != 0 {
			t.Fatalf("cleanup: %d tokens %d clients %v", tokens, clients, err)
		}
		next := e.refresh(conf, tok.RefreshToken) // renews conf
		if next.Status != 200 {
			t.Fatalf("refresh after cleanup: %+v", next)
		}
		e.clock.Advance(47 * time.Hour)
		if _, clients, err = e.srv.Cleanup(ctx); err != nil || clients != 1 {
			t.Fatalf("reap: %d clients %v", clients, err)
		}
		if got := e.token(map[string][]string{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {idle.ClientID}}); got.Status != http.StatusUnauthorized || got.Error != "invalid_client" {
			t.Errorf("reaped client: %+v", got)
		}
		if grants, _ := e.srv.Grants(ctx, uid); len(grants) != 1 {
			t.Errorf("the used client's grant was reaped: %v", grants)
		}
	})
}

// BenchmarkVerifyAccessToken measures the bearer check of /mcp.
func BenchmarkVerifyAccessToken(b *testing.B) {
	for _, d := range storagetest.Dialects() {
		b.Run(string(d), func(b *testing.B) {
			e := newEnv(b, storagetest.Open(b, d))
			_, _, tok := e.signIn()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
