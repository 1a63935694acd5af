package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// operatorUserExport streams an account's export to the writer in the
// call's context (and refuses to run without one); operatorUserDelete
// answers what it removed, also when it stopped midway (an error result,
// the account kept for a retry).
func TestOperatorLifecycleCapabilities(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true})
		if err := reg.Register(w.svc.OperatorCapabilities()...); err != nil {
			t.Fatal(err)
		}
		op := capabilities.OperatorCaller()
		alice := json.RawMessage(`{"email":"alice@example.com"}`)

		if _, err := reg.Invoke(ctx, op, "operatorUserExport", alice); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("an export without a destination = %v", err)
		}
		var buf bytes.Buffer
		if _, err := reg.Invoke(lifecycle.WithExportWriter(ctx, &buf), op, "operatorUserExport", alice); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("the export is not JSON: %v", err)
		}
		delete(doc["manifest"].(map[string]any), "generatedAt")
		got, _ := json.Marshal(doc)
		if want := export(t, w, w.alice); string(got) != want {
			t.Fatalf("operatorUserExport wrote\n%s\nWriteExport writes\n%s", got, want)
		}

		w.faulty.failDeletes.Store(true)
		res, err := reg.Invoke(ctx, op, "operatorUserDelete", alice)
		if err != nil || !res.IsError {
			t.Fatalf("a deletion stopped midway = %+v, %v; want an error result", res, err)
		}
		out := res.Structured.(lifecycle.OperatorDeleteOutput)
		if out.Deletion.Completed || out.User.StableUserID != w.alice.StableID {
			t.Fatalf("stopped deletion answered %+v", out)
		}
		w.faulty.failDeletes.Store(false)
		res, err = reg.Invoke(ctx, op, "operatorUserDelete", alice)
		if err != nil || res.IsError {
			t.Fatalf("retry = %+v, %v", res, err)
		}
		out = res.Structured.(lifecycle.OperatorDeleteOutput)
		if !out.Deletion.Completed || out.Deletion.Deleted["sql:notes"] == 0 {
			t.Fatalf("retry answered %+v", out)
		}
		if _, err := reg.Invoke(ctx, op, "operatorUserDelete", alice); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("deleting a deleted account = %v", err)
		}
	})
}
