// Command conformance serves, as ordinary registered capabilities,
// resources and prompts, everything the official MCP conformance suite
// (npm @modelcontextprotocol/conformance) exercises:
//
//	go run ./examples/conformance -addr 127.0.0.1:3001
//	conformance server --url http://127.0.0.1:3001/mcp
//
// It runs with authentication off, so it listens only on a loopback
// address.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mcp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3001", "loopback address to listen on")
	production := flag.Bool("production", os.Getenv("ENCLAVE_PRODUCTION") == "true" || os.Getenv("ENCLAVE_PRODUCTION") == "1",
		"production mode (also ENCLAVE_PRODUCTION): refused, since authentication is off")
	flag.StringVar(&replica.databaseURL, "database-url", "", "replica mode: a postgres:// database shared with the other replicas (see replica.go)")
	flag.StringVar(&replica.baseURL, "base-url", "", "replica mode: the proxy's URL, as the replicas' public URL (default http://<addr>)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *production, slog.Default()); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// replica is the configuration of replica mode (empty: one process).
var replica struct{ databaseURL, baseURL string }

func run(ctx context.Context, addr string, production bool, log *slog.Logger) error {
	if production {
		return errors.New("authentication is off, which is refused in production mode")
	}
	ln, err := listenLoopback(addr)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	if replica.baseURL != "" {
		base = replica.baseURL
	}
	handler, closeMCP, err := newHandler(ctx, base, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer closeMCP()
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving MCP conformance server", "url", "http://"+ln.Addr().String()+mcp.Path)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenLoopback refuses any address that is not loopback: authentication
// is off.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("addr %q: authentication is off, so only a loopback address is allowed", addr)
	}
	return net.Listen("tcp", addr)
}

// newHandler builds the registry and the MCP handler at mcp.Path.
func newHandler(ctx context.Context, baseURL string, log *slog.Logger) (http.Handler, func() error, error) {
	reg := capabilities.NewRegistry(capabilities.Options{
		Logger: log,
		// The suite calls its tools by snake_case names.
		Names: regexp.MustCompile(`^[a-z][a-zA-Z0-9_]{0,63}$`),
	})
	if err := register(reg); err != nil {
		return nil, nil, err
	}
	anonymous := capabilities.Caller{
		UserID: "conformance", Username: "conformance",
		Roles: []string{capabilities.RoleUser}, AllScopes: true,
		State: capabilities.AccountActive, Interactive: true,
	}
	opts := mcp.Options{
		Registry: reg, BaseURL: baseURL, Logger: log, Anonymous: &anonymous,
		Name: "enclave-conformance", Version: "1.0.0",
		// One process: its memory is enough to keep tasks.
		Tasks: mcp.MemoryTasks(),
	}
	closeShared := func() {}
	if replica.databaseURL != "" {
		c, err := replicaOptions(ctx, replica.databaseURL, &anonymous, &opts, log)
		if err != nil {
			return nil, nil, err
		}
		closeShared = c
	}
	srv, err := mcp.New(opts)
	if err != nil {
		closeShared()
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(mcp.Path, srv)
	return mux, func() error { err := srv.Close(); closeShared(); return err }, nil
}
