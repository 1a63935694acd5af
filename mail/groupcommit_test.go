package mail

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Callers arriving while a batch commits are committed together in the
// next one; a caller whose statements fail is rolled back alone, and the
// others' rows are committed.
func TestGroupCommit(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := t.Context()
		if _, err := s.DB.ExecContext(ctx, "CREATE TABLE group_commit_test (n INTEGER NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		g := &groupCommit{store: s}
		insert := func(n int) func(context.Context, bun.Tx) error {
			return func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.NewRaw("INSERT INTO group_commit_test (n) VALUES (?)", n).Exec(ctx)
				return err
			}
		}
		// The first caller leads and holds its batch open until the others
		// are queued.
		release, started := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- g.run(ctx, func(ctx context.Context, tx bun.Tx) error {
				close(started)
				<-release
				return insert(0)(ctx, tx)
			})
		}()
		<-started
		boom := errors.New("boom")
		const others = 9
		errs := make([]error, others)
		var wg sync.WaitGroup
		for i := range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = g.run(ctx, func(ctx context.Context, tx bun.Tx) error {
					if err := insert(100+i)(ctx, tx); err != nil {
						return err
					}
					if i == 4 {
						return boom // after its insert: the savepoint undoes it
					}
					return nil
				})
			}()
		}
		for {
			g.mu.Lock()
			n := len(g.queue)
			g.mu.Unlock()
			if n == others {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, err := range errs {
			if (i == 4) != errors.Is(err, boom) || (i != 4 && err != nil) {
				t.Errorf("caller %d: %v", i, err)
			}
		}
		var got []int
		if err := s.DB.NewRaw("SELECT n FROM group_commit_test ORDER BY n").Scan(ctx, &got); err != nil {
			t.Fatal(err)
		}
		want := []int{0, 100, 101, 102, 103, 105, 106, 107, 108}
		if len(got) != len(want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("rows %v, want %v", got, want)
			}
		}
		if b := g.batches.Load(); b != 2 {
			t.Errorf("%d transactions for 10 callers, want 2 (one, then the nine queued behind it)", b)
		}
	})
}
