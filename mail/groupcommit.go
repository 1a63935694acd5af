package mail

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// maxGroup bounds the deliveries committed in one transaction.
const maxGroup = 16

// groupCommit runs the write transactions of concurrent deliveries as one
// database transaction (a group commit): each delivery's statements run
// in a savepoint of their own, so one that fails is rolled back alone,
// and every caller returns only after the shared commit (or with its
// error). The first caller to find no batch running leads: it commits
// what is queued (its own work included) and hands the lead to the first
// caller still waiting, so no caller works for others after its own
// commit.
type groupCommit struct {
	store *storage.Store

	mu      sync.Mutex
	queue   []*groupJob
	running bool
	// batches counts the transactions run (tests).
	batches atomic.Int64
}

type groupJob struct {
	fn   func(ctx context.Context, tx bun.Tx) error
	err  error
	done chan struct{} // closed when fn's outcome is final
	lead chan struct{} // closed when this caller is to lead the next batch
}

// run runs fn in a transaction shared with other callers' and returns
// after its commit.
func (g *groupCommit) run(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	j := &groupJob{fn: fn, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, j)
	leader := !g.running
	g.running = true
	g.mu.Unlock()
	if !leader {
		select {
		case <-j.done:
			return j.err
		case <-j.lead:
		}
	}
	g.mu.Lock()
	n := min(len(g.queue), maxGroup)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	g.commit(ctx, batch)
	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].lead) // it is waiting: it leads the next batch
	} else {
		g.running = false
	}
	g.mu.Unlock()
	<-j.done // the leader's own job is in the batch it committed
	return j.err
}

// commit runs batch in one transaction, each job in a savepoint.
func (g *groupCommit) commit(ctx context.Context, batch []*groupJob) {
	// The callers wait for this commit: the leader's context ending must
	// not fail the others' deliveries.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	g.batches.Add(1)
	failed := make([]error, len(batch))
	err := g.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		for i, j := range batch {
			sp := fmt.Sprintf("delivery_%d", i)
			if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
				return err
			}
			if err := runJob(ctx, tx, j); err != nil {
				failed[i] = err
				if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
				return err
			}
		}
		return nil
	})
	for i, j := range batch {
		j.err = failed[i]
		if j.err == nil {
			j.err = err
		}
		close(j.done)
	}
}

// runJob runs one job's statements; a panic fails that job alone.
func runJob(ctx context.Context, tx bun.Tx, j *groupJob) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("mail: storing a delivery panicked: %v", r)
		}
	}()
	return j.fn(ctx, tx)
}
