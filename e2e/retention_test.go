package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// newRetentionServer is newServer with cheap password hashing.
func newRetentionServer(t *testing.T, d storage.Dialect) *enclave.Server {
	t.Helper()
	return newServer(t, d)
}

// Every table of the migrated schema, on both dialects, has exactly one
// retention policy, and every policy names a live table.
func TestRetentionCoversTheSchema(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			srv := newServer(t, d)
			if err := srv.Retention().Check(context.Background(), srv.Store().DB); err != nil {
				t.Fatal(err)
			}
		})
	}
}

const (
	retentionBegin = "<!-- retention:begin (generated from declarations.go; ENCLAVE_UPDATE_DOCS=1 go test -run TestDataDocRetentionIsCurrent ./e2e/ rewrites it) -->\n"
	retentionEnd   = "<!-- retention:end -->"
)

// docs/data.md carries the table of policies, generated from the same
// declarations the server runs.
func TestDataDocRetentionIsCurrent(t *testing.T) {
	srv := newServer(t, storage.SQLite)
	want := srv.Retention().Markdown()
	raw, err := os.ReadFile("../docs/data.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, retentionBegin), strings.Index(doc, retentionEnd)
	if os.Getenv("ENCLAVE_UPDATE_DOCS") == "1" {
		if i < 0 || j < i {
			t.Fatal("docs/data.md: add the retention markers first")
		}
		doc = doc[:i+len(retentionBegin)] + want + doc[j:]
		if err := os.WriteFile("../docs/data.md", []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if i < 0 || j < i {
		t.Fatalf("docs/data.md has no generated retention section (markers %q … %q)", retentionBegin, retentionEnd)
	}
	if got := doc[i+len(retentionBegin) : j]; got != want {
		t.Fatalf("docs/data.md retention section is stale; run ENCLAVE_UPDATE_DOCS=1 go test -run TestDataDocRetentionIsCurrent ./e2e/\n got:\n%s\nwant:\n%s", got, want)
	}
}

func ageAccount(t *testing.T, srv *enclave.Server, id int64, age time.Duration) {
	t.Helper()
	if _, err := srv.Store().DB.NewUpdate().Table("users").Set("created_at = ?", time.Now().UTC().Add(-age)).
		Where("id = ?", id).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func userExists(t *testing.T, srv *enclave.Server, id int64) bool {
	t.Helper()
	n, err := srv.Store().DB.NewSelect().Table("users").Where("id = ?", id).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// Sign-ups that never verified an address are deleted 7 days after sign-up
// through the account lifecycle (their owned rows go too, their email is
// free again); verified accounts, accounts that verified once and then
// changed their address, recent sign-ups, admins, suspended accounts and
// accounts an operator created stay.
func TestRetentionPurgesUnverifiedAccounts(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newRetentionServer(t, d)
			acc := srv.Accounts()
			mk := func(name string, verified bool) accounts.User {
				t.Helper()
				u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "correct horse battery"})
				if err != nil {
					t.Fatal(err)
				}
				if verified {
					if _, err := acc.Identity.MarkEmailVerified(ctx, u.ID); err != nil {
						t.Fatal(err)
					}
				}
				return u
			}
			stale := mk("stale", false)
			fresh := mk("fresh", false)
			verified := mk("verified", true)
			moved := mk("moved", true)
			// An account an operator created, never verified: not a sign-up.
			made, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "made@example.com", Username: "made", Password: "correct horse battery"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := acc.Identity.ChangeEmail(ctx, moved.ID, "moved2@example.com"); err != nil {
				t.Fatal(err)
			}
			if err := acc.Identity.ReleaseEmailClaim(ctx, moved.ID, "moved@example.com"); err != nil {
				t.Fatal(err)
			}
			admin := mk("boss", false)
			if _, err := acc.Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
				t.Fatal(err)
			}
			frozen := mk("frozen", false)
			if _, err := acc.Lifecycle.Suspend(ctx, frozen.ID); err != nil {
				t.Fatal(err)
			}
			for _, u := range []accounts.User{stale, verified, moved, admin, frozen, made} {
				ageAccount(t, srv, u.ID, 8*24*time.Hour)
			}
			ageAccount(t, srv, fresh.ID, 6*24*time.Hour)
			// An owned row of the stale account: a secret.
			if _, err := srv.Registry().Invoke(ctx, mustCaller(t, srv, stale), "secretSet", []byte(`{"name":"k","value":"v"}`)); err != nil {
				t.Fatal(err)
			}

			rep, err := srv.PurgeExpired(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Rows["users"] != 1 {
				t.Fatalf("purged accounts = %d, want 1 (%v)", rep.Rows["users"], rep.Rows)
			}
			if userExists(t, srv, stale.ID) {
				t.Fatal("the stale unverified account is still there")
			}
			for name, u := range map[string]accounts.User{"fresh": fresh, "verified": verified, "moved": moved, "admin": admin, "suspended": frozen, "operator-created": made} {
				if !userExists(t, srv, u.ID) {
					t.Errorf("the %s account was purged", name)
				}
			}
			n, err := srv.Store().DB.NewSelect().Table("user_secrets").Where("user_id = ?", stale.ID).Count(ctx)
			if err != nil || n != 0 {
				t.Fatalf("the purged account's secrets: %d rows, err %v", n, err)
			}
			// Its email is free for a new sign-up, under a new identity.
			again, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "stale@example.com", Username: "stale", Password: "correct horse battery"})
			if err != nil {
				t.Fatalf("sign-up with the purged account's email: %v", err)
			}
			if again.StableID == stale.StableID || again.ID == stale.ID {
				t.Fatal("the new account reuses the purged account's ids")
			}
			// The purge is audited.
			ev, err := srv.Store().DB.NewSelect().Table("audit_events").Where("action = ?", "unverified_account_purged").Count(ctx)
			if err != nil || ev != 1 {
				t.Fatalf("audit rows = %d, err %v", ev, err)
			}
		})
	}
}

func mustCaller(t *testing.T, srv *enclave.Server, u accounts.User) capabilities.Caller {
	t.Helper()
	c, err := srv.Accounts().LoadCaller(context.Background(), u.StableID)
	if err != nil {
		t.Fatal(err)
	}
	c.Interactive = true
	return c
}

// The claim is one conditional UPDATE: racing a verification, exactly one
// of them wins. A verified account is never claimed, and a claimed one is
// never verified.
func TestRetentionUnverifiedClaimLosesToVerification(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newRetentionServer(t, d)
			acc := srv.Accounts()
			cutoff := time.Now().Add(-accounts.UnverifiedWindow)
			claims, verifications := 0, 0
			for i := range 20 {
				u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: fmt.Sprintf("race%d@example.com", i), Username: fmt.Sprintf("race%d", i), Password: "correct horse battery"})
				if err != nil {
					t.Fatal(err)
				}
				ageAccount(t, srv, u.ID, 8*24*time.Hour)
				var wg sync.WaitGroup
				var claimed, verified bool
				var claimErr, verifyErr error
				start := make(chan struct{})
				wg.Go(func() { <-start; claimed, claimErr = acc.Lifecycle.ClaimUnverified(ctx, u.ID, cutoff) })
				wg.Go(func() { <-start; verified, verifyErr = acc.Identity.MarkEmailVerified(ctx, u.ID) })
				close(start)
				wg.Wait()
				if claimErr != nil {
					t.Fatal(claimErr)
				}
				if verifyErr != nil && !errors.Is(verifyErr, accounts.ErrDeleting) {
					t.Fatal(verifyErr)
				}
				if claimed == verified {
					t.Fatalf("round %d: claimed=%v verified=%v: exactly one must win", i, claimed, verified)
				}
				got, err := acc.Identity.UserByID(ctx, u.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.EmailVerified() && got.DeletingAt != nil {
					t.Fatalf("round %d: the account is both verified and claimed", i)
				}
				if claimed {
					claims++
					if !errors.Is(verifyErr, accounts.ErrDeleting) {
						t.Fatalf("round %d: verification after the claim: %v, want ErrDeleting", i, verifyErr)
					}
				} else {
					verifications++
					// Verified: a later claim fails.
					if again, err := acc.Lifecycle.ClaimUnverified(ctx, u.ID, cutoff); err != nil || again {
						t.Fatalf("claim of a verified account: %v %v", again, err)
					}
				}
			}
			t.Logf("claims won %d, verifications won %d", claims, verifications)
		})
	}
}

// The OAuth policies: expired tokens go; a grant with no token left goes;
// a client that holds no grant and went unused for a week goes, and so
// does any client idle past the idle TTL; the rest stays.
func TestRetentionPurgesOAuth(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newRetentionServer(t, d)
			db := srv.Store().DB
			u, _, err := srv.Accounts().Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "oauth@example.com", Username: "oauthuser", Password: "correct horse battery", Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			client := func(id string, lastUsed time.Duration) {
				if _, err := db.ExecContext(ctx, `INSERT INTO oauth_clients (id, name, redirect_uris, grant_types, response_types, scope, token_endpoint_auth_method, metadata, metadata_hash, created_at, last_used_at)
					VALUES (?, 'c', '[]', '[]', '[]', '', 'none', '{}', ?, ?, ?)`, id, id, now.Add(-lastUsed), now.Add(-lastUsed)); err != nil {
					t.Fatal(err)
				}
			}
			grant := func(id, clientID string, lastUsed time.Duration) {
				if _, err := db.ExecContext(ctx, `INSERT INTO oauth_grants (id, user_id, client_id, scopes, audience, created_at, last_used_at) VALUES (?, ?, ?, '', '', ?, ?)`,
					id, u.ID, clientID, now.Add(-lastUsed), now.Add(-lastUsed)); err != nil {
					t.Fatal(err)
				}
			}
			token := func(sig, grantID, clientID string, expiresIn time.Duration) {
				if _, err := db.ExecContext(ctx, `INSERT INTO oauth_tokens (signature, kind, request_id, user_id, client_id, scopes, audience, request, active, requested_at, expires_at)
					VALUES (?, 'access', ?, ?, ?, '', '', '{}', ?, ?, ?)`, sig, grantID, u.ID, clientID, true, now, now.Add(expiresIn)); err != nil {
					t.Fatal(err)
				}
			}
			day := 24 * time.Hour
			client("unused", 8*day)  // no grant, a week unused: goes
			client("recent", 1*day)  // no grant yet, recent: stays
			client("granted", 8*day) // holds a live grant: stays
			client("idle", 100*day)  // holds a grant but idle past 90 days: goes
			grant("g-live", "granted", 0)
			token("t-live", "g-live", "granted", time.Hour)
			token("t-expired", "g-live", "granted", -time.Minute)
			grant("g-over", "granted", 2*time.Hour) // its only token expired: goes
			token("t-over", "g-over", "granted", -time.Hour)
			grant("g-idle", "idle", 100*day)
			token("t-idle", "g-idle", "idle", time.Hour)

			if _, err := srv.PurgeExpired(ctx); err != nil {
				t.Fatal(err)
			}
			ids := func(table, col string) string {
				var out []string
				if err := db.NewSelect().Table(table).Column(col).Order(col).Scan(ctx, &out); err != nil {
					t.Fatal(err)
				}
				return strings.Join(out, ",")
			}
			if got := ids("oauth_clients", "id"); got != "granted,recent" {
				t.Errorf("clients left: %s, want granted,recent", got)
			}
			if got := ids("oauth_grants", "id"); got != "g-live" {
				t.Errorf("grants left: %s, want g-live", got)
			}
			if got := ids("oauth_tokens", "signature"); got != "t-live" {
				t.Errorf("tokens left: %s, want t-live", got)
			}
		})
	}
}

// When the server lets accounts without a verified address work
// (Config.OAuth.AllowUnverifiedEmail), an unverified sign-up is an account
// in use, holding data: the retention program never purges it.
func TestRetentionKeepsUnverifiedAccountsWhenAllowed(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newServer(t, d, func(c *enclave.Config) { c.OAuth.AllowUnverifiedEmail = true })
			u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "carol@example.com", Username: "carol", Password: "correct horse battery"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Registry().Invoke(ctx, mustCaller(t, srv, u), "secretSet", []byte(`{"name":"k","value":"v"}`)); err != nil {
				t.Fatal(err)
			}
			ageAccount(t, srv, u.ID, 30*24*time.Hour)
			rep, err := srv.PurgeExpired(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !userExists(t, srv, u.ID) || rep.Rows["users"] != 0 {
				t.Fatalf("an unverified account the server lets work was purged (%v)", rep.Rows)
			}
			if p, _ := srv.Retention().Policy("users"); p.Purges() {
				t.Fatalf("users policy %q still purges", p.Describe())
			}
		})
	}
}
