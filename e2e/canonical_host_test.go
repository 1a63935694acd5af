package e2e

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
)

// An IPv6 base URL without a port matches its Host with or without the
// default port.
func TestProductionIPv6BaseHost(t *testing.T) {
	mailer, err := web.NewSMTPMailer(web.SMTPConfig{Addr: "127.0.0.1:2525", From: "noreply@example.com", Security: web.SMTPPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.BaseURL, c.Production, c.Mailer = "https://[2001:db8::1]", true, mailer })
	for host, want := range map[string]int{"[2001:db8::1]": http.StatusOK, "[2001:db8::1]:443": http.StatusOK, "[2001:DB8::1]": http.StatusOK, "[2001:db8::2]": http.StatusNotFound, "[2001:db8::1]:8443": http.StatusNotFound} {
		req := httptest.NewRequest(http.MethodGet, "https://"+host+"/login", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("%s/login: %d, want %d", host, rec.Code, want)
		}
	}
}

// In production the web shell and the authorization server answer only
// under BaseURL's host: any other Host is 404, not cached. /mcp, /healthz
// and /readyz answer under any name.
func TestProductionRefusesOtherHosts(t *testing.T) {
	mailer, err := web.NewSMTPMailer(web.SMTPConfig{Addr: "127.0.0.1:2525", From: "noreply@example.com", Security: web.SMTPPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.BaseURL, c.Production, c.Mailer = "https://mcp.example.com", true, mailer })
	get := func(host, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "https://"+host+path, nil)
		req.Host = host
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	for _, host := range []string{"mcp.example.com", "MCP.example.com", "mcp.example.com.", "mcp.example.com:443"} {
		for _, path := range []string{"/login", "/.well-known/oauth-authorization-server"} {
			if rec := get(host, path); rec.Code != http.StatusOK {
				t.Errorf("%s%s: %d, want 200", host, path, rec.Code)
			}
		}
	}
	for _, host := range []string{"127.0.0.1", "10.0.0.7:8080", "mcp.example.com:8443", "evil.example", "mcp.example.com.evil.example"} {
		for _, path := range []string{"/login", "/", "/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/mcp", "/oauth/authorize", "/account/export.json"} {
			rec := get(host, path)
			if rec.Code != http.StatusNotFound || rec.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("%s%s: %d %q, want 404 no-store", host, path, rec.Code, rec.Header().Get("Cache-Control"))
			}
		}
		// Only the exact /mcp is exempt: under "/mcp/" the mux hands the
		// request to the web shell, which must not answer another name
		// (its 404 page, or a redirect out of an unclean path).
		for _, path := range []string{"/mcp/", "/mcp/x", "/mcp/../login", "/mcp/../.well-known/oauth-authorization-server", "/mcpx"} {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				req := httptest.NewRequest(method, "https://"+host+path, nil)
				req.Host = host
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, req)
				if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Security-Policy") != "" {
					t.Errorf("%s %s%s: %d (CSP %q), want the host check's 404", method, host, path, rec.Code, rec.Header().Get("Content-Security-Policy"))
				}
			}
		}
		if rec := get(host, "/healthz"); rec.Code != http.StatusOK {
			t.Errorf("%s/healthz: %d", host, rec.Code)
		}
		if rec := get(host, "/mcp"); rec.Code == http.StatusNotFound {
			t.Errorf("%s/mcp: 404 from the host check", host)
		}
	}
}
