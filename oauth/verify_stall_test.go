package oauth_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A bearer check whose query stalls on PostgreSQL (here behind a lock an
// operator's transaction holds on users) ends with its request: it does not
// hold the request, its read turn and every call queued behind it until
// the lock goes.
func TestBearerCheckStalledQueryEndsWithRequest(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		if st.Dialect() != storage.Postgres {
			t.Skip("a SQLite reader in WAL mode is never blocked by a writer")
		}
		e := newEnv(t, st)
		conf := e.publicClient()
		_, email := e.createUser(userState{})
		u := e.authorize(conf, email, nil)
		tok, err := conf.Exchange(context.Background(), u.Query().Get("code"), oauth2.VerifierOption(verifierOf(conf)),
			oauth2.SetAuthURLParam("resource", e.srv.Resource()))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := e.srv.VerifyAccessToken(ctx, tok.AccessToken); err != nil { // prepared
			t.Fatal(err)
		}
		tx, err := st.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "LOCK TABLE users IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(8 * time.Second)
			_ = tx.Rollback()
		}()
		t.Cleanup(func() { <-released })

		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = e.srv.VerifyAccessToken(rctx, tok.AccessToken)
		took := time.Since(start)
		if took > 3*time.Second {
			t.Fatalf("bearer check took %s after its request ended at 300ms (err %v)", took, err)
		}
		if err == nil {
			t.Fatal("bearer check passed while its query could not run")
		}
	})
}
