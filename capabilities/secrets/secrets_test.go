package secrets_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// users inserts two accounts and returns their owners.
func users(t *testing.T, s *storage.Store) (alice, bob storage.Owner) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for i, name := range []string{"alice", "bob"} {
		stable := strings.Repeat(name[:1], 64)
		_, err := s.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
			i+1, stable, name+"@example.com", name, now, now)
		if err != nil {
			t.Fatal(err)
		}
	}
	return storage.Owner{ID: 1, StableID: strings.Repeat("a", 64)}, storage.Owner{ID: 2, StableID: strings.Repeat("b", 64)}
}

func TestSecrets(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		svc, err := secrets.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}

		meta, created, err := svc.Set(ctx, alice, "github-token", "CI pushes", []byte("ghp_alice"))
		if err != nil || !created || meta.Name != "github-token" {
			t.Fatalf("set = %+v %v %v", meta, created, err)
		}
		if _, created, err = svc.Set(ctx, alice, "github-token", "CI pushes", []byte("ghp_alice2")); err != nil || created {
			t.Fatalf("replace: created=%v %v", created, err)
		}
		if _, _, err := svc.Set(ctx, bob, "github-token", "", []byte("ghp_bob")); err != nil {
			t.Fatal(err)
		}
		if v, err := svc.Reveal(ctx, alice, "github-token"); err != nil || string(v) != "ghp_alice2" {
			t.Fatalf("reveal = %q %v", v, err)
		}

		t.Run("list is metadata only and owner-scoped", func(t *testing.T) {
			for i := range 5 {
				if _, _, err := svc.Set(ctx, alice, "k"+string(rune('a'+i)), "", []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			var names []string
			cursor := ""
			for {
				page, err := svc.List(ctx, alice, storage.PageRequest{Cursor: cursor, Limit: 2})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range page.Items {
					names = append(names, m.Name)
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
			if strings.Join(names, ",") != "github-token,ka,kb,kc,kd,ke" {
				t.Fatalf("alice lists %v", names)
			}
			page, _ := svc.List(ctx, bob, storage.PageRequest{})
			if len(page.Items) != 1 {
				t.Fatalf("bob lists %d secrets, want only his own", len(page.Items))
			}
		})

		t.Run("cross-user denial", func(t *testing.T) {
			if _, err := svc.Reveal(ctx, bob, "ka"); !errors.Is(err, secrets.ErrNotFound) {
				t.Fatalf("bob reveals alice's secret: %v", err)
			}
			if ok, err := svc.Delete(ctx, bob, "ka"); ok || err != nil {
				t.Fatalf("bob deleted alice's secret: %v %v", ok, err)
			}
			if _, err := svc.Reveal(ctx, alice, "ka"); err != nil {
				t.Fatalf("alice's secret is gone after bob's delete: %v", err)
			}
		})

		t.Run("a ciphertext swapped into another row does not open", func(t *testing.T) {
			var ct string
			if err := s.DB.NewSelect().Table("user_secrets").Column("ciphertext").Where("user_id = ? AND name = ?", alice.ID, "github-token").Scan(ctx, &ct); err != nil {
				t.Fatal(err)
			}
			// Into bob's row of the same name, and into another of alice's.
			for _, target := range []struct {
				owner storage.Owner
				name  string
			}{{bob, "github-token"}, {alice, "ka"}} {
				if _, err := s.DB.NewUpdate().Table("user_secrets").Set("ciphertext = ?", ct).Where("user_id = ? AND name = ?", target.owner.ID, target.name).Exec(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := svc.Reveal(ctx, target.owner, target.name); !errors.Is(err, envelope.ErrOpen) {
					t.Fatalf("swapped ciphertext opened for %s/%s: %v", target.owner.StableID[:1], target.name, err)
				}
			}
		})

		t.Run("rotation re-seals, counts failures, keeps failed rows", func(t *testing.T) {
			res, err := svc.RotateKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Two rows hold swapped ciphertexts and cannot open.
			if res.Failed != 2 || res.Reencrypted != 5 {
				t.Fatalf("rotate = %+v, want 5 re-encrypted and 2 failed", res)
			}
			var stale int
			if err := s.DB.NewSelect().Table("user_secrets").ColumnExpr("count(*)").Where("key_id <> ?", res.KeyID).Scan(ctx, &stale); err != nil || stale != 2 {
				t.Fatalf("%d rows left under old keys (want the 2 failed), %v", stale, err)
			}
			// A fresh process (new ring) opens everything through the keeper.
			again, err := secrets.New(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := again.Reveal(ctx, alice, "github-token"); err != nil || string(v) != "ghp_alice2" {
				t.Fatalf("after rotation and restart: %q %v", v, err)
			}
		})

		t.Run("bad input", func(t *testing.T) {
			for _, tc := range []struct{ name, desc, value string }{
				{"", "", "v"}, {"-lead", "", "v"}, {"has space", "", "v"}, {strings.Repeat("n", 65), "", "v"},
				{"ok", strings.Repeat("d", 501), "v"}, {"ok", "", ""}, {"ok", "", strings.Repeat("v", secrets.MaxValueBytes+1)},
			} {
				if _, _, err := svc.Set(ctx, alice, tc.name, tc.desc, []byte(tc.value)); !errors.Is(err, secrets.ErrInvalid) {
					t.Errorf("Set(%.10q, desc %d, value %d bytes) = %v, want ErrInvalid", tc.name, len(tc.desc), len(tc.value), err)
				}
			}
		})
	})
}

func TestInventoryRegistration(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	inv := storage.NewInventory()
	if err := secrets.RegisterInventory(inv); err != nil {
		t.Fatal(err)
	}
	tbl, ok := inv.Table("user_secrets")
	if !ok || len(tbl.Redact) == 0 {
		t.Fatalf("user_secrets registered as %+v", tbl)
	}
	alice, _ := users(t, s)
	svc, _ := secrets.New(context.Background(), s)
	if _, _, err := svc.Set(context.Background(), alice, "x", "", []byte("top secret")); err != nil {
		t.Fatal(err)
	}
	page, err := storage.ExportRows(context.Background(), s.Reader, tbl, alice, storage.PageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0]["ciphertext"] != storage.RedactedValue || page.Items[0]["name"] != "x" {
		t.Fatalf("export row %v", page.Items)
	}
}
