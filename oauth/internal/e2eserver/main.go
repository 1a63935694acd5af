// Command e2eserver runs a complete enclave server for end-to-end OAuth
// tests with clients written elsewhere (.ci/oauth-client.sh drives it with
// the official TypeScript SDK).
//
// It listens on a loopback port, creates one verified account and prints
// one JSON line with the base URL and the account's credentials. It serves
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
	"os"
	"os/signal"
	"syscall"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2eserver:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data", "", "data directory (required; use a fresh temporary one)")
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
		BaseURL: base,
		DataDir: *dataDir,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	srv, err := enclave.New(ctx, cfg)
	if err != nil {
		return err
	}
	const email, password = "agent-owner@example.test", "correct horse battery staple"
	if _, _, err := srv.Accounts().CreateUser(ctx, accounts.CreateUserInput{
		Email: email, Username: "agentowner", Password: password, Verified: true,
	}); err != nil {
		return err
	}
	ready, _ := json.Marshal(map[string]string{"baseURL": base, "email": email, "password": password})
	fmt.Println(string(ready))
	return srv.Serve(ctx, ln)
}
