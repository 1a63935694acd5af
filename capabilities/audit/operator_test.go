package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// An operator call is a capability row whose reason names the operator as
// the actor (and the failure's code), about the account it acted on.
func TestOperatorCallsAreRecorded(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		log := audit.New(s, key, quiet())
		at := time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)
		log.RecordOperatorCall(ctx, capabilities.OperatorCall{At: at, Name: "operatorUserSuspend", Subject: "u-1", Outcome: "ok"})
		log.RecordOperatorCall(ctx, capabilities.OperatorCall{At: at.Add(time.Second), Name: "operatorAdminRevoke", Subject: "u-1", Outcome: "conflict"})
		log.RecordOperatorCall(ctx, capabilities.OperatorCall{At: at.Add(2 * time.Second), Name: "operatorUserDelete", Outcome: "not_found"})
		page, err := log.Query(ctx, audit.Filter{}, storage.PageRequest{})
		if err != nil {
			t.Fatal(err)
		}
		type row struct{ category, action, result, reason, user string }
		want := []row{ // newest first
			{audit.CategoryCapability, "tool:operatorUserDelete", audit.ResultFailure, "operator: not_found", ""},
			{audit.CategoryCapability, "tool:operatorAdminRevoke", audit.ResultFailure, "operator: conflict", log.HashUser("u-1")},
			{audit.CategoryCapability, "tool:operatorUserSuspend", audit.ResultSuccess, "operator", log.HashUser("u-1")},
		}
		if len(page.Items) != len(want) {
			t.Fatalf("rows %+v", page.Items)
		}
		for i, e := range page.Items {
			if got := (row{e.Category, e.Action, e.Result, e.Reason, e.UserHash}); got != want[i] {
				t.Errorf("row %d = %+v, want %+v", i, got, want[i])
			}
		}
		if !page.Items[2].At.Equal(at) {
			t.Errorf("the row's time %v, want the call's %v", page.Items[2].At, at)
		}
	})
}
