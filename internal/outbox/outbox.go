// Package outbox delivers work that must happen after a commit — mail,
// events — without losing it: the work is written to the outbox table in
// the same transaction as the change that needs it, so it exists exactly
// when the change does. A relay then publishes due rows to the queue and a
// consumer runs the topic's handler; a row is deleted once handled and
// retried with backoff until then. Delivery is at least once: a handler
// may run twice if a process dies between its success and the row's
// deletion, so handlers should be idempotent or harmless to repeat.
//
// Every replica may run a Relay: a row is claimed for one attempt by an
// UPDATE that moves its next attempt into the future, and a delivered
// message whose row is gone (handled by another replica) is skipped.
//
// A relay handles topics side by side, at most TopicConcurrency rows of
// one topic at a time: a topic whose handler is slow (a webhook target
// answering at its timeout) never holds up the mail or other topics.
package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/pubsub"

	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
)

// Handler does one topic's work with a payload. An error retries it later.
// It is an alias, so that the handler maps of the domains that feed the
// relay (jobs, mail) are the relay's own.
type Handler = func(ctx context.Context, payload []byte) error

type row struct {
	bun.BaseModel `bun:"table:outbox"`
	ID            int64      `bun:"id,pk,autoincrement"`
	Topic         string     `bun:"topic,notnull"`
	KeyID         int64      `bun:"key_id,notnull"`
	Payload       string     `bun:"payload,notnull"`
	Attempts      int        `bun:"attempts,notnull"`
	NextAttemptAt time.Time  `bun:"next_attempt_at,notnull"`
	LastError     string     `bun:"last_error,notnull"`
	DeadAt        *time.Time `bun:"dead_at"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	UserID        *int64     `bun:"user_id"`
}

// Defaults of a Relay.
const (
	DefaultMaxAttempts = 8
	DefaultPoll        = 500 * time.Millisecond
	// claimLease is how long a published row waits for its handler before
	// the relay publishes it again (a message lost with a crashed process).
	claimLease = 2 * time.Minute
	batch      = 50
	// TopicConcurrency is how many rows of one topic a relay handles at
	// once. Topics run side by side: a slow handler (a webhook target
	// taking its full timeout) holds only its own topic's slots, never
	// the mail or the other jobs behind it.
	TopicConcurrency = 4
	// topicBacklog bounds the messages of one topic waiting for a slot;
	// past it a message is set aside (its row is published again when
	// its claim's lease ends), so a stalled topic costs bounded memory.
	topicBacklog = 64
)

// Outbox writes rows. It is safe for concurrent use.
type Outbox struct {
	ring *envelope.Ring
	now  func() time.Time
}

// New returns an Outbox sealing payloads with ring.
func New(ring *envelope.Ring) *Outbox {
	return &Outbox{ring: ring, now: func() time.Time { return time.Now().UTC() }}
}

func additionalData(topic string) string { return "outbox:" + topic }

// Add records work for topic inside db, which should be the transaction of
// the change that needs the work.
func (o *Outbox) Add(ctx context.Context, db bun.IDB, topic string, payload []byte) error {
	return o.AddOwned(ctx, db, topic, 0, payload)
}

// AddOwned is Add for work that concerns one user: ownerID (users.id) is
// recorded in the row's owner column, so the account's export lists the
// row and its deletion removes it. Zero means no owner.
func (o *Outbox) AddOwned(ctx context.Context, db bun.IDB, topic string, ownerID int64, payload []byte) error {
	keyID, sealed, err := o.ring.Seal(additionalData(topic), payload)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	now := o.now()
	r := &row{Topic: topic, KeyID: keyID, Payload: sealed, NextAttemptAt: now, CreatedAt: now}
	if ownerID != 0 {
		r.UserID = &ownerID
	}
	if _, err := db.NewInsert().Model(r).Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("outbox: add %s: %w", topic, err)
	}
	return nil
}

// Relay publishes due rows and runs their handlers.
type Relay struct {
	store       *storage.Store
	ring        *envelope.Ring
	log         *slog.Logger
	handlers    map[string]Handler
	MaxAttempts int
	Poll        time.Duration
	// OnAttempt, when set, is told the outcome of each handled row:
	// "delivered", "retried" (will run again) or "dead" (given up). Metrics
	// hang off it.
	OnAttempt func(topic, outcome string)
	now       func() time.Time

	mu      sync.Mutex
	lanes   map[string]*lane
	pending map[int64]bool // rows received and not yet handled
}

// lane is one topic's handling slots and its waiting count.
type lane struct {
	slots   chan struct{}
	waiting int
}

// NewRelay returns a relay for the store's outbox, queue and handlers.
func NewRelay(store *storage.Store, ring *envelope.Ring, log *slog.Logger, handlers map[string]Handler) *Relay {
	if log == nil {
		log = slog.Default()
	}
	return &Relay{store: store, ring: ring, log: log, handlers: handlers,
		MaxAttempts: DefaultMaxAttempts, Poll: DefaultPoll, now: func() time.Time { return time.Now().UTC() },
		lanes: map[string]*lane{}, pending: map[int64]bool{}}
}

// admit reserves a place for row id of topic; false when the row is
// already waiting or being handled here (published again after its lease)
// or the topic's backlog is full.
func (r *Relay) admit(topic string, id int64) (*lane, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lanes == nil {
		r.lanes, r.pending = map[string]*lane{}, map[int64]bool{}
	}
	l := r.lanes[topic]
	if l == nil {
		l = &lane{slots: make(chan struct{}, TopicConcurrency)}
		r.lanes[topic] = l
	}
	if r.pending[id] || l.waiting >= topicBacklog+TopicConcurrency {
		return nil, false
	}
	r.pending[id] = true
	l.waiting++
	return l, true
}

func (r *Relay) release(l *lane, id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, id)
	l.waiting--
}

// Run publishes and consumes until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(r.Poll)
		defer t.Stop()
		for {
			if _, err := r.Publish(ctx); err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "outbox: publish", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	wg.Go(func() {
		for {
			msg, err := r.store.Subscription.Receive(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.log.ErrorContext(ctx, "outbox: receive", "err", err)
				}
				return
			}
			id, err := strconv.ParseInt(string(msg.Body), 10, 64)
			if err != nil {
				r.Handle(ctx, msg) // logs and acknowledges it
				continue
			}
			topic := msg.Metadata["outbox-topic"]
			l, ok := r.admit(topic, id)
			if !ok {
				msg.Ack()
				continue
			}
			wg.Go(func() {
				defer r.release(l, id)
				select {
				case l.slots <- struct{}{}:
				case <-ctx.Done():
					msg.Ack() // the row is published again after its lease
					return
				}
				defer func() { <-l.slots }()
				r.Handle(ctx, msg)
			})
		}
	})
	wg.Wait()
}

// Publish claims the due rows (for one lease) and sends each to the queue.
// It returns how many it sent.
func (r *Relay) Publish(ctx context.Context) (int, error) {
	now := r.now()
	// A read first: an idle outbox costs no write lock.
	due, err := r.store.Reader.NewSelect().Model((*row)(nil)).
		Where("next_attempt_at <= ? AND dead_at IS NULL", now).Limit(1).Exists(ctx)
	if err != nil || !due {
		return 0, err
	}
	var claimed []row
	err = r.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		due := tx.NewSelect().Model((*row)(nil)).Column("id").
			Where("next_attempt_at <= ? AND dead_at IS NULL", now).Order("id").Limit(batch)
		if r.store.Dialect() == storage.Postgres {
			due = due.For("UPDATE SKIP LOCKED") // replicas claim different rows
		}
		// The outer condition is checked again against a row another
		// replica claimed meanwhile (PostgreSQL re-reads it after the
		// lock), so each row is claimed once per lease.
		_, err := tx.NewUpdate().Model((*row)(nil)).
			Set("next_attempt_at = ?", now.Add(claimLease)).
			Where("id IN (?)", due).Where("next_attempt_at <= ?", now).
			Returning("id, topic").Exec(ctx, &claimed)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: claim: %w", err)
	}
	for i, c := range claimed {
		err := r.store.Topic.Send(ctx, &pubsub.Message{
			Body:     []byte(strconv.FormatInt(c.ID, 10)),
			Metadata: map[string]string{"outbox-topic": c.Topic},
		})
		if err != nil {
			// The rest stay claimed until the lease ends, then go again.
			return i, fmt.Errorf("outbox: publish %d: %w", c.ID, err)
		}
	}
	return len(claimed), nil
}

// Counts reports the rows waiting (queued, including those being retried)
// and given up (dead), for metrics.
func Counts(ctx context.Context, db bun.IDB) (queued, dead int, err error) {
	err = db.NewSelect().Model((*row)(nil)).
		ColumnExpr("COALESCE(SUM(CASE WHEN dead_at IS NULL THEN 1 ELSE 0 END), 0)").
		ColumnExpr("COALESCE(SUM(CASE WHEN dead_at IS NULL THEN 0 ELSE 1 END), 0)").
		Scan(ctx, &queued, &dead)
	return queued, dead, err
}

// Handle runs the handler of one queue message and acknowledges it. The
// row decides everything: a message whose row is gone was handled already
// (a duplicate) and is skipped.
func (r *Relay) Handle(ctx context.Context, msg *pubsub.Message) {
	defer msg.Ack()
	id, err := strconv.ParseInt(string(msg.Body), 10, 64)
	if err != nil {
		r.log.ErrorContext(ctx, "outbox: a message that is not an outbox id", "body_len", len(msg.Body))
		return
	}
	var rw row
	err = r.store.DB.NewSelect().Model(&rw).Where("id = ? AND dead_at IS NULL", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return
	}
	if err != nil {
		r.log.ErrorContext(ctx, "outbox: load", "id", id, "err", err)
		return // the lease runs out and the row is published again
	}
	herr := r.run(ctx, rw)
	outcome := "delivered"
	defer func() {
		if r.OnAttempt != nil {
			r.OnAttempt(rw.Topic, outcome)
		}
	}()
	if herr == nil {
		if _, err := r.store.DB.NewDelete().Model((*row)(nil)).Where("id = ?", id).Exec(ctx); err != nil {
			r.log.ErrorContext(ctx, "outbox: delete handled row (it will run again)", "id", id, "err", err)
		}
		return
	}
	attempts := rw.Attempts + 1
	q := r.store.DB.NewUpdate().Model((*row)(nil)).Set("attempts = ?", attempts).Set("last_error = ?", truncate(herr.Error())).Where("id = ?", id)
	outcome = "retried"
	if attempts >= r.MaxAttempts {
		outcome = "dead"
		q = q.Set("dead_at = ?", r.now())
		r.log.ErrorContext(ctx, "outbox: giving up", "id", id, "topic", rw.Topic, "attempts", attempts, "err", herr)
	} else {
		wait := backoff(attempts)
		q = q.Set("next_attempt_at = ?", r.now().Add(wait))
		r.log.WarnContext(ctx, "outbox: attempt failed; will retry", "id", id, "topic", rw.Topic, "attempt", attempts, "retry_in", wait, "err", herr)
	}
	if _, err := q.Exec(ctx); err != nil {
		r.log.ErrorContext(ctx, "outbox: record attempt", "id", id, "err", err)
	}
}

func (r *Relay) run(ctx context.Context, rw row) (err error) {
	h, ok := r.handlers[rw.Topic]
	if !ok {
		return fmt.Errorf("no handler for topic %q", rw.Topic)
	}
	payload, err := r.ring.Open(ctx, rw.KeyID, rw.Payload, additionalData(rw.Topic))
	if err != nil {
		return err
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler panic: %v", v)
		}
	}()
	return h(ctx, payload)
}

// PurgeDead removes rows that gave up (dead letters) more than olderThan
// ago, and returns how many it removed.
func PurgeDead(ctx context.Context, db bun.IDB, olderThan time.Duration) (int64, error) {
	res, err := db.NewDelete().Model((*row)(nil)).
		Where("dead_at IS NOT NULL AND dead_at < ?", time.Now().UTC().Add(-olderThan)).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox: purge dead rows: %w", err)
	}
	return res.RowsAffected()
}

// backoff is 2 s doubled per attempt, at most an hour.
func backoff(attempts int) time.Duration {
	d := 2 * time.Second << min(attempts-1, 11)
	return min(d, time.Hour)
}

func truncate(s string) string {
	if len(s) > 500 {
		return s[:500]
	}
	return s
}
