package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestDenialsAreRecorded(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		log := audit.New(s, key, quiet())
		reg := capabilities.NewRegistry(capabilities.Options{Auditor: log, AuditKey: key, Logger: quiet()})
		if err := reg.Register(log.Capability()); err != nil {
			t.Fatal(err)
		}
		user := capabilities.Caller{UserID: "u-1", Roles: []string{"user"}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		suspended := user
		suspended.UserID, suspended.State = "u-2", capabilities.AccountSuspended

		for _, c := range []capabilities.Caller{user, suspended, {}} {
			if _, err := reg.Invoke(ctx, c, "adminAuditLogQuery", json.RawMessage(`{}`)); err == nil {
				t.Fatalf("caller %q ran an admin capability", c.UserID)
			}
		}
		page, err := log.Query(ctx, audit.Filter{Category: audit.CategoryCapability}, storage.PageRequest{})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]bool{}
		for _, e := range page.Items {
			if e.Result != audit.ResultDenied || e.Action != "tool:adminAuditLogQuery" {
				t.Fatalf("event %+v", e)
			}
			if e.UserHash == "u-1" || e.UserHash == "u-2" {
				t.Fatalf("raw user id in the log: %+v", e)
			}
			reasons[e.Reason] = true
		}
		for _, want := range []capabilities.DenialReason{capabilities.ReasonRole, capabilities.ReasonSuspended, capabilities.ReasonUnauthenticated} {
			if !reasons[string(want)] {
				t.Errorf("no denial recorded for reason %s (have %v)", want, reasons)
			}
		}

		// An admin reads the log through the capability, filtered and paged.
		admin := user
		admin.UserID, admin.Roles = "admin-1", []string{"user", "admin"}

		// userId finds the user's denials, written with the one scheme of
		// every row (HashUser), which the registry's own subject hash
		// matches under the same key.
		res, err := reg.Invoke(ctx, admin, "adminAuditLogQuery", json.RawMessage(`{"userId":"u-1"}`))
		if err != nil {
			t.Fatal(err)
		}
		if mine := res.Structured.(audit.QueryOutput).Events; len(mine) != 1 || mine[0].Reason != string(capabilities.ReasonRole) || mine[0].UserHash != log.HashUser("u-1") {
			t.Fatalf("the denials of u-1 by userId: %+v", mine)
		}
		if reg.HashSubject("u-1") != log.HashUser("u-1") {
			t.Fatalf("registry subject %q and audit hash %q differ under one key", reg.HashSubject("u-1"), log.HashUser("u-1"))
		}
		res, err = reg.Invoke(ctx, admin, "adminAuditLogQuery", json.RawMessage(`{"result":"denied","limit":2}`))
		if err != nil {
			t.Fatal(err)
		}
		out := res.Structured.(audit.QueryOutput)
		if len(out.Events) != 2 || out.NextCursor == "" || out.Events[0].ID < out.Events[1].ID {
			t.Fatalf("first page %+v", out)
		}
		res, err = reg.Invoke(ctx, admin, "adminAuditLogQuery", json.RawMessage(`{"result":"denied","limit":2,"cursor":"`+out.NextCursor+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		if out2 := res.Structured.(audit.QueryOutput); len(out2.Events) != 1 || out2.NextCursor != "" {
			t.Fatalf("second page %+v", out2)
		}
		for _, bad := range []string{`{"since":"yesterday"}`, `{"cursor":"forged"}`, `{"limit":5000}`} {
			if _, err := reg.Invoke(ctx, admin, "adminAuditLogQuery", json.RawMessage(bad)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Errorf("%s: err %v, want invalid_input", bad, err)
			}
		}
	})
}

func TestRecordFilterAndPurge(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		log := audit.New(s, key, quiet())
		old := time.Now().Add(-audit.DefaultRetention - time.Hour)
		events := []audit.Event{
			{At: old, Category: audit.CategoryAuth, Action: "login", Result: audit.ResultFailure, UserHash: log.HashUser("u-1"), IPHash: log.HashIP("192.0.2.1")},
			{Category: audit.CategoryAuth, Action: "login", Result: audit.ResultSuccess, UserHash: log.HashUser("u-1")},
			{Category: audit.CategoryMCP, Action: "token", Result: audit.ResultDenied, Reason: "wrong_audience", ClientID: "c-1"},
			{Category: audit.CategoryAuth, Action: "login", Result: audit.ResultSuccess, UserHash: log.HashUser("u-2")},
		}
		for _, e := range events {
			if err := log.Record(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		page, err := log.Query(ctx, audit.Filter{UserHash: log.HashUser("u-1")}, storage.PageRequest{})
		if err != nil || len(page.Items) != 2 {
			t.Fatalf("u-1 events: %d, %v", len(page.Items), err)
		}
		if log.HashUser("u-1") == log.HashUser("u-2") || log.HashUser("x") == log.HashIP("x") || log.HashUser("") != "" {
			t.Fatal("hashes collide across users or kinds")
		}
		other := audit.New(s, []byte("another key, another installation"), quiet())
		if other.HashUser("u-1") == log.HashUser("u-1") {
			t.Fatal("hash does not depend on the key")
		}
		n, err := log.Purge(ctx, 0)
		if err != nil || n != 1 {
			t.Fatalf("purged %d, %v; want the one event past retention", n, err)
		}
		page, _ = log.Query(ctx, audit.Filter{}, storage.PageRequest{})
		if len(page.Items) != 3 {
			t.Fatalf("%d events after purge, want 3", len(page.Items))
		}
	})
}

type quotaNone struct{}

func (quotaNone) Allow(context.Context, capabilities.Caller, string) error {
	return errors.New("no calls left today")
}

// Every kind of refusal at the choke point lands in the audit log with its
// reason.
func TestEveryDenialKindIsAudited(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		log := audit.New(s, key, quiet())
		write := &capabilities.Annotations{Idempotent: true}
		read := &capabilities.Annotations{ReadOnly: true, Idempotent: true}
		def := func(name string, ann *capabilities.Annotations, req capabilities.Requirement) capabilities.Capability {
			return capabilities.Define(capabilities.Spec[struct{}, struct{}]{
				Name: name, Domain: "test", Title: name, Description: "a test capability", Annotations: ann, Requires: req,
				Handler: func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
			})
		}
		for _, tc := range []struct {
			name  string
			quota capabilities.Quota
			cap   capabilities.Capability
			edit  func(*capabilities.Caller)
			want  capabilities.DenialReason
		}{
			{"anonymous", nil, def("anyoneWrite", write, capabilities.Requirement{}), func(c *capabilities.Caller) { *c = capabilities.Caller{} }, capabilities.ReasonUnauthenticated},
			{"suspended", nil, def("readThing", read, capabilities.Requirement{}), func(c *capabilities.Caller) { c.State = capabilities.AccountSuspended }, capabilities.ReasonSuspended},
			{"deleting", nil, def("writeThing", write, capabilities.Requirement{}), func(c *capabilities.Caller) { c.State = capabilities.AccountDeleting }, capabilities.ReasonDeleting},
			{"role", nil, def("adminThing", read, capabilities.Requirement{Role: "admin"}), nil, capabilities.ReasonRole},
			{"permission", nil, def("readAnyUser", read, capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserAny}}), nil, capabilities.ReasonPermission},
			{"feature", nil, def("betaThing", read, capabilities.Requirement{Feature: "beta"}), nil, capabilities.ReasonFeature},
			{"interactive", nil, def("humanThing", read, capabilities.Requirement{InteractiveOnly: true}), func(c *capabilities.Caller) { c.Interactive = false }, capabilities.ReasonInteractive},
			{"scope", nil, def("scopedThing", read, capabilities.Requirement{Scopes: []string{"files"}}), func(c *capabilities.Caller) { c.AllScopes, c.Scopes = false, []string{"mcp"} }, capabilities.ReasonScope},
			{"quota", quotaNone{}, def("meteredThing", read, capabilities.Requirement{}), nil, capabilities.ReasonQuota},
		} {
			t.Run(tc.name, func(t *testing.T) {
				reg := capabilities.NewRegistry(capabilities.Options{Auditor: log, AuditKey: key, Logger: quiet(), Quota: tc.quota, NoBuiltins: true})
				if err := reg.Register(tc.cap); err != nil {
					t.Fatal(err)
				}
				caller := capabilities.Caller{UserID: "u-" + tc.name, Roles: []string{"user"}, State: capabilities.AccountActive, AllScopes: true, Interactive: true}
				if tc.edit != nil {
					tc.edit(&caller)
				}
				if _, err := reg.Invoke(ctx, caller, tc.cap.Name, json.RawMessage(`{}`)); err == nil {
					t.Fatal("the call ran")
				}
				page, err := log.Query(ctx, audit.Filter{Action: "tool:" + tc.cap.Name}, storage.PageRequest{})
				if err != nil || len(page.Items) != 1 || page.Items[0].Reason != string(tc.want) || page.Items[0].Result != audit.ResultDenied {
					t.Fatalf("audit rows %+v, %v; want one denial with reason %s", page.Items, err, tc.want)
				}
			})
		}
	})
}
