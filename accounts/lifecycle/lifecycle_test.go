package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/docstore/memdocstore"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type world struct {
	store      *storage.Store
	acc        *accounts.Service
	svc        *lifecycle.Service
	inv        *storage.Inventory
	faulty     *faultyBucket
	alice, bob storage.Owner
	revoked    []string
}

// setup opens a store whose bucket can fail on demand, and gives two users
// data on every kind of surface: SQL rows (their account, roles, secrets,
// notes), blobs, KV documents and a custom surface.
func setup(t *testing.T, s *storage.Store) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{store: s, faulty: &faultyBucket{b: s.Bucket}}
	s.Bucket = blob.NewBucket(w.faulty)

	var err error
	w.acc, err = accounts.New(ctx, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	id := "INTEGER PRIMARY KEY"
	if s.Dialect() == storage.Postgres {
		id = "BIGSERIAL PRIMARY KEY"
	}
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE notes (id "+id+", user_id BIGINT NOT NULL REFERENCES users (id), body TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	w.inv = storage.NewInventory()
	customRows := map[int64]int64{}
	if err := errors.Join(
		lifecycle.RegisterInventory(w.inv),
		secrets.RegisterInventory(w.inv),
		w.inv.AddTable(storage.Table{Name: "notes"}),
		w.inv.AddBlobPrefix(storage.BlobPrefix{Domain: "notes"}),
		w.inv.AddKVPrefix(storage.KVPrefix{Domain: "notes"}),
		w.inv.AddCustom(storage.Custom{
			Name:  "counters",
			Count: func(_ context.Context, o storage.Owner) (int64, error) { return customRows[o.ID], nil },
			Export: func(_ context.Context, o storage.Owner, _ string, _ int) ([]any, string, error) {
				return []any{map[string]int64{"calls": customRows[o.ID]}}, "", nil
			},
			Delete: func(_ context.Context, o storage.Owner) (int64, error) {
				n := customRows[o.ID]
				delete(customRows, o.ID)
				return n, nil
			},
		}),
	); err != nil {
		t.Fatal(err)
	}
	w.svc = lifecycle.New(s, w.inv, w.acc, lifecycle.Options{Logger: quiet(), Hooks: []lifecycle.Hook{{
		Name: "oauth", Run: func(_ context.Context, o storage.Owner) error { w.revoked = append(w.revoked, o.StableID); return nil },
	}}})
	sec, err := secrets.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"alice", "bob"} {
		u, err := w.acc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "correct horse battery " + name})
		if err != nil {
			t.Fatal(err)
		}
		o := storage.Owner{ID: u.ID, StableID: u.StableID}
		if i == 0 {
			w.alice = o
		} else {
			w.bob = o
		}
		for j := range 30 {
			if _, err := s.DB.ExecContext(ctx, "INSERT INTO notes (user_id, body) VALUES (?, ?)", o.ID, fmt.Sprintf("%s note %d", name, j)); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := sec.Set(ctx, o, "api", "", []byte("secret-value-of-"+name)); err != nil {
			t.Fatal(err)
		}
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(o, "notes", "a.bin"), bytes.Repeat([]byte(name), 100_000), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(o, "notes", "b.txt"), []byte("hello "+name), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.KV.Put(ctx, map[string]any{storage.KVKeyField: storage.KVKey(o, "notes", "cache"), "v": name}); err != nil {
			t.Fatal(err)
		}
		customRows[o.ID] = int64(10 + i)
	}
	return w
}

// export reads o's complete export through the capability-level API and
// returns it as one canonical JSON document (without the generation time).
func export(t *testing.T, w *world, o storage.Owner) string {
	t.Helper()
	var buf bytes.Buffer
	if err := w.svc.WriteExport(context.Background(), o, &buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("export is not JSON: %v", err)
	}
	delete(doc["manifest"].(map[string]any), "generatedAt")
	out, _ := json.Marshal(doc)
	return string(out)
}

func TestExport(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		m, err := w.svc.Manifest(ctx, w.alice)
		if err != nil {
			t.Fatal(err)
		}
		if m.SchemaVersion != 1 || m.Security.SecretValuesExported || m.GeneratedAt.Location().String() != "UTC" {
			t.Fatalf("manifest header %+v", m)
		}
		counts := map[string]int64{}
		for _, sec := range m.Sections {
			counts[sec.Name] = sec.Count
		}
		want := map[string]int64{"sql:users": 1, "sql:user_roles": 1, "sql:user_secrets": 1, "sql:notes": 30, "blob:notes": 2, "custom:counters": 10}
		for name, n := range want {
			if counts[name] != n {
				t.Errorf("manifest %s = %d, want %d", name, counts[name], n)
			}
		}

		doc := export(t, w, w.alice)
		for _, leak := range []string{"secret-value-of", "argon2", "bob note", "bob@example.com", w.bob.StableID} {
			if strings.Contains(doc, leak) {
				t.Errorf("alice's export contains %q", leak)
			}
		}
		if !strings.Contains(doc, "alice note 29") || !strings.Contains(doc, storage.RedactedValue) {
			t.Error("alice's export lacks her notes or the redaction markers")
		}
		// The blob comes back whole from its chunks.
		var got []byte
		cursor := ""
		for {
			page, err := w.svc.Section(ctx, w.alice, "blob:notes", cursor, 0)
			if err != nil {
				t.Fatal(err)
			}
			if page.Chunk != nil && page.Chunk.Name == "a.bin" {
				b, _ := base64.StdEncoding.DecodeString(page.Chunk.Data)
				got = append(got, b...)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if !bytes.Equal(got, bytes.Repeat([]byte("alice"), 100_000)) {
			t.Fatalf("a.bin exported as %d bytes", len(got))
		}
		if _, err := w.svc.Section(ctx, w.alice, "sql:schema_migrations", "", 0); !errors.Is(err, lifecycle.ErrUnknownSection) {
			t.Fatalf("unregistered table exported: %v", err)
		}
	})
}

func TestExportCapabilitiesAreOwnerScoped(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		if err := reg.Register(w.svc.Capabilities(lifecycle.Owners(w.acc))...); err != nil {
			t.Fatal(err)
		}
		bob, err := w.acc.LoadCaller(ctx, w.bob.StableID)
		if err != nil {
			t.Fatal(err)
		}
		bob.AllScopes, bob.Interactive = true, true
		res, err := reg.Invoke(ctx, bob, "accountExportSection", json.RawMessage(`{"section":"sql:notes","limit":1000}`))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(res.Structured)
		if strings.Contains(string(out), "alice") || !strings.Contains(string(out), "bob note 0") {
			t.Fatalf("bob's export section: %.200s", out)
		}
		// Alice's cursor gives bob nothing of hers.
		page, _ := w.svc.Section(ctx, w.alice, "blob:notes", "", 0)
		if _, err := reg.Invoke(ctx, bob, "accountExportSection", json.RawMessage(`{"section":"blob:notes","cursor":"`+page.NextCursor+`"}`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("bob with alice's blob cursor: %v", err)
		}
		if _, err := reg.Invoke(ctx, bob, "accountExportSection", json.RawMessage(`{"section":"sql:nope"}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("unknown section: %v", err)
		}
		res, err = reg.Invoke(ctx, bob, "accountExportManifest", json.RawMessage(`{}`))
		if err != nil || res.Structured.(lifecycle.Manifest).User.Username != "bob" {
			t.Fatalf("manifest: %v", err)
		}
	})
}

func TestDeletion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		bobBefore := export(t, w, w.bob)

		// A blob failure stops the deletion with the marker set and the data kept.
		w.faulty.failDeletes.Store(true)
		res, err := w.svc.Delete(ctx, w.alice)
		if err == nil || res.Completed {
			t.Fatalf("deletion with failing blob storage: %+v, %v", res, err)
		}
		u, err := w.acc.Identity.UserByID(ctx, w.alice.ID)
		if err != nil || u.DeletingAt == nil {
			t.Fatalf("after the failure alice is %+v, %v; want kept and marked deleting", u, err)
		}
		if n, _ := storage.CountRows(ctx, s.Reader, storage.Table{Name: "notes", OwnerColumn: "user_id"}, w.alice); n != 30 {
			t.Fatalf("alice's notes after the failed attempt: %d", n)
		}
		caller, _ := w.acc.LoadCaller(ctx, w.alice.StableID)
		if caller.State != capabilities.AccountDeleting {
			t.Fatalf("caller state %v, want deleting (writes refused)", caller.State)
		}

		// The retry completes and says what it removed.
		w.faulty.failDeletes.Store(false)
		res, err = w.svc.Delete(ctx, w.alice)
		if err != nil || !res.Completed {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		for surface, n := range map[string]int64{"sql:notes": 30, "sql:user_secrets": 1, "sql:user_roles": 1, "sql:users": 1, "blob:notes": 2, "kv:notes": 1, "custom:counters": 10} {
			if res.Deleted[surface] != n {
				t.Errorf("deleted[%s] = %d, want %d", surface, res.Deleted[surface], n)
			}
		}
		if _, err := w.acc.Identity.UserByID(ctx, w.alice.ID); !errors.Is(err, accounts.ErrNotFound) {
			t.Fatalf("alice still exists: %v", err)
		}
		if len(w.revoked) != 2 || w.revoked[0] != w.alice.StableID {
			t.Fatalf("hooks ran for %v", w.revoked)
		}
		if keys, _ := storage.ListBlobs(ctx, s.Bucket, w.alice, storage.BlobPrefix{Domain: "notes"}); len(keys) != 0 {
			t.Fatalf("alice's blobs left: %v", keys)
		}
		// Bob is byte-for-byte intact.
		if after := export(t, w, w.bob); after != bobBefore {
			t.Fatal("bob's export changed when alice was deleted")
		}
		// The same email can sign up again afterwards.
		if _, err := w.acc.Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice2", Password: "another long password"}); err != nil {
			t.Fatalf("signup after deletion: %v", err)
		}
	})
}

func TestLastAdminCannotDeleteTheirAccount(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		if _, err := w.acc.Roles.GrantAdminAsOperator(ctx, w.alice.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := w.svc.Delete(ctx, w.alice); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("last admin's deletion: %v, want ErrLastAdmin", err)
		}
		u, _ := w.acc.Identity.UserByID(ctx, w.alice.ID)
		if u.DeletingAt != nil {
			t.Fatal("the refused deletion marked the account deleting")
		}
		// With a second admin, the first can go.
		if _, err := w.acc.Roles.GrantAdminAsOperator(ctx, w.bob.ID); err != nil {
			t.Fatal(err)
		}
		if res, err := w.svc.Delete(ctx, w.alice); err != nil || !res.Completed {
			t.Fatalf("deletion with another admin: %v", err)
		}
	})
}

// A deletion that fails midway leaves the account's roles: they go only
// with its rows, in the final transaction. While it is marked deleting the
// account no longer counts as an active admin, so the other admin cannot
// be suspended; the retry completes.
func TestFailedDeletionKeepsRoles(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		w := setup(t, s)
		for _, o := range []storage.Owner{w.alice, w.bob} {
			if _, err := w.acc.Roles.GrantAdminAsOperator(ctx, o.ID); err != nil {
				t.Fatal(err)
			}
		}
		w.faulty.failDeletes.Store(true)
		if res, err := w.svc.Delete(ctx, w.alice); err == nil || res.Completed {
			t.Fatalf("deletion with failing blob storage: %+v, %v", res, err)
		}
		g, err := w.acc.Roles.RolesAndPermissions(ctx, w.alice.ID)
		if err != nil || !g.HasRole(capabilities.RoleAdmin) || !g.HasRole(capabilities.RoleUser) {
			t.Fatalf("roles after a failed deletion: %+v, %v; want admin and user kept", g, err)
		}
		if _, err := w.acc.Lifecycle.Suspend(ctx, w.bob.ID); !errors.Is(err, accounts.ErrLastAdmin) {
			t.Fatalf("suspending the only active admin while the other is being deleted: %v, want ErrLastAdmin", err)
		}
		w.faulty.failDeletes.Store(false)
		res, err := w.svc.Delete(ctx, w.alice)
		if err != nil || !res.Completed || res.Deleted["sql:user_roles"] != 2 {
			t.Fatalf("retry: %+v, %v; want completed with both roles removed", res, err)
		}
	})
}

// KV entries have no expiry of their own: a KV store that fails keeps the
// account marked deleting with its data, like any other surface, and the
// error names the stage (FailureClass) without the cause's text.
func TestDeletionKeepsTheAccountWhenKVFails(t *testing.T) {
	ctx := context.Background()
	s := storagetest.Open(t, storage.SQLite)
	w := setup(t, s)
	kv := s.KV
	broken, err := memdocstore.OpenCollection(storage.KVKeyField, nil)
	if err != nil {
		t.Fatal(err)
	}
	broken.Close() // every operation on it fails from now on
	s.KV = broken
	res, err := w.svc.Delete(ctx, w.alice)
	if err == nil || res.Completed {
		t.Fatalf("deletion with a failing KV store: %+v, %v", res, err)
	}
	if got := lifecycle.FailureClass(err); got != "kv notes (failed)" {
		t.Fatalf("FailureClass = %q", got)
	}
	if u, err := w.acc.Identity.UserByID(ctx, w.alice.ID); err != nil || u.DeletingAt == nil {
		t.Fatalf("after the failure alice is %+v, %v; want kept and marked deleting", u, err)
	}
	s.KV = kv
	res, err = w.svc.Delete(ctx, w.alice)
	if err != nil || !res.Completed || res.Deleted["kv:notes"] != 1 {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if got := lifecycle.FailureClass(fmt.Errorf("wrapped: %w", &lifecycle.DeleteError{Stage: "rows", Err: context.DeadlineExceeded})); got != "rows (timed out)" {
		t.Fatalf("FailureClass of a deadline = %q", got)
	}
}
