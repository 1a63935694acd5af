package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	"github.com/enclave-mcp/enclave/web"
)

func TestHealthz(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			srv := newServer(t, d)
			// Mounted under a prefix in an embedder's mux.
			mux := http.NewServeMux()
			mux.Handle("/enclave/", http.StripPrefix("/enclave", srv.Handler()))
			ts := httptest.NewServer(mux)
			defer ts.Close()

			req, _ := http.NewRequest("GET", ts.URL+"/enclave/healthz", nil)
			req.Header.Set("X-Request-Id", "probe-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
				t.Fatalf("healthz = %d %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("X-Request-Id"); got != "probe-1" {
				t.Fatalf("X-Request-Id = %q, want the incoming id echoed", got)
			}

			// The database stops answering: /healthz (liveness, no I/O) still
			// answers 200; /readyz is the probe that says 503.
			srv.Store().DB.Close()
			resp, err = http.Get(ts.URL + "/enclave/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("healthz with the database gone = %d, want 200 (liveness does no I/O)", resp.StatusCode)
			}
		})
	}
}

func TestRunShutsDownGracefully(t *testing.T) {
	srv := newServer(t, storage.SQLite)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve returned %v after its context ended", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Fatal("still serving after shutdown")
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  enclave.Config
		want string
	}{
		{"production needs https", enclave.Config{Production: true, BaseURL: "http://example.com"}, "https base URL"},
		{"production default base URL is http", enclave.Config{Production: true}, "https base URL"},
		{"production needs a mailer", enclave.Config{Production: true, BaseURL: "https://mcp.example.com"}, "no mailer"},
		{"production refuses MCP without authentication", enclave.Config{Production: true, BaseURL: "https://mcp.example.com", MCP: mcp.Options{Anonymous: &capabilities.Caller{UserID: "x"}}}, "refused in production"},
		{"base URL with a query", enclave.Config{BaseURL: "https://example.com/?x=1"}, "without query"},
		{"base URL without host", enclave.Config{BaseURL: "https:///path"}, "want http(s)"},
		{"not a URL scheme", enclave.Config{BaseURL: "ftp://example.com"}, "want http(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newServerError(t, storage.SQLite, func(c *enclave.Config) {
				tc.cfg.DataDir, tc.cfg.DatabaseURL, tc.cfg.Logger = c.DataDir, c.DatabaseURL, c.Logger
				*c = tc.cfg
			})
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
	mailer, err := web.NewSMTPMailer(web.SMTPConfig{Addr: "127.0.0.1:2525", From: "noreply@example.com", Security: web.SMTPPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.BaseURL, c.Production, c.Mailer = "https://mcp.example.com/", true, mailer })
	if got := srv.Config().BaseURL; got != "https://mcp.example.com" {
		t.Fatalf("BaseURL = %q, want the trailing slash trimmed", got)
	}
}
