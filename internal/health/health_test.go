package health

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// A fresh database is not ready (its schema is behind), a migrated one
// is, and a draining server never is again; /readyz says which.
func TestReadiness(t *testing.T) {
	ctx := context.Background()
	store, err := storage.Open(ctx, storage.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &Probe{Store: store, Version: "v-test", Log: log}
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		p.Readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "migrations pending") {
		t.Fatalf("unmigrated: %d %s", code, body)
	}
	if err := migrations.ApplyAll(ctx, store.DB, nil, log); err != nil {
		t.Fatal(err)
	}
	p.at = p.at.AddDate(0, 0, -1) // past the shared second
	if code, body := readyz(); code != http.StatusOK || !strings.Contains(body, "v-test") {
		t.Fatalf("migrated: %d %s", code, body)
	}
	p.Drain()
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Fatalf("draining: %d %s", code, body)
	}
	rec := httptest.NewRecorder()
	p.Healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthz while draining: %d (liveness is not readiness)", rec.Code)
	}
}
