package mcpwire_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/internal/metrics"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/mcp/mcpwire"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// Wire connects the /mcp transport to the server's stores, accounts and
// authorization server, the way enclave.New does: a request without a
// token is refused with a pointer to the resource's metadata, and the
// refusal is counted in the metrics.
func ExampleWire() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mcpwire-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := storage.Open(ctx, storage.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := migrations.Apply(ctx, store.DB); err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	acc, err := accounts.New(ctx, store, accounts.Config{Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	const base = "http://localhost:8080"
	authz, err := oauth.New(ctx, oauth.Options{Store: store, BaseURL: base, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	ring, err := envelope.Open(ctx, store.DB, store.Keeper)
	if err != nil {
		log.Fatal(err)
	}
	bus := cluster.NewLocal()
	defer bus.Close()
	vocab, _ := capabilities.NewVocabulary()
	reg := capabilities.NewRegistry(capabilities.Options{Vocabulary: vocab, Logger: quiet})
	m := metrics.New()

	srv, stop, err := mcpwire.Wire(ctx, mcpwire.Config{Store: store, Ring: ring, Bus: bus, Registry: reg, Accounts: acc, OAuth: authz,
		Audit: audit.New(store, []byte("an audit key of thirty-two bytes"), quiet), Metrics: m,
		Bursts: func() *events.BurstPublisher { return nil }, BaseURL: base, Version: "v1.0.0", Name: "Example", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	defer srv.Close()
	fmt.Println("resource:", srv.Resource())

	req := httptest.NewRequest(http.MethodPost, mcp.Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer made-up")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	fmt.Println("made-up token:", rec.Code, strings.Contains(rec.Header().Get("WWW-Authenticate"), srv.ResourceMetadataURL()))

	body := httptest.NewRecorder()
	m.Handler().ServeHTTP(body, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fmt.Println("refusal counted:", strings.Contains(body.Body.String(), `reason="malformed"`))
	// Output:
	// resource: http://localhost:8080/mcp
	// made-up token: 401 true
	// refusal counted: true
}
