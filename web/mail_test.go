package web

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// scriptedMailer records messages; with block set, each Send waits for
// it to close (or for its context).
type scriptedMailer struct {
	block    chan struct{}
	mu       sync.Mutex
	attempts int
	sent     []Message
}

func (m *scriptedMailer) Send(ctx context.Context, msg Message) error {
	m.mu.Lock()
	m.attempts++
	m.mu.Unlock()
	if m.block != nil {
		select {
		case <-m.block:
		case <-ctx.Done():
			return ctx.Err()
		}
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

// With a real mailer, a request does not wait for the mail server: signup
// answers while the server is stuck, and the mail goes out afterwards.
func TestSignupDoesNotWaitForMail(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	m := &scriptedMailer{block: make(chan struct{})}
	h := newTestHandler(t, s, func(o *Options) { o.Mailer = m; o.DevRoutes = false })
	srv := serve(t, h)
	a := newBrowser(t, srv).post("/signup", url.Values{"email": {"q@example.com"}, "username": {"queue"}, "password": {testPassword}})
	expect(t, "signup", a, http.StatusOK, "Check your email")
	close(m.block)
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, sent := m.counts(); sent != 1 {
		t.Fatalf("%d messages sent, want 1", sent)
	}
}
