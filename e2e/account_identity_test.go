package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// adminUnverifiedAccountPurgeRun on the assembled server: refused to a
// person (role user), run by an admin (a dry run first), and every call
// and outcome audited with hashes and classes only.
func TestAdminUnverifiedPurgeRun(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newRetentionServer(t, d)
			acc := srv.Accounts()
			stale, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: "stale@example.com", Username: "stale", Password: "correct horse battery"})
			if err != nil {
				t.Fatal(err)
			}
			ageAccount(t, srv, stale.ID, 8*24*time.Hour)
			person, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "person@example.com", Username: "person", Password: "correct horse battery", Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			admin, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{Email: "boss@example.com", Username: "boss", Password: "correct horse battery", Verified: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := acc.Roles.GrantAdminAsOperator(ctx, admin.ID); err != nil {
				t.Fatal(err)
			}
			run := func(u accounts.User, in lifecycle.PurgeRunInput) (lifecycle.PurgeReport, error) {
				args, _ := json.Marshal(in)
				c := mustCaller(t, srv, u)
				c.AllScopes = true
				res, err := srv.Registry().Invoke(ctx, c, "adminUnverifiedAccountPurgeRun", args)
				var rep lifecycle.PurgeReport
				if err == nil {
					b, _ := json.Marshal(res.Structured)
					_ = json.Unmarshal(b, &rep)
				}
				return rep, err
			}
			if _, err := run(person, lifecycle.PurgeRunInput{}); err == nil {
				t.Fatal("a person ran the purge")
			}
			pc := mustCaller(t, srv, person)
			pc.AllScopes = true
			if slices.Contains(srv.Registry().VisibleNames(ctx, pc), "adminUnverifiedAccountPurgeRun") {
				t.Fatal("a person sees the purge")
			}
			rep, err := run(admin, lifecycle.PurgeRunInput{DryRun: true})
			if err != nil || len(rep.Accounts) != 1 || rep.Accounts[0].UserID != stale.StableID || !userExists(t, srv, stale.ID) {
				t.Fatalf("dry run %+v %v", rep, err)
			}
			rep, err = run(admin, lifecycle.PurgeRunInput{})
			if err != nil || rep.Purged != 1 || userExists(t, srv, stale.ID) {
				t.Fatalf("pass %+v %v", rep, err)
			}
			var rows []struct {
				Action string `bun:"action"`
				Result string `bun:"result"`
				Reason string `bun:"reason"`
			}
			if err := srv.Store().DB.NewSelect().Table("audit_events").Column("action", "result", "reason").
				Where("action IN (?)", bun.In([]string{"admin_unverified_purge_run", "unverified_account_purged"})).OrderExpr("id").Scan(ctx, &rows); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.Action+" "+r.Result+" "+r.Reason)
			}
			want := []string{"admin_unverified_purge_run success dry run", "unverified_account_purged success ", "admin_unverified_purge_run success "}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("audit %q\nwant %q", got, want)
			}
		})
	}
}

// With unverified accounts allowed to work, there is no purge to run.
func TestAdminUnverifiedPurgeRunOffWhenUnverifiedWork(t *testing.T) {
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.OAuth.AllowUnverifiedEmail = true })
	if srv.Registry().Has("adminUnverifiedAccountPurgeRun") {
		t.Fatal("the purge is offered while unverified accounts may work")
	}
	if !srv.Registry().Has("accountUsernameChange") || !srv.Registry().Has("accountEmailClaimRelease") {
		t.Fatal("the server does not offer the username change and the address release")
	}
}

// An agent cannot rename its account over MCP (a username is the
// account's public handle: only the person changes it, from a session),
// and another account's agent cannot take a name a rename gave up; the
// admin purge is neither listed nor callable for a person's agent.
func TestUsernameChangeOverMCP(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	ann, bob := s.CreateUser(t, "ann"), s.CreateUser(t, "bob")
	annC, bobC := ann.MCP(t), bob.MCP(t)
	tools, err := annC.Tools()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(tools, "accountUsernameChange") || slices.Contains(tools, "adminUnverifiedAccountPurgeRun") {
		t.Fatalf("tools/list: accountUsernameChange %v, adminUnverifiedAccountPurgeRun %v",
			slices.Contains(tools, "accountUsernameChange"), slices.Contains(tools, "adminUnverifiedAccountPurgeRun"))
	}
	res, err := annC.Call("accountUsernameChange", map[string]any{"username": "Ann-Agent"})
	if err == nil && !res.IsError {
		t.Fatalf("an agent renamed its account: %+v", res)
	}
	if u, _ := s.Accounts().Identity.UserByID(t.Context(), ann.ID); u.Username != "ann" {
		t.Fatalf("ann is %q", u.Username)
	}
	// The person renames from the account page's session: the name given
	// up stays held, and bob's agent cannot take it either.
	if _, err := s.Accounts().Identity.ChangeOwnUsername(t.Context(), ann.ID, "ann-renamed", nil); err != nil {
		t.Fatal(err)
	}
	res, err = bobC.Call("accountUsernameChange", map[string]any{"username": "ANN"})
	if err == nil && !res.IsError {
		t.Fatalf("bob's agent renamed bob: %+v", res)
	}
	if u, _ := s.Accounts().Identity.UserByID(t.Context(), bob.ID); u.Username != "bob" {
		t.Fatalf("bob is %q", u.Username)
	}
	if _, err := s.Accounts().Identity.ChangeOwnUsername(t.Context(), bob.ID, "ann", nil); !errors.Is(err, accounts.ErrUsernameTaken) {
		t.Fatalf("bob takes ann's held name: %v", err)
	}
	res, err = bobC.Call("adminUnverifiedAccountPurgeRun", map[string]any{"dryRun": true})
	if err == nil && !res.IsError {
		t.Fatalf("a person's agent ran the purge: %+v", res)
	}
}
