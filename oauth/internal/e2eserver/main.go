// Command e2eserver runs a complete enclave server for end-to-end OAuth
// tests with clients written elsewhere (.ci/oauth-client.sh drives it with
// the official TypeScript SDK).
//
// It listens on a loopback port, creates two verified accounts and prints
// one JSON line with the base URL and the accounts' credentials. It serves
// until stdin closes or it gets SIGINT/SIGTERM.
//
// Login and consent are the web shell's own pages (fields email and
// password; buttons named decision), exactly as a person sees them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/rrproxy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2eserver:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data", "", "data directory (required; use a fresh temporary one)")
	databaseURL := flag.String("database-url", "", "database URL (default SQLite in the data directory)")
	replicas := flag.Int("replicas", 1, "serve this many replicas (each with its own pools and bus) on -database-url behind a round-robin proxy")
	flag.Parse()
	if *dataDir == "" {
		return errors.New("-data is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // a closed stdin (the driving script ended) stops the server
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	cfg := enclave.Config{
		BaseURL:     base,
		DataDir:     *dataDir,
		DatabaseURL: *databaseURL,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if *replicas > 1 {
		if !strings.HasPrefix(*databaseURL, "postgres") {
			return errors.New("-replicas needs a postgres:// -database-url")
		}
		return runReplicas(ctx, ln, cfg, *replicas)
	}
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := ready(ctx, srv, base, 1); err != nil {
		return err
	}
	return srv.Serve(ctx, ln)
}

// ready creates the accounts and prints the line the driving script waits
// for: the first account as email and password, a second one (to check
// that what the first saves stays its own) as email2 and password2, and
// the number of replicas behind baseURL.
func ready(ctx context.Context, srv *enclave.Server, base string, replicas int) error {
	users := []struct{ email, username, password string }{
		{"agent-owner@example.test", "agentowner", "correct horse battery staple"},
		{"second-user@example.test", "seconduser", "another horse battery staple"},
	}
	for _, u := range users {
		if _, _, err := srv.Accounts().CreateUser(ctx, accounts.CreateUserInput{
			Email: u.email, Username: u.username, Password: u.password, Verified: true,
		}); err != nil {
			return err
		}
	}
	line, _ := json.Marshal(map[string]any{
		"baseURL": base,
		"email":   users[0].email, "password": users[0].password,
		"email2": users[1].email, "password2": users[1].password,
		"replicas": replicas,
	})
	fmt.Println(string(line))
	return nil
}

// runReplicas serves n replicas of one configuration, each on a port of its
// own, behind a round-robin proxy on ln (no stickiness): every step of the
// OAuth flow and every MCP request may land on a different replica. They
// share cfg, so the data directory as well as the database: the blob
// bucket (package sources) and the keeper key are the same for all.
func runReplicas(ctx context.Context, ln net.Listener, cfg enclave.Config, n int) error {
	var backends []string
	var servers []*enclave.Server
	var listeners []net.Listener
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for range n {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv, err := enclave.New(ctx, cfg)
		if err != nil {
			rl.Close()
			return err
		}
		servers = append(servers, srv)
		listeners = append(listeners, rl)
		backends = append(backends, "http://"+rl.Addr().String())
	}
	proxy, err := rrproxy.New(backends)
	if err != nil {
		return err
	}
	front := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = front.Serve(ln) }()
	defer front.Close()
	errc := make(chan error, n)
	for i, srv := range servers {
		go func() { errc <- srv.Serve(ctx, listeners[i]) }()
	}
	if err := ready(ctx, servers[0], cfg.BaseURL, n); err != nil {
		return err
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}
