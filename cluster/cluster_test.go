package cluster_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// inbox collects what a subscriber receives.
type inbox struct {
	mu  sync.Mutex
	got []string
	ch  chan string
}

func newInbox() *inbox { return &inbox{ch: make(chan string, 100)} }

func (b *inbox) handler(topic string, payload []byte) {
	b.mu.Lock()
	b.got = append(b.got, topic+"="+string(payload))
	b.mu.Unlock()
	b.ch <- topic + "=" + string(payload)
}

func (b *inbox) want(t *testing.T, msg string) {
	t.Helper()
	select {
	case got := <-b.ch:
		if got != msg {
			t.Fatalf("received %q, want %q", got, msg)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no message; want %q", msg)
	}
}

func (b *inbox) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-b.ch:
		t.Fatalf("unexpected message %q", got)
	case <-time.After(d):
	}
}

func TestLocalBus(t *testing.T) {
	b := cluster.NewLocal()
	defer b.Close()
	in := newInbox()
	cancel := b.Subscribe("user.changed", in.handler)
	other := newInbox()
	defer b.Subscribe("other", other.handler)()
	if err := b.Publish(context.Background(), "user.changed", []byte("u1")); err != nil {
		t.Fatal(err)
	}
	in.want(t, "user.changed=u1") // delivered before Publish returned
	cancel()
	if err := b.Publish(context.Background(), "user.changed", []byte("u2")); err != nil {
		t.Fatal(err)
	}
	in.none(t, 20*time.Millisecond)
	other.none(t, 0)
	if !b.Healthy() {
		t.Fatal("local bus is always healthy")
	}
}

func TestPublishRefusesLargePayloadsAndBadTopics(t *testing.T) {
	b := cluster.NewLocal()
	err := b.Publish(context.Background(), "t", make([]byte, cluster.MaxPayload+1))
	if !errors.Is(err, cluster.ErrPayloadTooLarge) {
		t.Fatalf("oversized payload: %v", err)
	}
	if err := b.Publish(context.Background(), "t", make([]byte, cluster.MaxPayload)); err != nil {
		t.Fatalf("payload at the limit: %v", err)
	}
	for _, topic := range []string{"", "Upper", "has space", strings.Repeat("a", cluster.MaxTopic+1), "naïve"} {
		if err := b.Publish(context.Background(), topic, nil); err == nil {
			t.Errorf("topic %q accepted", topic)
		}
	}
	b.Close()
	if err := b.Publish(context.Background(), "t", nil); !errors.Is(err, cluster.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestOpenChoosesByURL(t *testing.T) {
	b, err := cluster.Open(context.Background(), cluster.OpenOptions{DatabaseURL: "sqlite:///tmp/x.db"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*cluster.Local); !ok {
		t.Fatalf("sqlite database: got %T, want the local bus", b)
	}
	if _, err := cluster.Open(context.Background(), cluster.OpenOptions{BusURL: "postgres", DatabaseURL: "sqlite:///tmp/x.db"}); err == nil {
		t.Fatal("postgres bus on an sqlite database accepted")
	}
	if _, err := cluster.Open(context.Background(), cluster.OpenOptions{BusURL: "redis://x"}); err == nil {
		t.Fatal("unknown bus URL accepted")
	}
}

func newPG(t *testing.T, url string) *cluster.Postgres {
	t.Helper()
	b, err := cluster.NewPostgres(context.Background(), cluster.PostgresOptions{DatabaseURL: url, PingInterval: 300 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestPostgresBusTwoReplicas(t *testing.T) {
	url := storagetest.PostgresSchemaURL(t)
	a, b := newPG(t, url), newPG(t, url)
	if o, err := cluster.Open(context.Background(), cluster.OpenOptions{DatabaseURL: url}); err != nil {
		t.Fatal(err)
	} else {
		if _, ok := o.(*cluster.Postgres); !ok {
			t.Fatalf("postgres database: got %T", o)
		}
		o.Close()
	}
	if a.Channel() == "enclave_bus" || a.Channel() != b.Channel() {
		t.Fatalf("channels %q %q: want one schema-specific channel", a.Channel(), b.Channel())
	}
	inA, inB := newInbox(), newInbox()
	a.Subscribe("roles", inA.handler)
	b.Subscribe("roles", inB.handler)
	if err := a.Publish(context.Background(), "roles", []byte("u-1")); err != nil {
		t.Fatal(err)
	}
	inA.want(t, "roles=u-1")
	inB.want(t, "roles=u-1")
	if err := b.Publish(context.Background(), "roles", []byte("u-2")); err != nil {
		t.Fatal(err)
	}
	inA.want(t, "roles=u-2")
	inB.want(t, "roles=u-2")
	// Each replica sees its own message exactly once.
	inA.none(t, 200*time.Millisecond)
	inB.none(t, 0)

	// Another schema (another deployment in the same database) hears nothing.
	c := newPG(t, storagetest.PostgresSchemaURL(t))
	inC := newInbox()
	c.Subscribe("roles", inC.handler)
	if err := a.Publish(context.Background(), "roles", []byte("u-3")); err != nil {
		t.Fatal(err)
	}
	inB.want(t, "roles=u-3")
	inC.none(t, 200*time.Millisecond)
}

func TestPostgresBusGapOnLostListener(t *testing.T) {
	url := storagetest.PostgresSchemaURL(t)
	a, b := newPG(t, url), newPG(t, url)
	gaps := make(chan bool, 10)
	b.OnGap(func() { gaps <- b.Healthy() })
	inB := newInbox()
	b.Subscribe("tokens", inB.handler)
	epoch := b.Epoch()

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pid := b.ListenerPID()
	if pid == 0 {
		t.Fatal("no listener pid")
	}
	if _, err := db.Exec("SELECT pg_terminate_backend($1)", int64(pid)); err != nil {
		t.Fatal(err)
	}
	// First the loss (unhealthy), then the recovery (healthy again).
	select {
	case healthy := <-gaps:
		if healthy {
			t.Fatal("first gap signal came with Healthy() true; want the loss first")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no gap signal after the listener was terminated")
	}
	// A message published while b was away may be lost: that is what the gap says.
	_ = a.Publish(context.Background(), "tokens", []byte("during"))
	select {
	case healthy := <-gaps:
		if !healthy {
			t.Fatal("second gap signal: want Healthy() true after reconnecting")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no recovery after the listener was terminated")
	}
	if b.Epoch() < epoch+2 {
		t.Fatalf("epoch %d -> %d: want two steps", epoch, b.Epoch())
	}
	if b.ListenerPID() == pid || b.ListenerPID() == 0 {
		t.Fatal("listener not replaced")
	}
	// Drain a possible "during" delivery, then messages flow again.
	for {
		if err := a.Publish(context.Background(), "tokens", []byte("after")); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-inB.ch:
			if got == "tokens=during" {
				continue
			}
			if got != "tokens=after" {
				t.Fatalf("got %q", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no message after recovery")
		}
		break
	}
}

func TestLoopbackGroup(t *testing.T) {
	g := cluster.NewLoopback()
	a, b := g.Join(), g.Join()
	if a.Node() == b.Node() {
		t.Fatal("members share a node id")
	}
	inA, inB := newInbox(), newInbox()
	a.Subscribe("x", inA.handler)
	b.Subscribe("x", inB.handler)
	gaps := 0
	b.OnGap(func() { gaps++ })
	a.Publish(context.Background(), "x", []byte("1"))
	inA.want(t, "x=1")
	inB.want(t, "x=1")
	b.Disconnect()
	a.Publish(context.Background(), "x", []byte("2"))
	inA.want(t, "x=2")
	inB.none(t, 10*time.Millisecond)
	if b.Healthy() || gaps != 1 {
		t.Fatalf("after Disconnect: healthy %v, gaps %d", b.Healthy(), gaps)
	}
	b.Reconnect()
	if !b.Healthy() || gaps != 2 {
		t.Fatalf("after Reconnect: healthy %v, gaps %d", b.Healthy(), gaps)
	}
	b.Publish(context.Background(), "x", []byte("3"))
	inA.want(t, "x=3")
	inB.want(t, "x=3")
}

// BenchmarkPostgresBusLatency measures publish-to-delivery on another
// replica's bus (one message in flight at a time).
func BenchmarkPostgresBusLatency(b *testing.B) {
	url := storagetest.PostgresSchemaURL(b)
	pub, err := cluster.NewPostgres(context.Background(), cluster.PostgresOptions{DatabaseURL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := cluster.NewPostgres(context.Background(), cluster.PostgresOptions{DatabaseURL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	got := make(chan struct{}, 1)
	sub.Subscribe("bench", func(string, []byte) { got <- struct{}{} })
	payload := []byte("0123456789abcdef0123456789abcdef")
	b.ResetTimer()
	for b.Loop() {
		if err := pub.Publish(context.Background(), "bench", payload); err != nil {
			b.Fatal(err)
		}
		<-got
	}
}
