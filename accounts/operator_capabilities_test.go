package accounts_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type operatorCalls struct {
	mu    sync.Mutex
	calls []capabilities.OperatorCall
}

func (o *operatorCalls) RecordOperatorCall(_ context.Context, c capabilities.OperatorCall) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, c)
}

// The operator's account capabilities, run as the operator: they find the
// account by email, name it as the call's subject, make the domain call,
// and answer domain refusals with their codes and a sentence.
func TestOperatorCapabilities(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, _ := newService(t, s, accounts.Config{})
		rec := &operatorCalls{}
		reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true, OperatorAudit: rec})
		if err := reg.Register(svc.OperatorCapabilities()...); err != nil {
			t.Fatal(err)
		}
		amy := signup(t, svc, "amy")
		invoke := func(name, args string, out any) error {
			t.Helper()
			res, err := reg.Invoke(ctx, capabilities.OperatorCaller(), name, json.RawMessage(args))
			if err == nil && out != nil {
				raw, _ := json.Marshal(res.Structured)
				if err := json.Unmarshal(raw, out); err != nil {
					t.Fatal(err)
				}
			}
			return err
		}
		var out accounts.OperatorUserOutput
		if err := invoke("operatorAdminGrant", `{"email":" AMY@example.com "}`, &out); err != nil || !out.Changed || out.User.StableUserID != amy.StableID || out.User.Username != "amy" {
			t.Fatalf("grant = %+v, %v", out, err)
		}
		if g, _ := svc.Roles.RolesAndPermissions(ctx, amy.ID); !g.HasRole(capabilities.RoleAdmin) {
			t.Fatalf("amy's roles after the grant: %v", g.Roles)
		}
		if err := invoke("operatorAdminGrant", `{"email":"amy@example.com"}`, &out); err != nil || out.Changed {
			t.Fatalf("second grant = %+v, %v", out, err)
		}
		err := invoke("operatorAdminRevoke", `{"email":"amy@example.com"}`, nil)
		var e *capabilities.Error
		if !errors.As(err, &e) || e.Code != capabilities.CodeConflict || e.Message != "amy@example.com (amy) is the last admin" || !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("revoking the last admin = %v", err)
		}
		err = invoke("operatorUserSuspend", `{"email":"nobody@Example.com"}`, nil)
		if !errors.As(err, &e) || e.Code != capabilities.CodeNotFound || e.Message != "no account has the email nobody@example.com" {
			t.Fatalf("suspending an unknown address = %v", err)
		}
		var created accounts.OperatorUserCreateOutput
		if err := invoke("operatorUserCreate", `{"email":"bob@example.com","username":"bob"}`, &created); err != nil || created.SetupToken == "" || created.User.Email != "bob@example.com" {
			t.Fatalf("create = %+v, %v", created, err)
		}
		err = invoke("operatorUserCreate", `{"email":"bob2@example.com","username":"bob"}`, nil)
		if !errors.As(err, &e) || e.Code != capabilities.CodeConflict {
			t.Fatalf("a taken username = %v", err)
		}
		if err := invoke("operatorUserSuspend", `{"email":"bob@example.com"}`, &out); err != nil || !out.Changed {
			t.Fatalf("suspend = %+v, %v", out, err)
		}
		if _, err := svc.Credentials.Login(ctx, "amy@example.com", goodPassword); err != nil {
			t.Fatalf("amy is not suspended: %v", err)
		}
		bo, err := svc.Identity.UserByEmail(ctx, "bob@example.com")
		if err != nil || bo.SuspendedAt == nil {
			t.Fatalf("bo after the suspension: %+v, %v", bo, err)
		}
		if err := invoke("operatorUserUnsuspend", `{"email":"bob@example.com"}`, &out); err != nil || !out.Changed {
			t.Fatalf("unsuspend = %+v, %v", out, err)
		}

		want := []capabilities.OperatorCall{
			{Name: "operatorAdminGrant", Subject: amy.StableID, Outcome: "ok"},
			{Name: "operatorAdminGrant", Subject: amy.StableID, Outcome: "ok"},
			{Name: "operatorAdminRevoke", Subject: amy.StableID, Outcome: "conflict"},
			{Name: "operatorUserSuspend", Subject: "", Outcome: "not_found"},
			{Name: "operatorUserCreate", Subject: bo.StableID, Outcome: "ok"},
			{Name: "operatorUserCreate", Subject: "", Outcome: "conflict"},
			{Name: "operatorUserSuspend", Subject: bo.StableID, Outcome: "ok"},
			{Name: "operatorUserUnsuspend", Subject: bo.StableID, Outcome: "ok"},
		}
		if len(rec.calls) != len(want) {
			t.Fatalf("recorded %+v", rec.calls)
		}
		for i, w := range want {
			got := rec.calls[i]
			got.At = w.At
			if got != w {
				t.Errorf("call %d recorded %+v, want %+v", i, got, w)
			}
		}
	})
}
