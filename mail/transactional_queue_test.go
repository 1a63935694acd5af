package mail

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
)

// scriptedMailer fails its first fails sends, then records messages. With
// block set, each Send waits for it to close (or for its context).
type scriptedMailer struct {
	mu       sync.Mutex
	fails    int
	attempts int
	sent     []TransactionalMessage
	block    chan struct{}
	started  chan struct{}
}

func (m *scriptedMailer) Send(ctx context.Context, msg TransactionalMessage) error {
	m.mu.Lock()
	m.attempts++
	fail := m.attempts <= m.fails
	block, started := m.block, m.started
	m.mu.Unlock()
	if started != nil {
		select {
		case started <- struct{}{}:
		default:
		}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("421 try again later")
	}
	m.mu.Lock()
	m.sent = append(m.sent, msg)
	m.mu.Unlock()
	return nil
}

func (m *scriptedMailer) counts() (attempts, sent int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attempts, len(m.sent)
}

func TestMailQueue(t *testing.T) {
	msg := TransactionalMessage{To: "a@example.com", Subject: "s", Text: "t"}
	tests := []struct {
		name         string
		fails        int
		wantAttempts int
		wantSent     int
	}{
		{"first try", 0, 1, 1},
		{"retried until it works", 3, 4, 1},
		{"gives up after the last attempt", 100, mailAttempts, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &scriptedMailer{fails: tt.fails}
			q := newMailQueue(m, slog.New(slog.DiscardHandler))
			q.backoff = 0
			q.enqueue(t.Context(), msg)
			if err := q.close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if a, s := m.counts(); a != tt.wantAttempts || s != tt.wantSent {
				t.Fatalf("%d attempts, %d sent; want %d and %d", a, s, tt.wantAttempts, tt.wantSent)
			}
			q.enqueue(t.Context(), msg) // closed: dropped, no panic
			if a, _ := m.counts(); a != tt.wantAttempts {
				t.Fatal("a closed queue sent mail")
			}
		})
	}
	t.Run("shutdown deadline abandons the send in hand and drops the rest", func(t *testing.T) {
		m := &scriptedMailer{block: make(chan struct{}), started: make(chan struct{}, 1)}
		q := newMailQueue(m, slog.New(slog.DiscardHandler))
		q.enqueue(t.Context(), msg)
		q.enqueue(t.Context(), msg)
		<-m.started
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := q.close(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("close: %v", err)
		}
		if a, s := m.counts(); a != 1 || s != 0 {
			t.Fatalf("%d attempts, %d sent; want 1 abandoned attempt", a, s)
		}
	})
}
