package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A revocation at the RFC 7009 endpoint is announced to OnRevoke hooks
// with its grant, after it committed (the token no longer verifies when
// the hook runs) and before the client gets its answer.
func TestRevokeEndpointAnnouncesCommittedRevocation(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		tok, err := conf.Exchange(context.Background(), u.Query().Get("code"), oauth2.VerifierOption(verifierOf(conf)),
			oauth2.SetAuthURLParam("resource", e.srv.Resource()))
		if err != nil {
			t.Fatal(err)
		}
		a, err := e.srv.VerifyAccessToken(context.Background(), tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var announced []string
		var stillValid bool
		e.srv.OnRevoke(func(ctx context.Context, userID int64, grantID string) {
			_, verr := e.srv.VerifyAccessToken(context.Background(), tok.AccessToken)
			mu.Lock()
			defer mu.Unlock()
			announced = append(announced, grantID)
			stillValid = stillValid || verr == nil
		})
		resp := e.do(http.MethodPost, e.ts.URL+"/oauth/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {conf.ClientID}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("revoke: %d", resp.StatusCode)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(announced) == 0 || announced[0] != a.GrantID {
			t.Fatalf("announced %v, want grant %s before the answer", announced, a.GrantID)
		}
		if stillValid {
			t.Fatal("the hook ran before the revocation committed")
		}
	})
}

// The bearer check takes its turn on the read pool through the store's
// first-come-first-served gate: while every turn is held it waits (and
// gives up with its context), and it runs once a turn is free.
func TestBearerCheckWaitsForAReadTurn(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		e := newEnv(t, st)
		conf := e.publicClient()
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		tok, err := conf.Exchange(context.Background(), u.Query().Get("code"), oauth2.VerifierOption(verifierOf(conf)),
			oauth2.SetAuthURLParam("resource", e.srv.Resource()))
		if err != nil {
			t.Fatal(err)
		}
		var held []func()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			release, err := st.ReadSlot(ctx)
			cancel()
			if err != nil {
				break
			}
			held = append(held, release)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = e.srv.VerifyAccessToken(ctx, tok.AccessToken)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("bearer check with every read turn held: %v, want it to wait until its deadline", err)
		}
		for _, r := range held {
			r()
		}
		if _, err := e.srv.VerifyAccessToken(context.Background(), tok.AccessToken); err != nil {
			t.Fatalf("bearer check with turns free: %v", err)
		}
	})
}
