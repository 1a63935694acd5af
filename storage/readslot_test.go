package storage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Turns on the read pool go to waiters in the order they came: with more
// waiters than connections none is passed over (database/sql alone hands a
// freed connection to a random waiter).
func TestReadSlotIsFirstComeFirstServed(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		var held []func()
		for {
			// Take every turn there is.
			sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			release, err := st.ReadSlot(sctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, release)
			if len(held) > 1000 {
				t.Fatal("the read pool has no bound")
			}
		}
		const waiters = 12
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Go(func() {
				release, err := st.ReadSlot(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				release()
			})
			time.Sleep(5 * time.Millisecond) // queue them in order
		}
		held[0]()
		wg.Wait()
		for _, r := range held[1:] {
			r()
		}
		for i, w := range order {
			if w != i {
				t.Fatalf("turns went in the order %v", order)
			}
		}
	})
}
