package feedback_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/feedback"
)

// A decision mail still waiting (or delivered again: jobs run at least
// once) after its feedback was deleted with the submitter's account never
// goes to whoever's feedback took the deleted row's id (SQLite hands out
// the highest rowid again once its row is deleted).
func TestDecisionMailNeverReachesAReusedFeedbackID(t *testing.T) {
	m := &mailer{}
	enclavetest.Each(t, enclavetest.Options{Config: enclave.Config{Mailer: m}}, func(t *testing.T, s *enclavetest.Server) {
		bob := s.CreateUser(t, "bob-"+string(s.Store().Dialect()))
		carl := s.CreateUser(t, "carl-"+string(s.Store().Dialect()))
		s.CreateUser(t, "ada", capabilities.RoleAdmin)
		var sub feedback.SubmitOutput
		if err := call(t, s, bob.Caller(t), "feedbackSubmit", feedback.SubmitInput{Category: "bug", Summary: "bob's", UserConfirmed: true}, &sub); err != nil {
			t.Fatal(err)
		}
		var rowID int64
		if err := s.Store().DB.NewSelect().Table("platform_feedback").Column("id").Where("public_id = ?", sub.Feedback.ID).Scan(t.Context(), &rowID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Lifecycle().Delete(t.Context(), bob.Owner()); err != nil {
			t.Fatal(err)
		}
		if err := call(t, s, carl.Caller(t), "feedbackSubmit", feedback.SubmitInput{Category: "idea", Summary: "carl's", UserConfirmed: true}, nil); err != nil {
			t.Fatal(err)
		}
		// The decision mail job of bob's feedback, resolved just before
		// his account went, runs now.
		err := s.Jobs().Enqueue(t.Context(), s.Store().DB, "enclave.feedback.decision-mail", "",
			map[string]any{"feedback": rowID, "feedbackId": sub.Feedback.ID, "status": "resolved"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 15*time.Second, "the outbox to drain", func() bool {
			n, err := s.Store().DB.NewSelect().Table("outbox").Where("dead_at IS NULL").Count(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
		if got := m.to(carl.Email); len(got) != 0 {
			t.Fatalf("carl got bob's decision mail: %+v", got)
		}
	})
}

// Concurrent submissions by one person never pass the hourly limit.
func TestFeedbackRateLimitHoldsUnderConcurrentSubmissions(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ann := s.CreateUser(t, "ann")
		var wg sync.WaitGroup
		for i := range 3 * feedback.SubmissionsPerHour {
			wg.Go(func() {
				_, _ = s.Feedback().Submit(t.Context(), ann.ID, feedback.Submission{Category: "idea", Summary: fmt.Sprintf("idea %d", i)})
			})
		}
		wg.Wait()
		n, err := s.Store().DB.NewSelect().Table("platform_feedback").Where("user_id = ?", ann.ID).Count(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n != feedback.SubmissionsPerHour {
			t.Fatalf("%d submissions stored, the limit is %d", n, feedback.SubmissionsPerHour)
		}
	})
}

// Admins racing to close one feedback: one final status wins, the
// submitter gets one mail.
func TestConcurrentFinalStatusesMailOnce(t *testing.T) {
	m := &mailer{}
	enclavetest.Each(t, enclavetest.Options{Config: enclave.Config{Mailer: m}}, func(t *testing.T, s *enclavetest.Server) {
		ann := s.CreateUser(t, "ann-race-"+string(s.Store().Dialect()))
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		f, err := s.Feedback().Submit(t.Context(), ann.ID, feedback.Submission{Category: "bug", Summary: "race"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		changed := 0
		for i := range 10 {
			wg.Go(func() {
				status := feedback.StatusResolved
				if i%2 == 1 {
					status = feedback.StatusDismissed
				}
				if _, ok, err := s.Feedback().Update(t.Context(), ada.ID, f.ID, status, nil); err == nil && ok {
					mu.Lock()
					changed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if changed != 1 {
			t.Fatalf("%d updates changed the status, want 1", changed)
		}
		waitFor(t, 15*time.Second, "the outbox to drain", func() bool {
			n, err := s.Store().DB.NewSelect().Table("outbox").Where("dead_at IS NULL").Count(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
		if got := m.to(ann.Email); len(got) != 1 {
			t.Fatalf("%d decision mails, want 1", len(got))
		}
	})
}
