package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

var (
	alice = storage.Owner{ID: 1, StableID: strings.Repeat("a", 64)}
	bob   = storage.Owner{ID: 2, StableID: strings.Repeat("b", 64)}
)

// createOwned makes two owned tables (one with a secret column) and one
// platform table, and fills them for alice and bob.
func createOwned(t *testing.T, s *storage.Store) {
	t.Helper()
	ctx := context.Background()
	for _, ddl := range []string{
		"CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id BIGINT NOT NULL, body TEXT NOT NULL)",
		"CREATE TABLE api_keys (id INTEGER PRIMARY KEY, owner_user_id BIGINT NOT NULL, label TEXT NOT NULL, key_hash TEXT NOT NULL)",
		"CREATE TABLE jobs (id INTEGER PRIMARY KEY, reviewer_user_id BIGINT)",
	} {
		if _, err := s.DB.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []storage.Owner{alice, bob} {
		for i := range 25 {
			if _, err := s.DB.ExecContext(ctx, "INSERT INTO notes (id, user_id, body) VALUES (?, ?, ?)", o.ID*1000+int64(i), o.ID, fmt.Sprintf("note %d of %d", i, o.ID)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO api_keys (id, owner_user_id, label, key_hash) VALUES (?, ?, 'ci', 'hash-of-secret')", o.ID, o.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func inventory(t *testing.T) *storage.Inventory {
	t.Helper()
	inv := storage.NewInventory()
	for _, err := range []error{
		inv.AddTable(storage.Table{Name: "notes"}),
		inv.AddTable(storage.Table{Name: "api_keys", OwnerColumn: "owner_user_id", Redact: []string{"key_hash"}}),
		inv.DeclarePlatform("jobs", "operator queue; reviewer is attribution, not ownership"),
		inv.AddBlobPrefix(storage.BlobPrefix{Domain: "notes"}),
		inv.AddKVPrefix(storage.KVPrefix{Domain: "notes"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return inv
}

func TestInventoryRegistrationErrors(t *testing.T) {
	inv := storage.NewInventory()
	if err := inv.AddTable(storage.Table{Name: "notes"}); err != nil {
		t.Fatal(err)
	}
	if err := inv.AddTable(storage.Table{Name: "tok2", KeyColumn: "token_hash", SkipExport: true}); err != nil {
		t.Fatalf("credential key with SkipExport: %v", err)
	}
	if _, err := storage.ExportRows(context.Background(), nil, storage.Table{Name: "tok2", SkipExport: true}, alice, storage.PageRequest{}); err == nil {
		t.Fatal("a SkipExport table was exported")
	}
	for name, err := range map[string]error{
		"twice":                 inv.AddTable(storage.Table{Name: "notes"}),
		"bad identifier":        inv.AddTable(storage.Table{Name: "notes; DROP TABLE users"}),
		"redacted owner column": inv.AddTable(storage.Table{Name: "x", Redact: []string{"user_id"}}),
		"platform and owned":    inv.DeclarePlatform("notes", "no"),
		"platform without why":  inv.DeclarePlatform("other", ""),
		"bad blob domain":       inv.AddBlobPrefix(storage.BlobPrefix{Domain: "../etc"}),
		"custom without funcs":  inv.AddCustom(storage.Custom{Name: "mailbox"}),
		"credential key column": inv.AddTable(storage.Table{Name: "tok", KeyColumn: "token_hash"}),
	} {
		if err == nil {
			t.Errorf("%s: registration accepted", name)
		}
	}
}

// The guardrail: Check fails for an owned table missing from the inventory
// and for a registration naming a column that does not exist.
func TestInventoryCheck(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		createOwned(t, s)
		inv := inventory(t)
		if err := inv.Check(ctx, s.DB); err != nil {
			t.Fatalf("complete inventory: %v", err)
		}

		if _, err := s.DB.ExecContext(ctx, "CREATE TABLE bookmarks (id INTEGER PRIMARY KEY, user_id BIGINT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		err := inv.Check(ctx, s.DB)
		if err == nil || !strings.Contains(err.Error(), "table bookmarks has owner column user_id but is not in the inventory") {
			t.Fatalf("unregistered owned table: %v", err)
		}

		stale := inventory(t)
		_ = stale.AddTable(storage.Table{Name: "bookmarks", Redact: []string{"token_hash"}})
		_ = stale.AddTable(storage.Table{Name: "gone"})
		err = stale.Check(ctx, s.DB)
		if err == nil || !strings.Contains(err.Error(), "registered column bookmarks.token_hash does not exist") ||
			!strings.Contains(err.Error(), "registered table gone does not exist") {
			t.Fatalf("stale registrations: %v", err)
		}
	}, storagetest.Unmigrated) // only this test's tables: the schema's own coverage is tested where all domains are assembled
}

func TestInventoryRowsAreOwnerScoped(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		createOwned(t, s)
		inv := inventory(t)
		notes, _ := inv.Table("notes")
		keys, _ := inv.Table("api_keys")

		if n, err := storage.CountRows(ctx, s.Reader, notes, alice); err != nil || n != 25 {
			t.Fatalf("count = %d, %v", n, err)
		}

		// Export pages: only alice's rows, every one once, secrets redacted.
		seen := map[string]bool{}
		cursor := ""
		for {
			page, err := storage.ExportRows(ctx, s.Reader, notes, alice, storage.PageRequest{Cursor: cursor, Limit: 7})
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range page.Items {
				body := fmt.Sprint(row["body"])
				if !strings.HasSuffix(body, "of 1") || seen[body] {
					t.Fatalf("export row %v: not alice's, or a duplicate", row)
				}
				seen[body] = true
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
		if len(seen) != 25 {
			t.Fatalf("exported %d rows, want 25", len(seen))
		}
		page, err := storage.ExportRows(ctx, s.Reader, keys, alice, storage.PageRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 1 || page.Items[0]["key_hash"] != storage.RedactedValue || page.Items[0]["label"] != "ci" {
			t.Fatalf("api_keys export = %v, want one row with key_hash redacted", page.Items)
		}

		// A cursor from bob's export does not continue into alice's listing
		// past her rows, and is only a position: it never widens the owner.
		bobPage, _ := storage.ExportRows(ctx, s.Reader, notes, bob, storage.PageRequest{Limit: 3})
		cross, err := storage.ExportRows(ctx, s.Reader, notes, alice, storage.PageRequest{Cursor: bobPage.Next})
		if err != nil {
			t.Fatal(err)
		}
		if len(cross.Items) != 0 {
			t.Fatalf("alice's export with bob's cursor returned %d rows", len(cross.Items))
		}

		// Deleting alice leaves bob byte-for-byte intact. Chunks of 7 rows
		// exercise the chunked delete (25 rows: 7+7+7+4).
		defer storage.SetDeleteChunk(7)()
		before, _ := storage.ExportRows(ctx, s.Reader, notes, bob, storage.PageRequest{Limit: 100})
		var counts map[string]int64
		if err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			var err error
			counts, err = inv.DeleteRows(ctx, tx, alice)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if counts["notes"] != 25 || counts["api_keys"] != 1 {
			t.Fatalf("deleted %v", counts)
		}
		after, _ := storage.ExportRows(ctx, s.Reader, notes, bob, storage.PageRequest{Limit: 100})
		if fmt.Sprint(before.Items) != fmt.Sprint(after.Items) {
			t.Fatal("bob's rows changed when alice was deleted")
		}
		if n, _ := storage.CountRows(ctx, s.Reader, notes, alice); n != 0 {
			t.Fatalf("alice still has %d notes", n)
		}
		// Idempotent: a retry deletes nothing more and fails nothing.
		if err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			counts, err = inv.DeleteRows(ctx, tx, alice)
			return err
		}); err != nil || counts["notes"] != 0 {
			t.Fatalf("retry: %v %v", counts, err)
		}
	})
}

func TestInventoryBlobsAndKV(t *testing.T) {
	ctx := context.Background()
	s := storagetest.Open(t, storage.SQLite)
	d := storage.BlobPrefix{Domain: "notes"}
	big := bytes.Repeat([]byte("0123456789abcdef"), (storage.MaxBlobChunk*2+100)/16) // 2 full chunks + a tail
	for _, o := range []storage.Owner{alice, bob} {
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(o, "notes", "big.bin"), big, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(o, "notes", "small.txt"), []byte("hi "+o.StableID[:1]), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(o, "avatars", "me.png"), []byte("png"), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.KV.Put(ctx, map[string]any{storage.KVKeyField: storage.KVKey(o, "notes", "cache"), "v": 1}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("export in chunks", func(t *testing.T) {
		got := map[string][]byte{}
		cursor, chunks := "", 0
		for {
			c, err := storage.ExportBlobChunk(ctx, s.Bucket, alice, d, cursor)
			if err != nil {
				t.Fatal(err)
			}
			chunks++
			if len(c.Data) > storage.MaxBlobChunk {
				t.Fatalf("chunk of %d bytes", len(c.Data))
			}
			if int64(len(got[c.Name])) != c.Offset {
				t.Fatalf("chunk of %s at %d, have %d bytes", c.Name, c.Offset, len(got[c.Name]))
			}
			got[c.Name] = append(got[c.Name], c.Data...)
			if c.Next == "" {
				break
			}
			cursor = c.Next
		}
		if !bytes.Equal(got["big.bin"], big) || string(got["small.txt"]) != "hi a" || len(got) != 2 || chunks != 4 {
			t.Fatalf("exported %d objects in %d chunks", len(got), chunks)
		}
	})

	t.Run("overwrite between chunks is reported", func(t *testing.T) {
		c, err := storage.ExportBlobChunk(ctx, s.Bucket, alice, d, "")
		if err != nil || c.Name != "big.bin" || c.Next == "" {
			t.Fatalf("first chunk %+v, %v", c.Name, err)
		}
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(alice, "notes", "big.bin"), append(big, 'x'), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := storage.ExportBlobChunk(ctx, s.Bucket, alice, d, c.Next); !errors.Is(err, storage.ErrBlobChanged) {
			t.Fatalf("err = %v, want ErrBlobChanged", err)
		}
	})

	t.Run("another user's cursor is refused", func(t *testing.T) {
		c, _ := storage.ExportBlobChunk(ctx, s.Bucket, bob, d, "")
		if _, err := storage.ExportBlobChunk(ctx, s.Bucket, alice, d, c.Next); !errors.Is(err, storage.ErrInvalidCursor) {
			t.Fatalf("err = %v, want ErrInvalidCursor", err)
		}
	})

	t.Run("delete is owner- and domain-scoped and idempotent", func(t *testing.T) {
		n, err := storage.DeleteBlobs(ctx, s.Bucket, alice, d)
		if err != nil || n != 2 {
			t.Fatalf("deleted %d, %v", n, err)
		}
		if n, err := storage.DeleteBlobs(ctx, s.Bucket, alice, d); err != nil || n != 0 {
			t.Fatalf("retry deleted %d, %v", n, err)
		}
		for _, key := range []string{storage.BlobKey(bob, "notes", "big.bin"), storage.BlobKey(alice, "avatars", "me.png")} {
			if ok, _ := s.Bucket.Exists(ctx, key); !ok {
				t.Fatalf("%s was deleted", key)
			}
		}
		if k, err := storage.DeleteKV(ctx, s.KV, alice, storage.KVPrefix{Domain: "notes"}); err != nil || k != 1 {
			t.Fatalf("KV deleted %d, %v", k, err)
		}
		doc := map[string]any{storage.KVKeyField: storage.KVKey(bob, "notes", "cache")}
		if err := s.KV.Get(ctx, doc); err != nil {
			t.Fatalf("bob's KV document: %v", err)
		}
	})
}

func TestExportRedactsCredentialColumnsByName(t *testing.T) {
	ctx := context.Background()
	s := storagetest.Open(t, storage.SQLite)
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE tokens (id INTEGER PRIMARY KEY, user_id BIGINT, label TEXT, token_hash TEXT, client_secret TEXT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.ExecContext(ctx, "INSERT INTO tokens VALUES (1, 1, 'ci', 'h', 's')"); err != nil {
		t.Fatal(err)
	}
	page, err := storage.ExportRows(ctx, s.Reader, storage.Table{Name: "tokens", OwnerColumn: "user_id", KeyColumn: "id"}, alice, storage.PageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	row := page.Items[0]
	if row["token_hash"] != storage.RedactedValue || row["client_secret"] != storage.RedactedValue || row["label"] != "ci" {
		t.Fatalf("row %v", row)
	}
}
