package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
)

// No path to the registration endpoint escapes its limit: a body that
// fails to parse is counted before it is read, and other methods, a
// trailing slash and CORS preflights never register a client.
func TestRegistrationLimitOnEveryPath(t *testing.T) {
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) {
		c.AllowedOrigins = []string{"https://app.example"}
		c.RegistrationLimit = web.Limit{Requests: 2, Window: time.Hour}
	})
	do := func(method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.RemoteAddr = "192.0.2.7:1000"
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	good := `{"client_name":"a","redirect_uris":["http://127.0.0.1:1234/cb"],"token_endpoint_auth_method":"none"}`
	for _, m := range []string{"GET", "HEAD", "PUT", "PATCH", "DELETE"} {
		for _, p := range []string{"/oauth/register", "/oauth/register/"} {
			if rec := do(m, p, good, nil); rec.Code == http.StatusCreated {
				t.Fatalf("%s %s registered a client", m, p)
			}
		}
	}
	if rec := do("POST", "/oauth/register/", good, nil); rec.Code == http.StatusCreated {
		t.Fatal("trailing slash registered a client")
	}
	if rec := do("POST", "/oauth//register", good, nil); rec.Code == http.StatusCreated {
		t.Fatal("double slash registered a client")
	}
	pre := do("OPTIONS", "/oauth/register", "", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
	if pre.Code == http.StatusCreated {
		t.Fatal("preflight registered a client")
	}
	// Two bad bodies use up the bucket: the limit counts before parsing.
	for _, bad := range []string{`{`, strings.Repeat("x", 1<<20)} {
		if rec := do("POST", "/oauth/register", bad, nil); rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("bad body: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := do("POST", "/oauth/register", good, map[string]string{"Origin": "https://app.example", "X-Forwarded-For": "198.51.100.9"}); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("after two bad bodies, with a forged forwarded address: %d %s", rec.Code, rec.Body)
	}
}
