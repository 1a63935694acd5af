package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/oauth"
)

// RevocationResult is how long a change made on one replica took to be
// enforced by another that had the caller cached.
type RevocationResult struct {
	N     int     `json:"n"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// measureRevocations runs two replicas (A and B) in this process on one
// PostgreSQL schema with the PostgreSQL bus, each on a loopback listener.
// For each of n users, a client of B calls echo until B serves it from its
// caller cache; then A takes the user's role (even users) or revokes every
// grant of the user (odd users), and the client calls B in a tight loop
// until B refuses. The time from the start of the change on A to B's
// first refusal is the propagation latency.
func measureRevocations(pg string, n int) (RevocationResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "enclave-bench-revoke-*")
	if err != nil {
		return RevocationResult{}, err
	}
	defer os.RemoveAll(dir)
	dbURL, drop, err := pgSchema(ctx, dir, pg)
	if err != nil {
		return RevocationResult{}, err
	}
	defer drop()
	lnA, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return RevocationResult{}, err
	}
	lnB, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lnA.Close()
		return RevocationResult{}, err
	}
	base := "http://" + lnA.Addr().String()
	login := newBenchLogin()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() (*enclave.Server, error) {
		srv, err := enclave.New(ctx, enclave.Config{
			Addr: lnA.Addr().String(), BaseURL: base, DataDir: dir, DatabaseURL: dbURL,
			OAuth:    oauth.Options{LoginConsent: login},
			Accounts: accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}},
			Logger:   quiet,
		})
		if err != nil {
			return nil, err
		}
		return srv, srv.Registry().Register(echoCapability())
	}
	a, err := open()
	if err != nil {
		return RevocationResult{}, err
	}
	defer a.Close()
	b, err := open()
	if err != nil {
		return RevocationResult{}, err
	}
	defer b.Close()
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range []struct {
		s  *enclave.Server
		ln net.Listener
	}{{a, lnA}, {b, lnB}} {
		wg.Go(func() { _ = p.s.Serve(sctx, p.ln) })
	}
	defer func() { stop(); wg.Wait() }()

	tokens, err := issueTokens(ctx, a.OAuth(), login, a.Accounts(), n)
	if err != nil {
		return RevocationResult{}, err
	}
	var lat []time.Duration
	for i, tok := range tokens {
		u, err := a.Accounts().Identity.UserByUsername(ctx, fmt.Sprintf("bench%d", i))
		if err != nil {
			return RevocationResult{}, err
		}
		c := &client{url: "http://" + lnB.Addr().String() + "/mcp", token: tok, n: i, http: &http.Client{Timeout: 10 * time.Second}}
		if err := c.initialize(ctx); err != nil {
			return RevocationResult{}, fmt.Errorf("user %d: %w", i, err)
		}
		for range 3 { // the first call fills B's cache
			if err := c.call(ctx); err != nil {
				return RevocationResult{}, fmt.Errorf("user %d: %w", i, err)
			}
		}
		t0 := time.Now()
		if i%2 == 0 {
			_, err = a.Accounts().Roles.RemoveRole(ctx, u.ID, capabilities.RoleUser)
		} else {
			err = a.OAuth().RevokeAll(ctx, u.ID)
		}
		if err != nil {
			return RevocationResult{}, err
		}
		for c.call(ctx) == nil {
			if time.Since(t0) > 10*time.Second {
				return RevocationResult{}, fmt.Errorf("user %d: still served by B 10 s after the change on A", i)
			}
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return RevocationResult{N: len(lat), P50ms: ms(pct(lat, 0.5)), P99ms: ms(pct(lat, 0.99)), MaxMs: ms(lat[len(lat)-1])}, nil
}
