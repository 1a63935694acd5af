package oauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// postToken posts form to the token or revocation endpoint without
// touching testing.T, so that it can run in a goroutine.
func (e *env) postToken(path string, form url.Values) (tokenResponse, error) {
	resp, err := e.http.PostForm(e.ts.URL+path, form)
	if err != nil {
		return tokenResponse{}, err
	}
	defer resp.Body.Close()
	out := tokenResponse{Status: resp.StatusCode}
	if resp.Header.Get("Content-Type") != "" && resp.ContentLength != 0 {
		_ = json.NewDecoder(resp.Body).Decode(&out)
	}
	return out, nil
}

func (e *env) refreshForm(conf *oauth2.Config, refreshToken string) url.Values {
	return url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {refreshToken},
		"client_id":     {conf.ClientID},
		"resource":      {e.srv.Resource()},
	}
}

// grantFor runs an authorization for a new user of conf and returns the
// user, the grant id and the first pair.
func (e *env) grantFor(conf *oauth2.Config) (int64, string, tokenResponse) {
	e.t.Helper()
	uid, email := e.createUser(userState{})
	u := e.authorize(conf, email, nil)
	tok := e.exchange(conf, u.Query().Get("code"), nil)
	if tok.Status != http.StatusOK {
		e.t.Fatalf("exchange: %d %s %s", tok.Status, tok.Error, tok.Description)
	}
	grants, err := e.srv.Grants(context.Background(), uid)
	if err != nil || len(grants) != 1 {
		e.t.Fatalf("grants: %v %v", grants, err)
	}
	return uid, grants[0].ID, tok
}

// rowsOf counts the token and grant rows left of a grant.
func rowsOf(t *testing.T, st *storage.Store, grantID string) (tokens, grants int64) {
	t.Helper()
	ctx := context.Background()
	nt, err := st.DB.NewSelect().Table("oauth_tokens").Where("request_id = ?", grantID).Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ng, err := st.DB.NewSelect().Table("oauth_grants").Where("id = ?", grantID).Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return nt, ng
}

// A refresh racing a revocation never leaves a working token: whichever
// wins, the grant is gone with every token of it, including a pair the
// refresh issued. Every revocation path is raced: "Disconnect app", a
// password change (the hook runs in the password's transaction), RFC 7009
// revocation of either token, account deletion, and reuse detection.
func TestRefreshRevokeRace(t *testing.T) {
	const rounds = 200
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		// Reuse detection needs a rotated token past the grace window.
		noGrace := newEnv(t, st, func(o *oauth.Options) { o.RefreshGracePeriod = -1 })
		ctx := context.Background()
		conf := e.publicClient()
		noGraceConf := noGrace.publicClient()

		type path struct {
			name string
			env  *env
			conf *oauth2.Config
			// prepare may rotate the pair; it returns the refresh token
			// the racing refresh presents.
			revoke func(uid int64, grantID string, tok tokenResponse) error
		}
		paths := []path{
			{"disconnect app", e, conf, func(uid int64, grantID string, _ tokenResponse) error {
				return e.srv.RevokeGrant(ctx, uid, grantID)
			}},
			{"password change", e, conf, func(uid int64, _ string, _ tokenResponse) error {
				return st.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
					if _, err := tx.NewRaw("UPDATE users SET password_changed_at = ? WHERE id = ?", time.Now().UTC(), uid).Exec(ctx); err != nil {
						return err
					}
					return e.srv.RevokeAllInTx(ctx, tx, uid)
				})
			}},
			{"revoke refresh token", e, conf, func(_ int64, _ string, tok tokenResponse) error {
				r, err := e.postToken("/oauth/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {conf.ClientID}})
				if err == nil && r.Status != http.StatusOK {
					err = fmt.Errorf("revoke: %d %s", r.Status, r.Error)
				}
				return err
			}},
			{"revoke access token", e, conf, func(_ int64, _ string, tok tokenResponse) error {
				r, err := e.postToken("/oauth/revoke", url.Values{"token": {tok.AccessToken}, "client_id": {conf.ClientID}})
				if err == nil && r.Status != http.StatusOK {
					err = fmt.Errorf("revoke: %d %s", r.Status, r.Error)
				}
				return err
			}},
			{"account deletion", e, conf, func(uid int64, _ string, _ tokenResponse) error {
				if _, err := st.DB.NewRaw("UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().UTC(), uid).Exec(ctx); err != nil {
					return err
				}
				return e.srv.RevokeAll(ctx, uid)
			}},
			{"reuse detection", noGrace, noGraceConf, nil}, // revoke set below
		}

		failures, refreshWon := 0, 0
		for round := range rounds {
			p := paths[round%len(paths)]
			uid, grantID, tok := p.env.grantFor(p.conf)
			present := tok.RefreshToken
			revoke := p.revoke
			if revoke == nil {
				// Rotate once; the racing refresh uses the new token while
				// the old one is presented again (reuse: revoke the grant).
				next := p.env.refresh(p.conf, tok.RefreshToken)
				if next.Status != http.StatusOK {
					t.Fatalf("round %d: rotate: %+v", round, next)
				}
				old := tok.RefreshToken
				present = next.RefreshToken
				revoke = func(int64, string, tokenResponse) error {
					r, err := p.env.postToken("/oauth/token", p.env.refreshForm(p.conf, old))
					if err == nil && r.Error != "invalid_grant" {
						err = fmt.Errorf("reuse: %+v", r)
					}
					return err
				}
			}

			start := make(chan struct{})
			var wg sync.WaitGroup
			var refreshed tokenResponse
			var refreshErr, revokeErr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				refreshed, refreshErr = p.env.postToken("/oauth/token", p.env.refreshForm(p.conf, present))
			}()
			go func() {
				defer wg.Done()
				<-start
				revokeErr = revoke(uid, grantID, tok)
			}()
			close(start)
			wg.Wait()
			if refreshErr != nil || revokeErr != nil {
				t.Fatalf("round %d (%s): refresh %v, revoke %v", round, p.name, refreshErr, revokeErr)
			}
			if refreshed.Status != http.StatusOK && refreshed.Error != "invalid_grant" {
				t.Fatalf("round %d (%s): refresh: %+v", round, p.name, refreshed)
			}
			if refreshed.Status == http.StatusOK {
				refreshWon++
			}

			var survivors []string
			if n, g := rowsOf(t, st, grantID); n != 0 || g != 0 {
				survivors = append(survivors, fmt.Sprintf("%d token rows, %d grant rows", n, g))
			}
			access := []string{tok.AccessToken, refreshed.AccessToken}
			for _, a := range access {
				if a != "" {
					if _, err := p.env.srv.VerifyAccessToken(ctx, a); err == nil {
						survivors = append(survivors, "an access token verifies")
					}
				}
			}
			for _, r := range []string{present, refreshed.RefreshToken} {
				if r == "" {
					continue
				}
				got, err := p.env.postToken("/oauth/token", p.env.refreshForm(p.conf, r))
				if err != nil {
					t.Fatal(err)
				}
				if got.Status == http.StatusOK {
					survivors = append(survivors, "a refresh token refreshes")
					if _, err := p.env.srv.VerifyAccessToken(ctx, got.AccessToken); err == nil {
						survivors = append(survivors, "its new access token verifies")
					}
				}
			}
			if len(survivors) > 0 {
				failures++
				if failures <= 5 {
					t.Errorf("round %d (%s, refresh %d): %s", round, p.name, refreshed.Status, strings.Join(survivors, "; "))
				}
			}
		}
		t.Logf("the refresh got a pair in %d of %d rounds", refreshWon, rounds)
		if failures > 0 {
			t.Errorf("%d of %d rounds left a working token", failures, rounds)
		}
	})
}

// A code exchange racing a revocation of every grant of the account (a
// password change, account deletion) never leaves a working token: either
// the exchange fails, or what it issued is refused by the bearer check and
// cannot be refreshed.
func TestCodeExchangeRevokeRace(t *testing.T) {
	const rounds = 100
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		ctx := context.Background()
		conf := e.publicClient()
		revokes := []struct {
			name   string
			revoke func(uid int64) error
		}{
			{"password change", func(uid int64) error {
				return st.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
					if _, err := tx.NewRaw("UPDATE users SET password_changed_at = ? WHERE id = ?", time.Now().UTC(), uid).Exec(ctx); err != nil {
						return err
					}
					return e.srv.RevokeAllInTx(ctx, tx, uid)
				})
			}},
			{"account deletion", func(uid int64) error {
				if _, err := st.DB.NewRaw("UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().UTC(), uid).Exec(ctx); err != nil {
					return err
				}
				return e.srv.RevokeAll(ctx, uid)
			}},
		}
		failures, exchangeWon := 0, 0
		for round := range rounds {
			p := revokes[round%len(revokes)]
			uid, email := e.createUser(userState{})
			code := e.authorize(conf, email, nil).Query().Get("code")
			form := url.Values{
				"grant_type":    {"authorization_code"},
				"code":          {code},
				"client_id":     {conf.ClientID},
				"redirect_uri":  {conf.RedirectURL},
				"code_verifier": {verifierOf(conf)},
				"resource":      {e.srv.Resource()},
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			var got tokenResponse
			var exErr, revErr error
			wg.Add(2)
			go func() { defer wg.Done(); <-start; got, exErr = e.postToken("/oauth/token", form) }()
			// The exchange is an HTTP round trip and the revocation a
			// direct call: start the revocation later and later, so that
			// it lands before, inside and after the exchange's transaction.
			delay := time.Duration(round%25) * 60 * time.Microsecond
			go func() { defer wg.Done(); <-start; time.Sleep(delay); revErr = p.revoke(uid) }()
			close(start)
			wg.Wait()
			if exErr != nil || revErr != nil {
				t.Fatalf("round %d (%s): exchange %v, revoke %v", round, p.name, exErr, revErr)
			}
			if got.Status != http.StatusOK && got.Error != "invalid_grant" {
				t.Fatalf("round %d (%s): exchange: %+v", round, p.name, got)
			}
			if got.Status != http.StatusOK {
				continue
			}
			exchangeWon++
			var survivors []string
			if _, err := e.srv.VerifyAccessToken(ctx, got.AccessToken); err == nil {
				survivors = append(survivors, "the access token verifies")
			}
			if r, err := e.postToken("/oauth/token", e.refreshForm(conf, got.RefreshToken)); err != nil {
				t.Fatal(err)
			} else if r.Status == http.StatusOK {
				survivors = append(survivors, "the refresh token refreshes")
			}
			if grants, err := e.srv.Grants(ctx, uid); err != nil || len(grants) != 0 {
				survivors = append(survivors, fmt.Sprintf("grants %v %v", grants, err))
			}
			if len(survivors) > 0 {
				failures++
				if failures <= 5 {
					t.Errorf("round %d (%s): %s", round, p.name, strings.Join(survivors, "; "))
				}
			}
		}
		t.Logf("the exchange got a pair in %d of %d rounds", exchangeWon, rounds)
		if failures > 0 {
			t.Errorf("%d of %d rounds left a working token", failures, rounds)
		}
	})
}
