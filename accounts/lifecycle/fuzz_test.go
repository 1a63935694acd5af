package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/internal/fuzzseed"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// FuzzExportCursor pages alice's export with arbitrary sections, cursors
// and limits. The property: no panic; an error is one a caller can act on
// (unknown section, invalid cursor, changed blob) and never an internal
// one; and no page ever carries bob's rows or bytes.
func FuzzExportCursor(f *testing.F) {
	ctx := context.Background()
	s := storagetest.Open(f, storage.SQLite)
	acc, err := accounts.New(ctx, s, accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}, Logger: quiet()})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE notes (id INTEGER PRIMARY KEY, user_id BIGINT NOT NULL REFERENCES users (id), body TEXT NOT NULL)"); err != nil {
		f.Fatal(err)
	}
	inv := storage.NewInventory()
	if err := errors.Join(lifecycle.RegisterInventory(inv), inv.AddTable(storage.Table{Name: "notes"}), inv.AddBlobPrefix(storage.BlobPrefix{Domain: "notes"})); err != nil {
		f.Fatal(err)
	}
	svc := lifecycle.New(s, inv, acc, lifecycle.Options{Logger: quiet()})
	var alice, bob storage.Owner
	for i, name := range []string{"alice", "bob"} {
		u, err := acc.Identity.Signup(ctx, accounts.SignupInput{Email: name + "@example.com", Username: name, Password: "correct horse battery " + name})
		if err != nil {
			f.Fatal(err)
		}
		o := storage.Owner{ID: u.ID, StableID: u.StableID}
		if i == 0 {
			alice = o
		} else {
			bob = o
		}
		for j := range 5 {
			if _, err := s.DB.ExecContext(ctx, "INSERT INTO notes (user_id, body) VALUES (?, ?)", o.ID, fmt.Sprintf("%s-only note %d", name, j)); err != nil {
				f.Fatal(err)
			}
		}
		if err := s.Bucket.WriteAll(ctx, storage.BlobKey(o, "notes", "a.txt"), []byte(name+"-only blob"), nil); err != nil {
			f.Fatal(err)
		}
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	bobKey := storage.BlobKey(bob, "notes", "a.txt")
	aliceKey := storage.BlobKey(alice, "notes", "a.txt")
	fuzzseed.Add(f,
		[]any{"sql:notes", "", int64(2)},
		[]any{"sql:notes", b64(`{"k":"notes","a":2}`), int64(2)},
		[]any{"sql:notes", b64(`{"k":"notes","a":"x"}`), int64(0)},
		[]any{"sql:notes", b64(`{"k":"notes","a":1e99}`), int64(-5)},
		[]any{"sql:users", b64(`{"k":"users","a":-1}`), int64(1000000)},
		[]any{"blob:notes", "", int64(1)},
		[]any{"blob:notes", b64(`{"d":"notes","k":"` + bobKey + `","o":0,"s":-1}`), int64(1)},
		[]any{"blob:notes", b64(`{"d":"notes","k":"` + aliceKey + `/../../` + bobKey + `","o":0,"s":-1}`), int64(1)},
		[]any{"blob:notes", b64(`{"d":"notes","k":"` + aliceKey + `","o":9223372036854775807,"s":-1}`), int64(1)},
		[]any{"blob:notes", b64(`{"d":"notes","k":"` + aliceKey + `","o":-1}`), int64(1)},
		[]any{"custom:none", "", int64(1)},
		[]any{"", "\xff\xfe", int64(1)},
		[]any{"sql:", strings.Repeat("A", 10000), int64(1)},
	)
	f.Fuzz(func(t *testing.T, section, cursor string, limit int64) {
		cursor = strings.NewReplacer("{alice}", alice.StableID, "{bob}", bob.StableID).Replace(cursor)
		page, err := svc.Section(ctx, alice, section, cursor, int(limit))
		if err != nil {
			if errors.Is(err, lifecycle.ErrUnknownSection) || errors.Is(err, storage.ErrInvalidCursor) || errors.Is(err, storage.ErrBlobChanged) {
				return
			}
			t.Fatalf("section %q cursor %q limit %d: internal error %v", section, cursor, limit, err)
		}
		out, _ := json.Marshal(page)
		if bytes.Contains(out, []byte("bob-only")) || bytes.Contains(out, []byte(base64.StdEncoding.EncodeToString([]byte("bob-only blob")))) {
			t.Fatalf("section %q cursor %q: bob's data in alice's export: %s", section, cursor, out)
		}
	})
}
