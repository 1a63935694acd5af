package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/events"
)

// Through real MCP sessions and OAuth tokens, on both dialects: an admin
// puts bob on a small plan; bob's code runs are refused past the daily
// limit with the day named, then (the admin moving him to a plan with only
// a weekly limit) past the weekly limit with the week named; usageGet
// shows his use against the plan; the admins' overview lists him with
// allowlisted fields only; 80 % and 100 % crossings arrive as
// quota.threshold events; the plan change is audited.
func TestCommunityPlansDailyThenWeeklyOverMCP(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	enclavetest.Each(t, enclavetest.Options{Setup: func(srv *enclave.Server) error {
		mu.Lock()
		seen = nil
		mu.Unlock()
		return srv.Events().Subscribe("plans-test", func(_ context.Context, e events.Event) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, string(e.Data))
			return nil
		}, enclave.QuotaThreshold)
	}}, func(t *testing.T, s *enclavetest.Server) {
		bob, ada := s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		b, d := bob.MCP(t), ada.MCP(t)
		communityCall[map[string]any](t, d, "adminPlanSave", map[string]any{"name": "small", "execute": map[string]any{"daily": 2, "weekly": 10}})
		communityCall[map[string]any](t, d, "adminPlanSave", map[string]any{"name": "weekly-only", "execute": map[string]any{"weekly": 3}})
		communityCall[map[string]any](t, d, "adminUserPlanSet", map[string]any{"username": "bob", "plan": "small"})
		if res, err := b.Call("adminUserPlanSet", map[string]any{"username": "bob", "plan": "weekly-only"}); err == nil && !res.IsError {
			t.Fatal("bob set his own plan")
		}

		// retryAfter is the one the last refusal carried (JSON-RPC error data).
		var retryAfter time.Time
		run := func() (bool, string) {
			res, err := b.Call("execute", map[string]any{"code": "return 1"})
			if rpc, ok := errors.AsType[*enclavetest.RPCError](err); ok {
				var data struct {
					Code       string    `json:"code"`
					RetryAfter time.Time `json:"retryAfter"`
				}
				if json.Unmarshal(rpc.Data, &data) != nil || data.Code != "quota_exceeded" {
					t.Fatalf("refusal data %s", rpc.Data)
				}
				retryAfter = data.RetryAfter
				return false, rpc.Message
			}
			if err != nil {
				return false, err.Error()
			}
			return !res.IsError, res.Text
		}
		now := time.Now().UTC()
		tomorrow := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
		nextMonday := tomorrow
		for nextMonday.Weekday() != time.Monday {
			nextMonday = nextMonday.AddDate(0, 0, 1)
		}
		for i := range 2 {
			if ok, text := run(); !ok {
				t.Fatalf("run %d refused: %s", i+1, text)
			}
		}
		var err error
		ok, text := run()
		if ok || !strings.Contains(text, "daily limit of 2") || !strings.Contains(text, `plan "small"`) || !retryAfter.Equal(tomorrow) {
			t.Fatalf("past the daily limit: %v %s (retry after %v)", ok, text, retryAfter)
		}
		u := communityCall[struct {
			Plan   string
			Meters []struct {
				Meter       string
				Today, Week int64
				DailyLimit  *int64
				WeeklyLimit *int64
			}
		}](t, b, "usageGet", map[string]any{})
		if u.Plan != "small" || u.Meters[0].Meter != "execute" || u.Meters[0].DailyLimit == nil || *u.Meters[0].DailyLimit != 2 {
			t.Fatalf("usage %+v", u)
		}

		communityCall[map[string]any](t, d, "adminUserPlanSet", map[string]any{"username": "bob", "plan": "weekly-only"})
		if ok, text := run(); !ok {
			t.Fatalf("the third run of the week refused: %s", text)
		}
		ok, text = run()
		if ok || !strings.Contains(text, "weekly limit of 3") || !strings.Contains(text, "Monday to Sunday") || !retryAfter.Equal(nextMonday) {
			t.Fatalf("past the weekly limit: %v %s (retry after %v)", ok, text, retryAfter)
		}

		// The overview reads SQL, which the meter reaches within a flush.
		var top enclavetest.ToolResult
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
			if top, err = d.Call("adminUsageTop", map[string]any{}); err != nil || strings.Contains(string(top.Structured), `"username":"bob"`) {
				break
			}
		}
		if err != nil || top.IsError || !strings.Contains(string(top.Structured), `"username":"bob"`) || !strings.Contains(string(top.Structured), `"execute":3`) ||
			strings.Contains(string(top.Structured), "@example.com") || strings.Contains(string(top.Structured), bob.StableID) {
			t.Fatalf("top %v %s", err, top.Structured)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			mu.Lock()
			all := strings.Join(seen, "\n")
			mu.Unlock()
			if strings.Contains(all, `"threshold":100`) && strings.Contains(all, `"window":"day"`) && strings.Contains(all, `"window":"week"`) {
				if strings.Contains(all, bob.StableID) || strings.Contains(all, "@example.com") {
					t.Fatalf("a threshold event carries account data: %s", all)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("threshold events: %s", all)
			}
			time.Sleep(50 * time.Millisecond)
		}
		var n int
		if err := s.Store().DB.NewSelect().Table("audit_events").ColumnExpr("COUNT(*)").Where("action = 'admin_user_plan_set'").Scan(context.Background(), &n); err != nil || n < 2 {
			t.Fatalf("audited plan changes: %d (%v)", n, err)
		}
	})
}
