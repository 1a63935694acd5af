package notes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/examples/notes/notes"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestNotesDomain(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			sc := storagetest.Config(t, d)
			srv, err := enclave.New(ctx, enclave.Config{
				DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, Migrations: []migrations.Source{notes.Migrations},
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
				Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			if _, err := notes.Register(srv.Store(), srv.Inventory(), srv.Registry(), lifecycle.Owners(srv.Accounts())); err != nil {
				t.Fatal(err)
			}
			// The domain's table is covered by the inventory guardrail.
			if err := srv.Inventory().Check(ctx, srv.Store().DB); err != nil {
				t.Fatal(err)
			}

			callers := map[string]capabilities.Caller{}
			owners := map[string]storage.Owner{}
			for _, name := range []string{"alice", "bob"} {
				u, err := srv.Accounts().Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name})
				if err != nil {
					t.Fatal(err)
				}
				c, err := srv.Accounts().LoadCaller(ctx, u.StableID)
				if err != nil {
					t.Fatal(err)
				}
				c.AllScopes, c.Interactive = true, true
				callers[name], owners[name] = c, storage.Owner{ID: u.ID, StableID: u.StableID}
			}
			call := func(who, name, args string) (string, error) {
				res, err := srv.Registry().Invoke(ctx, callers[who], name, json.RawMessage(args))
				if err != nil {
					return "", err
				}
				b, _ := json.Marshal(res.Structured)
				return string(b), nil
			}
			out, err := call("alice", "noteCreate", `{"title":"plan","body":"ship it","attachmentBase64":"aGVsbG8gd29ybGQ="}`)
			if err != nil {
				t.Fatal(err)
			}
			var n notes.Note
			_ = json.Unmarshal([]byte(out), &n)
			if _, err := call("bob", "noteCreate", `{"title":"bob's","body":"mine"}`); err != nil {
				t.Fatal(err)
			}

			// Happy path, then cross-user denial on every capability.
			if out, err := call("alice", "noteGet", `{"id":`+itoa(n.ID)+`}`); err != nil || !strings.Contains(out, "aGVsbG8gd29ybGQ=") {
				t.Fatalf("alice's get: %s %v", out, err)
			}
			if _, err := call("bob", "noteGet", `{"id":`+itoa(n.ID)+`}`); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("bob reads alice's note: %v", err)
			}
			if out, _ := call("bob", "noteList", `{}`); strings.Contains(out, "plan") {
				t.Fatalf("bob lists alice's note: %s", out)
			}
			if out, _ := call("bob", "noteDelete", `{"id":`+itoa(n.ID)+`}`); out != `{"deleted":false}` {
				t.Fatalf("bob deletes alice's note: %s", out)
			}

			// The generic machinery exports and deletes the domain.
			var buf bytes.Buffer
			if err := srv.Lifecycle().WriteExport(ctx, owners["alice"], &buf); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), `"sql:notes"`) || !strings.Contains(buf.String(), "aGVsbG8gd29ybGQ=") || strings.Contains(buf.String(), "bob's") {
				t.Fatalf("alice's export: %.400s", buf.String())
			}
			res, err := srv.Lifecycle().Delete(ctx, owners["alice"])
			if err != nil || res.Deleted["sql:notes"] != 1 || res.Deleted["blob:notes"] != 1 {
				t.Fatalf("deletion: %+v %v", res, err)
			}
			if out, err := call("bob", "noteList", `{}`); err != nil || !strings.Contains(out, "bob's") {
				t.Fatalf("bob's notes after alice's deletion: %s %v", out, err)
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
