package mcp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// On a loopback connection only loopback names and the public host of
// BaseURL are accepted in Host (a reverse proxy on this machine keeps the
// public Host); another name is a DNS-rebinding attempt.
func TestRebindingProtection(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := New(Options{
		Registry: capabilities.NewRegistry(capabilities.Options{Logger: quiet}),
		Verifier: TokenVerifierFunc(nil), Loader: capabilities.CallerLoaderFunc(nil),
		BaseURL: "https://mcp.example.com", Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for host, want := range map[string]int{
		"mcp.example.com":      http.StatusUnauthorized, // reaches authentication
		"MCP.example.com:443":  http.StatusUnauthorized,
		"localhost:8080":       http.StatusUnauthorized,
		"127.0.0.1":            http.StatusUnauthorized,
		"[::1]:9000":           http.StatusUnauthorized,
		"evil.example":         http.StatusForbidden,
		"mcp.example.com.evil": http.StatusForbidden,
	} {
		req, _ := http.NewRequest("POST", ts.URL+Path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}
