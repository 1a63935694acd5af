package outbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"gocloud.dev/pubsub"

	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type fixture struct {
	s     *storage.Store
	box   *Outbox
	relay *Relay
	clock time.Time
	mu    sync.Mutex
	got   []string
	fail  int // the next fail calls of the handler fail
}

func newFixture(t *testing.T, s *storage.Store) *fixture {
	t.Helper()
	ring, err := envelope.Open(context.Background(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{s: s, box: New(ring), clock: time.Now().UTC()}
	f.relay = NewRelay(s, ring, slog.New(slog.NewTextHandler(io.Discard, nil)), map[string]Handler{"mail": func(_ context.Context, p []byte) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.fail > 0 {
			f.fail--
			return errors.New("smtp: connection refused")
		}
		f.got = append(f.got, string(p))
		return nil
	}})
	f.relay.now = func() time.Time { return f.clock }
	f.box.now = f.relay.now
	return f
}

// deliver publishes what is due and handles every message that arrives.
func (f *fixture) deliver(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	n, err := f.relay.Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := f.s.Subscription.Receive(rctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		f.relay.Handle(ctx, msg)
	}
	return n
}

func (f *fixture) delivered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

func (f *fixture) rows(t *testing.T) []row {
	t.Helper()
	var rs []row
	if err := f.s.DB.NewSelect().Model(&rs).Order("id").Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestWorkExistsExactlyWhenItsChangeDoes(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := newFixture(t, s)
		// Rolled back with its change: never delivered.
		err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			if err := f.box.Add(ctx, tx, "mail", []byte("lost link")); err != nil {
				return err
			}
			return errors.New("the change failed")
		})
		if err == nil {
			t.Fatal("the transaction committed")
		}
		if err := s.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			return f.box.Add(ctx, tx, "mail", []byte("https://example.com/verify?token=secret-token"))
		}); err != nil {
			t.Fatal(err)
		}
		rs := f.rows(t)
		if len(rs) != 1 || strings.Contains(rs[0].Payload, "secret-token") {
			t.Fatalf("outbox rows %+v: want one, sealed", rs)
		}
		if n := f.deliver(t); n != 1 {
			t.Fatalf("published %d", n)
		}
		if got := f.delivered(); len(got) != 1 || got[0] != "https://example.com/verify?token=secret-token" {
			t.Fatalf("delivered %q", got)
		}
		if rs := f.rows(t); len(rs) != 0 {
			t.Fatalf("handled row kept: %+v", rs)
		}
		// An idle outbox publishes nothing.
		if n := f.deliver(t); n != 0 {
			t.Fatalf("published %d from an empty outbox", n)
		}
	})
}

func TestRetriesThenGivesUp(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := newFixture(t, s)
		f.relay.MaxAttempts = 3
		var outcomes []string
		var mu sync.Mutex
		f.relay.OnAttempt = func(topic, outcome string) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, topic+":"+outcome)
		}
		if err := f.box.Add(ctx, s.DB, "mail", []byte("m1")); err != nil {
			t.Fatal(err)
		}
		f.fail = 1
		f.deliver(t)
		rs := f.rows(t)
		if len(rs) != 1 || rs[0].Attempts != 1 || !strings.Contains(rs[0].LastError, "connection refused") || !rs[0].NextAttemptAt.After(f.clock) {
			t.Fatalf("after a failure: %+v", rs)
		}
		// Not due yet: nothing goes out; once due, it is delivered.
		if n := f.deliver(t); n != 0 {
			t.Fatalf("retried before its time: %d", n)
		}
		f.clock = f.clock.Add(time.Minute)
		f.deliver(t)
		if got := f.delivered(); len(got) != 1 || len(f.rows(t)) != 0 {
			t.Fatalf("after the retry: delivered %q, rows %d", got, len(f.rows(t)))
		}

		// A message that always fails ends dead, kept for the operator.
		if err := f.box.Add(ctx, s.DB, "mail", []byte("m2")); err != nil {
			t.Fatal(err)
		}
		f.fail = 100
		for range 5 {
			f.clock = f.clock.Add(2 * time.Hour)
			f.deliver(t)
		}
		rs = f.rows(t)
		if len(rs) != 1 || rs[0].DeadAt == nil || rs[0].Attempts != 3 {
			t.Fatalf("after every attempt failed: %+v", rs)
		}
		// The metrics hook saw each outcome.
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"mail:retried", "mail:delivered", "mail:retried", "mail:retried", "mail:dead"}; !slices.Equal(outcomes, want) {
			t.Fatalf("OnAttempt saw %v, want %v", outcomes, want)
		}
	})
}

func TestDuplicatesAndRacingRelays(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := newFixture(t, s)
		const n = 40
		for i := range n {
			if err := f.box.Add(ctx, s.DB, "mail", []byte{byte('a' + i%26)}); err != nil {
				t.Fatal(err)
			}
		}
		// Two relays (replicas) claim at once: every row goes out once.
		var wg sync.WaitGroup
		counts := make([]int, 2)
		for i := range counts {
			wg.Go(func() {
				c, err := f.relay.Publish(ctx)
				if err != nil {
					t.Error(err)
				}
				counts[i] = c
			})
		}
		wg.Wait()
		if counts[0]+counts[1] != n {
			t.Fatalf("published %v, want %d in all", counts, n)
		}
		var msgs []*pubsub.Message
		for range n {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			msg, err := s.Subscription.Receive(rctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, msg)
		}
		for _, m := range msgs {
			f.relay.Handle(ctx, m)
		}
		// A duplicate of a handled message (the queue redelivered it) is skipped.
		if err := s.Topic.Send(ctx, &pubsub.Message{Body: msgs[0].Body}); err != nil {
			t.Fatal(err)
		}
		dup, err := s.Subscription.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f.relay.Handle(ctx, dup)
		if got := f.delivered(); len(got) != n {
			t.Fatalf("handled %d, want %d", len(got), n)
		}
	})
}

func TestRunDeliversInTheBackground(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFixture(t, s)
	f.relay.now = func() time.Time { return time.Now().UTC() }
	f.relay.Poll = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.relay.Run(ctx); close(done) }()
	if err := f.box.Add(ctx, s.DB, "mail", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(f.delivered()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := f.delivered(); len(got) != 1 || got[0] != "hello" {
		t.Fatalf("delivered %q", got)
	}
}

// A topic whose handler is stuck holds only its own slots: another topic's
// rows are handled meanwhile, and the stuck topic never runs more than
// TopicConcurrency handlers at once.
func TestRunTopicsDoNotWaitForEachOther(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFixture(t, s)
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	f.relay.handlers["slow"] = func(ctx context.Context, _ []byte) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	f.relay.now = func() time.Time { return time.Now().UTC() }
	f.relay.Poll = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.relay.Run(ctx); close(done) }()
	for range 3 * TopicConcurrency {
		if err := f.box.Add(ctx, s.DB, "slow", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.box.Add(ctx, s.DB, "mail", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(f.delivered()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := f.delivered()
	close(release)
	cancel()
	<-done
	if len(got) != 1 || got[0] != "hello" {
		t.Fatalf("mail behind a stuck topic: delivered %q", got)
	}
	if most > TopicConcurrency {
		t.Fatalf("%d handlers of one topic at once, at most %d", most, TopicConcurrency)
	}
}
