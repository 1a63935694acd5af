package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/pubsub"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestMigrationsAppliedTwice(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		// storagetest.Open applied them once already.
		res, err := migrations.Apply(ctx, s.DB)
		if err != nil {
			t.Fatalf("second apply: %v", err)
		}
		if len(res.Applied) != 0 {
			t.Fatalf("second apply ran %d migrations, want 0", len(res.Applied))
		}
		all, _ := migrations.Load(string(s.Dialect()))
		if res.Current != all[len(all)-1].Version {
			t.Fatalf("current version %d, want %d", res.Current, all[len(all)-1].Version)
		}
	})
}

type item struct {
	bun.BaseModel `bun:"table:contract_items"`
	ID            int64  `bun:"id,pk,autoincrement"`
	Name          string `bun:"name"`
}

func createItems(t *testing.T, s *storage.Store) {
	t.Helper()
	if _, err := s.DB.NewCreateTable().Model((*item)(nil)).Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRunInTxRollsBack(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		createItems(t, s)
		boom := errors.New("boom")
		err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&item{Name: "lost"}).Returning("NULL").Exec(ctx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("RunInTx error = %v, want the callback's error unwrapped", err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("panic was swallowed")
				}
			}()
			_ = s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.NewInsert().Model(&item{Name: "lost-too"}).Returning("NULL").Exec(ctx); err != nil {
					return err
				}
				panic("handler bug")
			})
		}()
		if err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&item{Name: "kept"}).Returning("NULL").Exec(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var names []string
		if err := s.Reader.NewSelect().Model((*item)(nil)).Column("name").Scan(ctx, &names); err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != "kept" {
			t.Fatalf("rows after rollback = %v, want [kept]", names)
		}
	})
}

func TestKeysetPagination(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		createItems(t, s)
		const n = 1000
		rows := make([]item, n)
		for i := range rows {
			rows[i] = item{Name: fmt.Sprintf("item-%04d", n-i)} // names sort opposite to ids
		}
		if _, err := s.DB.NewInsert().Model(&rows).Returning("NULL").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		byID := storage.Keyset[item]{Kind: "items", Column: "id", Key: func(it *item) any { return it.ID }}
		byName := storage.Keyset[item]{Kind: "items-by-name", Column: "name", Key: func(it *item) any { return it.Name }, Desc: true}

		for _, tc := range []struct {
			name  string
			ks    storage.Keyset[item]
			limit int
		}{
			{"id asc, limit 37", byID, 37},
			{"id asc, limit 1000", byID, 1000},
			{"name desc, limit 64", byName, 64},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seen := map[int64]bool{}
				var prev *item
				cursor, pages := "", 0
				for {
					q := s.Reader.NewSelect().Model((*item)(nil))
					page, err := storage.Paginate(ctx, q, tc.ks, storage.PageRequest{Cursor: cursor, Limit: tc.limit})
					if err != nil {
						t.Fatal(err)
					}
					pages++
					if len(page.Items) > tc.limit {
						t.Fatalf("page of %d items, limit %d", len(page.Items), tc.limit)
					}
					for i := range page.Items {
						it := page.Items[i]
						if seen[it.ID] {
							t.Fatalf("duplicate item %d", it.ID)
						}
						seen[it.ID] = true
						if prev != nil && tc.ks.Column == "id" && it.ID <= prev.ID {
							t.Fatalf("order broken: %d after %d", it.ID, prev.ID)
						}
						if prev != nil && tc.ks.Column == "name" && it.Name >= prev.Name {
							t.Fatalf("order broken: %s after %s", it.Name, prev.Name)
						}
						prev = &it
					}
					if page.Next == "" {
						break
					}
					cursor = page.Next
				}
				if len(seen) != n {
					t.Fatalf("saw %d distinct items, want %d (gap)", len(seen), n)
				}
				if want := (n + tc.limit - 1) / tc.limit; pages != want && pages != want+1 {
					t.Fatalf("%d pages, want %d", pages, want)
				}
			})
		}

		t.Run("rows inserted and deleted between pages", func(t *testing.T) {
			q := func() *bun.SelectQuery { return s.Reader.NewSelect().Model((*item)(nil)) }
			first, err := storage.Paginate(ctx, q(), byID, storage.PageRequest{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			// Delete the last row already returned and one not yet returned.
			if _, err := s.DB.NewDelete().Model((*item)(nil)).Where("id IN (?)", bun.In([]int64{first.Items[9].ID, first.Items[9].ID + 1})).Exec(ctx); err != nil {
				t.Fatal(err)
			}
			second, err := storage.Paginate(ctx, q(), byID, storage.PageRequest{Cursor: first.Next, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := second.Items[0].ID, first.Items[9].ID+2; got != want {
				t.Fatalf("second page starts at %d, want %d", got, want)
			}
		})

		t.Run("foreign and forged cursors are refused", func(t *testing.T) {
			page, err := storage.Paginate(ctx, s.Reader.NewSelect().Model((*item)(nil)), byID, storage.PageRequest{Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{"not base64!", "bm90IGpzb24", page.Next + "x"} {
				if _, err := storage.Paginate(ctx, s.Reader.NewSelect().Model((*item)(nil)), byID, storage.PageRequest{Cursor: c}); !errors.Is(err, storage.ErrInvalidCursor) {
					t.Errorf("cursor %q: err = %v, want ErrInvalidCursor", c, err)
				}
			}
			if _, err := storage.Paginate(ctx, s.Reader.NewSelect().Model((*item)(nil)), byName, storage.PageRequest{Cursor: page.Next}); !errors.Is(err, storage.ErrInvalidCursor) {
				t.Errorf("cursor of another listing: err = %v, want ErrInvalidCursor", err)
			}
		})
	})
}

// Concurrent writers never see "database is locked": 8 goroutines × 500
// write transactions, split across two independently opened stores on the
// same database (two processes, or two replicas).
func TestConcurrentWriters(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			ctx := context.Background()
			cfg := storagetest.Config(t, d)
			a, err := storage.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := storage.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			createItems(t, a)

			const goroutines, txs = 8, 500
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				s := a
				if g%2 == 1 {
					s = b
				}
				wg.Go(func() {
					for i := range txs {
						err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
							// Read-then-write: the pattern that deadlocks on
							// SQLite when transactions begin deferred.
							var n int
							if err := tx.NewSelect().Model((*item)(nil)).ColumnExpr("count(*)").Scan(ctx, &n); err != nil {
								return err
							}
							_, err := tx.NewInsert().Model(&item{Name: fmt.Sprintf("g%d-%d", g, i)}).Returning("NULL").Exec(ctx)
							return err
						})
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("write transaction failed: %v", err)
			}
			n, err := a.Reader.NewSelect().Model((*item)(nil)).Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n != goroutines*txs {
				t.Fatalf("%d rows, want %d", n, goroutines*txs)
			}
		})
	}
}

func TestSQLiteReaderIsReadOnly(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	_, err := s.Reader.ExecContext(context.Background(), "CREATE TABLE nope (x INTEGER)")
	if err == nil {
		t.Fatal("the read pool accepted a write")
	}
}

func TestBadURLs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  storage.Config
		want string
	}{
		{"unknown database scheme", storage.Config{DatabaseURL: "mysql://x"}, "want sqlite://PATH or postgres://"},
		{"in-memory sqlite", storage.Config{DatabaseURL: "sqlite://:memory:"}, "in-memory database"},
		{"unknown blob scheme", storage.Config{BlobURL: "nope://bucket"}, "open blob bucket"},
		{"postgres password is not echoed", storage.Config{DatabaseURL: "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=1"}, "connect to postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = dir
			s, err := storage.Open(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

func TestBlobURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{"mem://", "file://" + filepath.ToSlash(filepath.Join(dir, "bucket")), ""} {
		t.Run("url="+u, func(t *testing.T) {
			s, err := storage.Open(ctx, storage.Config{DataDir: t.TempDir(), BlobURL: u})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Bucket.WriteAll(ctx, "user-1/a.txt", []byte("hello"), nil); err != nil {
				t.Fatal(err)
			}
			got, err := s.Bucket.ReadAll(ctx, "user-1/a.txt")
			if err != nil || !bytes.Equal(got, []byte("hello")) {
				t.Fatalf("read back %q, %v", got, err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "bucket", "user-1", "a.txt")); err != nil {
		t.Fatalf("file:// bucket did not write under its directory: %v", err)
	}
}

type kvDoc struct {
	Key   string `docstore:"key"`
	Value string
}

func TestKVURLs(t *testing.T) {
	ctx := context.Background()
	t.Run("mem", func(t *testing.T) {
		s, err := storage.Open(ctx, storage.Config{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.KV.Put(ctx, &kvDoc{Key: "user-1:cache", Value: "v"}); err != nil {
			t.Fatal(err)
		}
		got := kvDoc{Key: "user-1:cache"}
		if err := s.KV.Get(ctx, &got); err != nil || got.Value != "v" {
			t.Fatalf("get = %+v, %v", got, err)
		}
	})
	t.Run("file survives a clean restart", func(t *testing.T) {
		cfg := storage.Config{DataDir: t.TempDir()}
		cfg.KVURL = "file://" + filepath.ToSlash(filepath.Join(cfg.DataDir, "kv.json"))
		s, err := storage.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.KV.Put(ctx, &kvDoc{Key: "k", Value: "kept"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = storage.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got := kvDoc{Key: "k"}
		if err := s.KV.Get(ctx, &got); err != nil || got.Value != "kept" {
			t.Fatalf("after restart get = %+v, %v", got, err)
		}
		missing := kvDoc{Key: "absent"}
		if err := s.KV.Get(ctx, &missing); err == nil {
			t.Fatal("get of a missing key succeeded")
		}
	})
}

func TestQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := storage.Open(ctx, storage.Config{DataDir: t.TempDir(), QueueURL: "mem://contract-queue"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Topic.Send(ctx, &pubsub.Message{Body: []byte("job-1"), Metadata: map[string]string{"kind": "mail"}}); err != nil {
		t.Fatal(err)
	}
	msg, err := s.Subscription.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg.Ack()
	if string(msg.Body) != "job-1" || msg.Metadata["kind"] != "mail" {
		t.Fatalf("received %q %v", msg.Body, msg.Metadata)
	}
}

func TestKeeperSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.Keeper.Encrypt(ctx, []byte("api key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, storage.KeeperKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Fatalf("keeper key mode %v, want 0600", perm)
	}

	// "base64key://" with no key means the same kept key, not a random one.
	s, err = storage.Open(ctx, storage.Config{DataDir: dir, KeeperURL: "base64key://"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plain, err := s.Keeper.Decrypt(ctx, sealed)
	if err != nil {
		t.Fatalf("decrypt after restart: %v", err)
	}
	if string(plain) != "api key" {
		t.Fatalf("decrypted %q", plain)
	}

	other, err := storage.Open(ctx, storage.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Keeper.Decrypt(ctx, sealed); err == nil {
		t.Fatal("another installation's key decrypted the value")
	}
}

func TestKeeperKeyCreatedOnceUnderRace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var wg sync.WaitGroup
	stores := make([]*storage.Store, 4)
	for i := range stores {
		wg.Go(func() {
			s, err := storage.Open(ctx, storage.Config{DataDir: dir, DatabaseURL: "sqlite://" + filepath.Join(dir, fmt.Sprintf("db%d.sqlite", i))})
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	sealed, err := stores[0].Keeper.Encrypt(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range stores {
		if _, err := s.Keeper.Decrypt(ctx, sealed); err != nil {
			t.Errorf("store %d has another key: %v", i, err)
		}
		s.Close()
	}
}
