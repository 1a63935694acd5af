package outbound_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// Review (#31): the provider's own host redirecting (307 keeps the body,
// so a token placed in it would follow) to a host outside its list, on
// the same address with another port, or to the same host in another
// case or with a trailing dot: the token goes to none but the listed
// host:port.
func TestReviewConnectionRedirectsAndHostVariants(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s)
		var leaked []string
		other := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			leaked = append(leaked, r.Header.Get("Authorization")+string(b))
		})
		srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
		})
		const token = "tok-review-7d1c0f"
		conns := connections{f.alice.ID: {"acme": {Name: "acme", Provider: "acme", AccessToken: token, APIHosts: []string{"127.0.0.1:" + srv.port()}}}}
		g := f.gateway(srv, outbound.Options{AllowPrivate: true, Connections: conns})
		for _, req := range []outbound.Request{
			{URL: srv.URL + "/", Headers: map[string]string{"Authorization": "{{connection:acme}}"}},
			{Method: "POST", URL: srv.URL + "/", Body: "token={{connection:acme}}"},
			{Method: "POST", URL: srv.URL + "/", Headers: map[string]string{"X-Token": "{{connection:acme}}"}, Body: "x"},
		} {
			resp, err := g.Do(ctx, f.aliceC, req)
			if err == nil && resp.Status != http.StatusTemporaryRedirect {
				t.Fatalf("redirect followed: %+v", resp)
			}
			if err != nil && strings.Contains(err.Error(), token) {
				t.Fatalf("the error holds the token: %v", err)
			}
		}
		// The same address on another port is another host.
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: other.URL + "/", Headers: map[string]string{"Authorization": "{{connection:acme}}"}}); err == nil {
			t.Fatal("the token went to another port of the listed address")
		}
		if len(leaked) != 0 || other.hits.Load() != 0 {
			t.Fatalf("the token reached a host outside the provider's list: %q", leaked)
		}
		// Case and a trailing dot do not make another host out of a listed one.
		conns[f.alice.ID]["acme"] = integrations.Usable{Name: "acme", Provider: "acme", AccessToken: token, APIHosts: []string{"api.acme.example"}}
		for _, u := range []string{"https://API.ACME.EXAMPLE.evil.example/", "https://api.acme.example.evil.example/", "https://api.acme.example:8443/", "https://xapi.acme.example/"} {
			if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: u, Headers: map[string]string{"Authorization": "{{connection:acme}}"}}); err == nil || !strings.Contains(err.Error(), "provider's hosts") {
				t.Fatalf("%s: %v", u, err)
			}
		}
	})
}
