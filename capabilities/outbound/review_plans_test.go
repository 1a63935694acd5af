package outbound_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// A refusal by the account's plan (#32) keeps the window and the limit
// that refused: a weekly limit is not reported as the server's daily one.
func TestReviewPlanRefusalNamesItsWindow(t *testing.T) {
	for _, daily := range []int64{100, -1} { // -1: no server limit, the plan's still applies
		testPlanRefusal(t, daily)
	}
}

func testPlanRefusal(t *testing.T, daily int64) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	m := quota.New(st, quota.Limits{}, nil)
	plans := quota.NewPlans(st)
	m.SetPlans(plans)
	weekly := int64(2)
	if _, err := plans.Save(ctx, quota.Plan{Name: quota.DefaultPlan, Outbound: quota.Window{Weekly: &weekly}}); err != nil {
		t.Fatal(err)
	}
	g := f.gateway(srv, outbound.Options{AllowPrivate: true, Quota: m, Limits: outbound.Limits{DailyRequests: daily}})
	for range 2 {
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL})
	at, ok := capabilities.RetryAfterOf(err)
	if capabilities.CodeOf(err) != capabilities.CodeQuotaExceeded || !ok || at.Weekday() != time.Monday {
		t.Fatalf("server daily limit %d: third request of the week: %v (retry after %v)", daily, err, at)
	}
	if msg := err.Error(); !strings.Contains(msg, "weekly limit of 2") || strings.Contains(msg, "Daily limit of 100") {
		t.Fatalf("the refusal names the wrong window: %s", msg)
	}
}
