package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The suites' one builder of in-process servers. Suites that need a whole
// running server with real OAuth tokens use enclavetest.Start; the builder
// here is for tests of the assembled server that drive its handler
// directly (httptest recorders), stand a test verifier in for OAuth, or
// start and stop servers on one database themselves.

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastArgon makes password hashing cheap.
var fastArgon = accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}}

// serverConfig is the configuration newServer starts from: fresh storage
// of dialect d (a temporary SQLite file, or a schema of
// ENCLAVE_TEST_POSTGRES, dropped when t ends), a discarding logger and
// cheap password hashing, then the edits in order.
func serverConfig(t testing.TB, d storage.Dialect, edits ...func(*enclave.Config)) enclave.Config {
	t.Helper()
	sc := storagetest.Config(t, d)
	cfg := enclave.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, Logger: quiet(), Accounts: fastArgon}
	for _, edit := range edits {
		edit(&cfg)
	}
	return cfg
}

// newServer builds a server with enclave.New from serverConfig(t, d,
// edits...) and closes it when t ends. It does not listen: tests call its
// Handler, or use serveHTTP for a listener and a base URL.
func newServer(t testing.TB, d storage.Dialect, edits ...func(*enclave.Config)) *enclave.Server {
	t.Helper()
	return openServer(t, serverConfig(t, d, edits...))
}

// openServer builds a server from a complete configuration (a second
// server on the same storage, say) and closes it when t ends.
func openServer(t testing.TB, cfg enclave.Config) *enclave.Server {
	t.Helper()
	srv, err := enclave.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("enclave.New: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// newServerError is newServer for a configuration New must refuse: it
// returns New's error, failing the test if New succeeds.
func newServerError(t testing.TB, d storage.Dialect, edits ...func(*enclave.Config)) error {
	t.Helper()
	srv, err := enclave.New(context.Background(), serverConfig(t, d, edits...))
	if err == nil {
		srv.Close()
		t.Fatal("enclave.New succeeded")
	}
	return err
}

// serveHTTP is newServer behind an httptest server on loopback: the
// configuration's BaseURL is that server's URL, set before the edits run
// (an edit may read it), and both stop when t ends. It returns the server
// and its base URL.
func serveHTTP(t testing.TB, d storage.Dialect, edits ...func(*enclave.Config)) (*enclave.Server, string) {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	srv := newServer(t, d, append([]func(*enclave.Config){func(c *enclave.Config) { c.BaseURL = base }}, edits...)...)
	ts.Config.Handler = srv.Handler()
	ts.Start()
	t.Cleanup(ts.Close)
	return srv, base
}

// testVerifier accepts "test-token:<stable id>" for the server at *base:
// the MCP suites sign callers in without the OAuth flow.
func testVerifier(base *string) mcp.TokenVerifier {
	return mcp.TokenVerifierFunc(func(_ context.Context, token string) (mcp.TokenInfo, error) {
		sid, ok := strings.CutPrefix(token, "test-token:")
		if !ok {
			return mcp.TokenInfo{}, mcp.ErrInvalidToken
		}
		return mcp.TokenInfo{UserID: sid, Audience: []string{*base + "/mcp"}}, nil
	})
}

// readMessage reads an answer of /mcp and returns its JSON-RPC message
// (enclavetest.Message: a JSON body, or the last event of a stream).
func readMessage(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return enclavetest.Message(resp.Header.Get("Content-Type"), raw)
}
