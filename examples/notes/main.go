// Command notes serves enclave with a user-owned "notes" domain: notes with
// file attachments, exported and deleted with the account through the
// ownership inventory, with its own permission entity, a job and a schedule.
//
//	go run ./examples/notes -addr 127.0.0.1:8080 -data-dir notes-data
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/examples/notes/notes"
	"github.com/enclave-mcp/enclave/migrations"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	dataDir := flag.String("data-dir", "notes-data", "data directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := enclave.New(ctx, enclave.Config{Addr: *addr, DataDir: *dataDir,
		Migrations: []migrations.Source{notes.Migrations}, Vocabulary: notes.Vocabulary()})
	if err != nil {
		slog.Error("start", "err", err)
		os.Exit(1)
	}
	defer srv.Close()
	if _, err := notes.Register(srv); err != nil {
		slog.Error("register notes", "err", err)
		os.Exit(1)
	}
	if err := srv.Run(ctx); err != nil {
		slog.Error("serve", "err", err)
		os.Exit(1)
	}
}
