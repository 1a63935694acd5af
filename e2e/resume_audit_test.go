package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A deletion the deletion-resume lane finishes is in the audit log like
// one the account holder finishes (reason "resumed"): an account removed
// by a background process leaves a trace for the operator. A suspended
// account is left, and nothing is recorded for it.
func TestResumedDeletionIsAudited(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			srv := newServer(t, d)
			var users []accounts.User
			for _, name := range []string{"gone", "frozen"} {
				u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := srv.Accounts().Lifecycle.MarkDeleting(ctx, u.ID); err != nil {
					t.Fatal(err)
				}
				// The deletion was interrupted an hour ago.
				if _, err := srv.Store().DB.NewRaw("UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().Add(-time.Hour).UTC(), u.ID).Exec(ctx); err != nil {
					t.Fatal(err)
				}
				users = append(users, u)
			}
			if _, err := srv.Accounts().Lifecycle.Suspend(ctx, users[1].ID); err != nil {
				t.Fatal(err)
			}
			if n, err := srv.Lifecycle().ResumeDeletions(ctx, 5*time.Minute); err != nil || n != 1 {
				t.Fatalf("resume: %d, %v", n, err)
			}
			if _, err := srv.Accounts().Identity.UserByID(ctx, users[0].ID); !errors.Is(err, accounts.ErrNotFound) {
				t.Fatalf("the interrupted deletion was not finished: %v", err)
			}
			if _, err := srv.Accounts().Identity.UserByID(ctx, users[1].ID); err != nil {
				t.Fatalf("the suspended account was deleted: %v", err)
			}
			for i, want := range []int{1, 0} {
				events, err := srv.Audit().Query(ctx, audit.Filter{Category: audit.CategoryAccount, Action: "delete_account", UserHash: srv.Audit().HashUser(users[i].StableID)}, storage.PageRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if len(events.Items) != want || (want == 1 && (events.Items[0].Result != audit.ResultSuccess || events.Items[0].Reason != "resumed")) {
					t.Fatalf("audit of %s: %+v, want %d row(s)", users[i].Username, events.Items, want)
				}
			}
		})
	}
}
