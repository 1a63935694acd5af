package secrets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestSecretCapabilities(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		svc, err := secrets.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]storage.Owner{alice.StableID: alice, bob.StableID: bob}
		ownerOf := func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
			o, ok := owners[c.UserID]
			if !ok {
				return storage.Owner{}, fmt.Errorf("no such user")
			}
			return o, nil
		}
		reg := capabilities.NewRegistry(capabilities.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := reg.Register(svc.Capabilities(ownerOf)...); err != nil {
			t.Fatal(err)
		}
		caller := func(o storage.Owner) capabilities.Caller {
			return capabilities.Caller{UserID: o.StableID, Roles: []string{"user"},
				State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		}
		a, b := caller(alice), caller(bob)
		v, _ := capabilities.NewVocabulary()
		a.Permissions = v.RolePermissions(capabilities.RoleUser)
		b.Permissions = a.Permissions

		invoke := func(c capabilities.Caller, name, args string) string {
			t.Helper()
			res, err := reg.Invoke(ctx, c, name, json.RawMessage(args))
			if err != nil {
				t.Fatalf("%s %s: %v", name, args, err)
			}
			out, _ := json.Marshal(res.Structured)
			return string(out)
		}
		if out := invoke(a, "secretSet", `{"name":"openai","value":"sk-alice-123","description":"model calls"}`); !strings.Contains(out, `"created":true`) || strings.Contains(out, "sk-alice") {
			t.Fatalf("secretSet = %s", out)
		}
		invoke(b, "secretSet", `{"name":"other","value":"sk-bob"}`)
		if out := invoke(a, "secretList", `{}`); !strings.Contains(out, `"openai"`) || strings.Contains(out, "other") || strings.Contains(out, "sk-") {
			t.Fatalf("alice's list = %s", out)
		}
		// Cross-user: bob cannot delete (or see) alice's secret.
		if out := invoke(b, "secretDelete", `{"name":"openai"}`); out != `{"deleted":false}` {
			t.Fatalf("bob's delete of alice's secret = %s", out)
		}
		if out := invoke(b, "secretList", `{}`); strings.Contains(out, "openai") {
			t.Fatalf("bob sees alice's secret: %s", out)
		}
		if got, err := svc.Reveal(ctx, alice, "openai"); err != nil || string(got) != "sk-alice-123" {
			t.Fatalf("alice's secret after bob's attempt: %q %v", got, err)
		}
		// Reveal: only through a web session, only one's own.
		if _, err := reg.Invoke(ctx, a, "secretReveal", json.RawMessage(`{"name":"openai"}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("an agent (token caller) reveals a secret: %v", err)
		}
		if slices.Contains(reg.VisibleNames(ctx, a), "secretReveal") {
			t.Fatal("an agent sees secretReveal")
		}
		aWeb, bWeb := a, b
		aWeb.Session, bWeb.Session = true, true
		if out := invoke(aWeb, "secretReveal", `{"name":"openai"}`); out != `{"name":"openai","value":"sk-alice-123"}` {
			t.Fatalf("alice reveals her secret: %s", out)
		}
		if _, err := reg.Invoke(ctx, bWeb, "secretReveal", json.RawMessage(`{"name":"openai"}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("bob reveals alice's secret: %v", err)
		}
		if out := invoke(a, "secretDelete", `{"name":"openai"}`); out != `{"deleted":true}` {
			t.Fatalf("alice's delete = %s", out)
		}
		// Bad input is a clear invalid_input; a deleting account cannot write.
		if _, err := reg.Invoke(ctx, a, "secretSet", json.RawMessage(`{"name":"bad name","value":"x"}`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("bad name: %v", err)
		}
		deleting := a
		deleting.State = capabilities.AccountDeleting
		if _, err := reg.Invoke(ctx, deleting, "secretSet", json.RawMessage(`{"name":"late","value":"x"}`)); err == nil {
			t.Fatal("a deleting account stored a secret")
		}
		if _, err := reg.Invoke(ctx, deleting, "secretList", json.RawMessage(`{}`)); err != nil {
			t.Fatalf("a deleting account cannot read its list: %v", err)
		}
	})
}
