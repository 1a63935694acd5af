package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/feedback"
)

// The domains wired after the account lifecycle (events, feedback) plug
// their deletion work into it with AddTxHooks: on the assembled server, an
// account's deletion, whether its holder's or one the deletion-resume lane
// finished after a crash, publishes user.deleted and clears the account's
// name as reviewer from other people's feedback, counted in the result.
// The unit tests of each Wire use stand-ins: this one proves the root
// still hands every domain the real lifecycle.
func TestDeletionRunsTheHooksOfDomainsWiredLater(t *testing.T) {
	var mu sync.Mutex
	var deleted []string
	enclavetest.Each(t, enclavetest.Options{Setup: func(srv *enclave.Server) error {
		mu.Lock()
		deleted = nil
		mu.Unlock()
		return srv.Events().Subscribe("deletion-wiring-test", func(_ context.Context, e events.Event) error {
			var data struct {
				UserID string `json:"userId"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			deleted = append(deleted, data.UserID)
			return nil
		}, events.UserDeleted)
	}}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		ann := s.CreateUser(t, "ann")
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		bea := s.CreateUser(t, "bea", capabilities.RoleAdmin)
		s.CreateUser(t, "cyd", capabilities.RoleAdmin) // the last admin keeps their account
		fb := s.Feedback()
		var subs []string
		for _, reviewer := range []*enclavetest.User{ada, bea} {
			sub, err := fb.Submit(ctx, ann.ID, feedback.Submission{Category: "bug", Summary: "the export button does nothing for " + reviewer.Username})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := fb.Update(ctx, reviewer.ID, sub.ID, "triaged", nil); err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub.ID)
		}

		// The holder's deletion.
		res, err := s.Lifecycle().Delete(ctx, ada.Owner())
		if err != nil || !res.Completed {
			t.Fatalf("delete ada: %+v, %v", res, err)
		}
		if n := res.Updated["sql:platform_feedback.reviewed_by"]; n != 1 {
			t.Fatalf("feedback reviewer cleared %d times, want 1 (%v)", n, res.Updated)
		}
		// A deletion interrupted an hour ago, finished by the lane.
		if _, err := s.Accounts().Lifecycle.MarkDeleting(ctx, bea.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Store().DB.NewRaw("UPDATE users SET deleting_at = ? WHERE id = ?", time.Now().Add(-time.Hour).UTC(), bea.ID).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Lifecycle().ResumeDeletions(ctx, 5*time.Minute); err != nil || n != 1 {
			t.Fatalf("resume: %d, %v", n, err)
		}
		if _, err := s.Accounts().Identity.UserByID(ctx, bea.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("bea's deletion was not finished: %v", err)
		}
		for i, id := range subs {
			item, err := fb.AdminGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if item.ReviewedBy != "" || item.Status != "triaged" {
				t.Fatalf("feedback %d after its reviewer's deletion: status %q, reviewer %q", i, item.Status, item.ReviewedBy)
			}
		}

		want := []string{ada.StableID, bea.StableID}
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := slices.Clone(deleted)
			mu.Unlock()
			slices.Sort(got)
			w := slices.Clone(want)
			slices.Sort(w)
			if slices.Equal(got, w) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("user.deleted delivered for %v, want %v", got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
