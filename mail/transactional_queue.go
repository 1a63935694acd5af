package mail

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// mailQueue hands messages to a Mailer from a background worker, so a
// request never waits on (or reveals by its timing) a mail server, and a
// failed delivery is retried with backoff.
//
// The queue lives in memory: messages still queued when the process dies
// are lost. Every message it carries is a link the person can ask for again
// (a new verification or reset link), so this trades durability for not
// holding the request.
type mailQueue struct {
	mailer   Mailer
	log      *slog.Logger
	ch       chan TransactionalMessage
	attempts int
	backoff  time.Duration

	stopOnce sync.Once
	stop     context.CancelFunc
	ctx      context.Context
	done     chan struct{}
	mu       sync.RWMutex
	closed   bool
}

// Mail queue limits.
const (
	mailQueueSize     = 1024
	mailAttempts      = 5
	mailFirstBackoff  = 2 * time.Second
	mailAttemptBudget = time.Minute
)

func newMailQueue(m Mailer, log *slog.Logger) *mailQueue {
	ctx, cancel := context.WithCancel(context.Background())
	q := &mailQueue{
		mailer: m, log: log, ch: make(chan TransactionalMessage, mailQueueSize),
		attempts: mailAttempts, backoff: mailFirstBackoff,
		ctx: ctx, stop: cancel, done: make(chan struct{}),
	}
	go q.run()
	return q
}

// enqueue queues msg. It never blocks: when the queue is full or closed
// the message is dropped and logged.
func (q *mailQueue) enqueue(ctx context.Context, msg TransactionalMessage) {
	if _, err := msg.validate(); err != nil {
		q.log.ErrorContext(ctx, "mail: mail not queued", "err", err)
		return
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.log.ErrorContext(ctx, "mail: mail dropped: shutting down", "to", msg.To, "subject", msg.Subject)
		return
	}
	select {
	case q.ch <- msg:
	default:
		q.log.ErrorContext(ctx, "mail: mail dropped: queue full", "to", msg.To, "subject", msg.Subject)
	}
}

func (q *mailQueue) run() {
	defer close(q.done)
	for msg := range q.ch {
		if q.ctx.Err() != nil {
			q.log.Error("mail: mail dropped: shutdown deadline passed", "to", msg.To, "subject", msg.Subject)
			continue
		}
		q.deliver(msg)
	}
}

// deliver tries msg up to q.attempts times, doubling the wait between
// attempts. Once the shutdown deadline has passed it gives up at once.
func (q *mailQueue) deliver(msg TransactionalMessage) {
	wait := q.backoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(q.ctx, mailAttemptBudget)
		err := q.mailer.Send(ctx, msg)
		cancel()
		if err == nil {
			return
		}
		if errors.Is(err, ErrInvalidMessage) || attempt >= q.attempts || q.ctx.Err() != nil {
			q.log.Error("mail: mail not delivered", "to", msg.To, "subject", msg.Subject, "attempts", attempt, "err", err)
			return
		}
		q.log.Warn("mail: mail delivery failed; retrying", "to", msg.To, "attempt", attempt, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-q.ctx.Done():
			t.Stop()
		}
		wait *= 2
	}
}

// close stops accepting mail and waits until the queued messages are
// handed over or ctx ends; then the send in hand is abandoned and the rest
// are dropped (and logged).
func (q *mailQueue) close(ctx context.Context) error {
	q.stopOnce.Do(func() {
		q.mu.Lock()
		q.closed = true
		close(q.ch)
		q.mu.Unlock()
	})
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		q.stop()
		<-q.done
		return ctx.Err()
	}
}
