package oauth_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestRefreshRotation(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)

		t.Run("rotates", func(t *testing.T) {
			conf, _, tok := e.signIn()
			next := e.refresh(conf, tok.RefreshToken)
			if next.Status != 200 || next.RefreshToken == "" || next.RefreshToken == tok.RefreshToken || next.AccessToken == tok.AccessToken {
				t.Fatalf("refresh: %+v", next)
			}
			if next.Scope != "mcp" || next.ExpiresIn <= 0 || next.ExpiresIn > int(oauth.DefaultAccessTokenLifetime/time.Second) {
				t.Errorf("refresh: scope %q expires_in %d", next.Scope, next.ExpiresIn)
			}
			third := e.refresh(conf, next.RefreshToken)
			if third.Status != 200 || e.mcpStatus(third.AccessToken) != http.StatusOK {
				t.Fatalf("second refresh: %+v", third)
			}
		})

		t.Run("duplicate inside the grace window gets the same pair", func(t *testing.T) {
			conf, _, tok := e.signIn()
			first := e.refresh(conf, tok.RefreshToken)
			e.clock.Advance(oauth.DefaultRefreshGracePeriod - time.Second)
			second := e.refresh(conf, tok.RefreshToken)
			if second.Status != 200 || second.AccessToken != first.AccessToken || second.RefreshToken != first.RefreshToken {
				t.Fatalf("duplicate: %+v, first %+v", second, first)
			}
			if e.mcpStatus(first.AccessToken) != http.StatusOK {
				t.Fatal("the pair stopped working")
			}
			if next := e.refresh(conf, first.RefreshToken); next.Status != 200 {
				t.Fatalf("the new refresh token: %+v", next)
			}
		})

		t.Run("reuse after the grace window revokes the grant", func(t *testing.T) {
			conf, uid, tok := e.signIn()
			first := e.refresh(conf, tok.RefreshToken)
			e.clock.Advance(oauth.DefaultRefreshGracePeriod + time.Second)
			reused := e.refresh(conf, tok.RefreshToken)
			if reused.Status != 400 || reused.Error != "invalid_grant" {
				t.Fatalf("reuse: %+v", reused)
			}
			if e.mcpStatus(first.AccessToken) != http.StatusUnauthorized || e.mcpStatus(tok.AccessToken) != http.StatusUnauthorized {
				t.Error("access tokens of the grant still work")
			}
			if got := e.refresh(conf, first.RefreshToken); got.Error != "invalid_grant" {
				t.Errorf("the rotated-to refresh token still works: %+v", got)
			}
			grants, err := e.srv.Grants(context.Background(), uid)
			if err != nil || len(grants) != 0 {
				t.Errorf("grants after reuse: %v %v", grants, err)
			}
		})

		t.Run("no grace window when disabled", func(t *testing.T) {
			e := newEnv(t, st, func(o *oauth.Options) { o.RefreshGracePeriod = -1 })
			conf, _, tok := e.signIn()
			e.refresh(conf, tok.RefreshToken)
			if got := e.refresh(conf, tok.RefreshToken); got.Error != "invalid_grant" {
				t.Fatalf("reuse: %+v", got)
			}
		})

		t.Run("expired", func(t *testing.T) {
			conf, _, tok := e.signIn()
			e.clock.Advance(oauth.DefaultRefreshTokenLifetime + time.Minute)
			defer e.clock.Advance(-(oauth.DefaultRefreshTokenLifetime + time.Minute))
			if got := e.refresh(conf, tok.RefreshToken); got.Error != "invalid_grant" {
				t.Fatalf("expired refresh: %+v", got)
			}
		})

		t.Run("another client", func(t *testing.T) {
			_, _, tok := e.signIn()
			other := e.publicClient()
			if got := e.refresh(other, tok.RefreshToken); got.Error != "invalid_grant" {
				t.Fatalf("refresh by another client: %+v", got)
			}
		})

		t.Run("foreign resource", func(t *testing.T) {
			conf, _, tok := e.signIn()
			got := e.token(map[string][]string{
				"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken},
				"client_id": {conf.ClientID}, "resource": {"https://elsewhere.example/mcp"},
			})
			if got.Error != "invalid_target" {
				t.Fatalf("refresh for a foreign resource: %+v", got)
			}
		})

		t.Run("forged token", func(t *testing.T) {
			conf, _, _ := e.signIn()
			if got := e.refresh(conf, "ory_rt_forged.forged"); got.Error != "invalid_grant" {
				t.Fatalf("forged: %+v", got)
			}
		})
	})
}

// Two agent windows refreshing the same token at once both keep working:
// every concurrent exchange inside the grace window gets the same pair, and
// the grant survives.
func TestConcurrentRefreshInGraceWindow(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf, uid, tok := e.signIn()
		const n = 8
		results := make([]tokenResponse, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				results[i] = e.refresh(conf, tok.RefreshToken)
			})
		}
		close(start)
		wg.Wait()
		for i, r := range results {
			if r.Status != 200 {
				t.Fatalf("exchange %d: %+v", i, r)
			}
			if r.AccessToken != results[0].AccessToken || r.RefreshToken != results[0].RefreshToken {
				t.Fatalf("exchange %d got another pair", i)
			}
		}
		if e.mcpStatus(results[0].AccessToken) != http.StatusOK {
			t.Fatal("the shared pair does not work")
		}
		if next := e.refresh(conf, results[0].RefreshToken); next.Status != 200 {
			t.Fatalf("refreshing the shared pair: %+v", next)
		}
		grants, err := e.srv.Grants(context.Background(), uid)
		if err != nil || len(grants) != 1 {
			t.Fatalf("grants: %v %v", grants, err)
		}
	})
}

// Two replicas (separate stores and servers on one database) refreshing
// the same token at once agree on one pair: the decision is in SQL. They
// also share the token signing secret through the database.
func TestRefreshAcrossReplicas(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			cfg := storagetest.Config(t, d)
			open := func() *storage.Store {
				st, err := storage.Open(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			first := open()
			if _, err := migrations.Apply(context.Background(), first.DB); err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, first)
			conf, _, tok := e.signIn()

			second := open()
			mux := http.NewServeMux()
			replica, err := oauth.New(context.Background(), oauth.Options{Store: second, BaseURL: e.ts.URL, LoginConsent: e.login})
			if err != nil {
				t.Fatal(err)
			}
			replica.Register(mux)
			ts := httptest.NewServer(mux)
			t.Cleanup(ts.Close)
			if _, err := replica.VerifyAccessToken(context.Background(), tok.AccessToken); err != nil {
				t.Fatalf("the replica does not accept the first server's token: %v", err)
			}

			const n = 8
			results := make([]tokenResponse, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {conf.ClientID}}
					target := e.ts.URL
					if i%2 == 1 {
						target = ts.URL
					}
					resp, err := http.PostForm(target+"/oauth/token", form)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					results[i].Status = resp.StatusCode
					_ = json.NewDecoder(resp.Body).Decode(&results[i])
				})
			}
			close(start)
			wg.Wait()
			for i, r := range results {
				if r.Status != 200 || r.AccessToken != results[0].AccessToken || r.RefreshToken != results[0].RefreshToken {
					t.Fatalf("exchange %d: %+v, first %+v", i, r, results[0])
				}
			}
		})
	}
}
