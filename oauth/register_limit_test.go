package oauth_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Open registration is limited per client network by the limiter and the
// client-address function passed in Options: an OAuth-style 429 with
// Retry-After, IPv6 grouped by /64; without a limiter there is no limit.
func TestRegistrationLimitOption(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		// The address comes from the function passed in (here a test
		// header), not from the TCP peer, which is loopback for every
		// request below.
		clientAddr := func(r *http.Request) netip.Addr {
			a, _ := netip.ParseAddr(r.Header.Get("X-Test-Client"))
			return a
		}
		e := newEnv(t, st, func(o *oauth.Options) {
			o.RegistrationLimiter = ratelimit.New(st, nil)
			o.RegistrationLimit = ratelimit.Limit{Requests: 2, Window: time.Hour}
			o.ClientAddr = clientAddr
		})
		register := func(client string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, e.ts.URL+oauth.PathRegister, strings.NewReader(`{"client_name":"a","redirect_uris":["http://127.0.0.1:1234/cb"],"token_endpoint_auth_method":"none"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Test-Client", client)
			resp, err := e.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			return resp
		}
		for i := range 2 {
			if resp := register("192.0.2.7"); resp.StatusCode != http.StatusCreated {
				t.Fatalf("registration %d: %d", i, resp.StatusCode)
			}
		}
		resp := register("192.0.2.7")
		var body strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		body.Write(buf[:n])
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("Cache-Control") != "no-store" || !strings.Contains(body.String(), `"error":"slow_down"`) {
			t.Fatalf("third registration: %d %v %s", resp.StatusCode, resp.Header, body.String())
		}
		if resp := register("198.51.100.1"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("another network: %d", resp.StatusCode)
		}
		register("2001:db8::1")
		register("2001:db8::2")
		if resp := register("2001:db8::3"); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("third registration from one /64: %d", resp.StatusCode)
		}
		if resp := register("2001:db8:0:1::1"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("another /64: %d", resp.StatusCode)
		}

		// No limiter: no limit.
		free := newEnv(t, st)
		for i := range 4 {
			if code, out := free.register(map[string]any{"client_name": "a", "redirect_uris": []string{"http://127.0.0.1:1234/cb"}, "token_endpoint_auth_method": "none"}); code != http.StatusCreated {
				t.Fatalf("unlimited registration %d: %d %v", i, code, out)
			}
		}
	})
}
