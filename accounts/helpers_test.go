package accounts_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
)

// cheap keeps password hashing fast in tests that are not about its cost.
var cheap = accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newService returns a Service on s with cheap hashing and a fake clock,
// unless cfg says otherwise.
func newService(t testing.TB, s *storage.Store, cfg accounts.Config) (*accounts.Service, *clock) {
	t.Helper()
	c := newClock()
	if cfg.Argon2 == (accounts.Argon2Params{}) {
		cfg.Argon2 = cheap
	}
	if cfg.Now == nil {
		cfg.Now = c.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	svc, err := accounts.New(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc, c
}

const goodPassword = "correct horse battery staple"

// signup creates an account named name (email name@example.com) or fails t.
func signup(t testing.TB, svc *accounts.Service, name string) accounts.User {
	t.Helper()
	u, err := svc.Identity.Signup(context.Background(), accounts.SignupInput{Email: name + "@example.com", Username: name, Password: goodPassword})
	if err != nil {
		t.Fatalf("signup %s: %v", name, err)
	}
	return u
}
