package mail

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/uptrace/bun"
)

// fakeOutbox records the rows written to it.
type fakeOutbox struct {
	topics   []string
	payloads [][]byte
}

func (o *fakeOutbox) Add(_ context.Context, _ bun.IDB, topic string, payload []byte) error {
	o.topics, o.payloads = append(o.topics, topic), append(o.payloads, payload)
	return nil
}

func (o *fakeOutbox) AddOwned(ctx context.Context, db bun.IDB, topic string, _ int64, payload []byte) error {
	return o.Add(ctx, db, topic, payload)
}

// The transactional sender picks the path of each message: the outbox
// with a real mailer (the relay's handler then sends it), at once with a
// DevMailer, and never a message that cannot be sent.
func TestTransactionalPaths(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	msg := TransactionalMessage{To: "ann@example.com", Subject: "Verify", Text: "https://x.example/verify?token=t"}

	t.Run("outbox", func(t *testing.T) {
		ob, m := &fakeOutbox{}, &scriptedMailer{}
		tr := NewTransactional(TransactionalConfig{Mailer: m, Outbox: ob, Logger: quiet})
		if !tr.Durable() || tr.DevMail() != nil {
			t.Fatal("a real mailer with an outbox is durable")
		}
		if err := tr.SendInTx(t.Context(), nil, msg); err != nil {
			t.Fatal(err)
		}
		tr.SendNotice(t.Context(), nil, msg)
		if len(ob.topics) != 2 || ob.topics[0] != TransactionalTopic {
			t.Fatalf("outbox rows %v, want 2 of %q", ob.topics, TransactionalTopic)
		}
		if _, sent := m.counts(); sent != 0 {
			t.Fatal("sent before the relay ran")
		}
		if err := tr.Handler()(t.Context(), ob.payloads[0]); err != nil {
			t.Fatal(err)
		}
		if _, sent := m.counts(); sent != 1 || m.sent[0] != msg {
			t.Fatalf("relay sent %+v", m.sent)
		}
		var got TransactionalMessage
		if err := json.Unmarshal(ob.payloads[1], &got); err != nil || got != msg {
			t.Fatalf("payload %s: %v", ob.payloads[1], err)
		}
		bad := msg
		bad.Subject = "two\r\nBcc: x@evil.example"
		if err := tr.SendInTx(t.Context(), nil, bad); !errors.Is(err, ErrInvalidMessage) || len(ob.topics) != 2 {
			t.Fatalf("header injection: %v, %d rows", err, len(ob.topics))
		}
		if err := tr.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("development", func(t *testing.T) {
		ob := &fakeOutbox{}
		tr := NewTransactional(TransactionalConfig{Outbox: ob, Logger: quiet})
		if tr.Durable() || tr.DevMail() == nil || tr.RawSender() == nil {
			t.Fatal("without a mailer outside production: a DevMailer, kept at once")
		}
		if err := tr.SendInTx(t.Context(), nil, msg); err != nil {
			t.Fatal(err)
		}
		tr.SendNotice(t.Context(), nil, msg)
		if len(ob.topics) != 0 || len(tr.DevMail().Messages()) != 2 {
			t.Fatalf("%d outbox rows, %d kept", len(ob.topics), len(tr.DevMail().Messages()))
		}
		if k, ok := tr.DevMail().Last("ANN@example.com"); !ok || k.Subject != "Verify" {
			t.Fatalf("last %+v %v", k, ok)
		}
	})

	t.Run("production without a mailer", func(t *testing.T) {
		tr := NewTransactional(TransactionalConfig{Production: true, Logger: quiet})
		if tr.Mailer() != nil || tr.DevMail() != nil || tr.RawSender() != nil {
			t.Fatal("production never falls back to a development mailer")
		}
		tr.Send(t.Context(), msg) // logged, not a panic
		if err := tr.Handler()(t.Context(), []byte(`{"To":"a@example.com","Subject":"s","Text":"t"}`)); err == nil {
			t.Fatal("relay without a mailer succeeded")
		}
	})

	t.Run("queue", func(t *testing.T) {
		m := &scriptedMailer{}
		tr := NewTransactional(TransactionalConfig{Mailer: m, Logger: quiet})
		if tr.Durable() {
			t.Fatal("without an outbox the sender is not durable")
		}
		if err := tr.SendInTx(t.Context(), nil, msg); err != nil {
			t.Fatal(err)
		}
		if err := tr.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, sent := m.counts(); sent != 1 {
			t.Fatalf("%d sent, want 1", sent)
		}
	})
}
