// Command events serves enclave with shared workspaces and an
// event-planning domain (speakers, sessions, a schedule): each workspace is
// one event its team plans together.
//
//	go run ./examples/events -addr 127.0.0.1:8080 -data-dir events-data
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/examples/events/events"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dataDir := flag.String("data-dir", "events-data", "data directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := enclave.New(ctx, enclave.Config{Addr: *addr, DataDir: *dataDir,
		Workspaces: &workspaces.Options{Schema: []migrations.Source{events.Schema}}})
	if err != nil {
		slog.Error("start", "err", err)
		os.Exit(1)
	}
	defer srv.Close()
	if srv.Store().Dialect() == storage.Postgres {
		if err := srv.Retention().Add(events.Retention()...); err != nil {
			slog.Error("register events", "err", err)
			os.Exit(1)
		}
	}
	if err := events.Register(srv.Workspaces()); err != nil {
		slog.Error("register events", "err", err)
		os.Exit(1)
	}
	if err := srv.Run(ctx); err != nil {
		slog.Error("serve", "err", err)
		os.Exit(1)
	}
}
