package outbound_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// connections is a fixed set of connected accounts per owner.
type connections map[int64]map[string]integrations.Usable

func (c connections) Use(_ context.Context, o storage.Owner, name string) (integrations.Usable, error) {
	u, ok := c[o.ID][name]
	if !ok {
		return integrations.Usable{}, integrations.ErrNotFound
	}
	if u.AccessToken == "" {
		return integrations.Usable{}, integrations.ErrExpired
	}
	return u, nil
}

// {{connection:NAME}} becomes the connection's bearer token only for its
// provider's hosts; the token never comes back, in the answer, its
// headers, an error or the audit log; bob cannot use alice's connection.
func TestConnectionPlaceholder(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		f := setup(t, s)
		var auth string
		srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
			auth = r.Header.Get("Authorization")
			tok := strings.TrimPrefix(auth, "Bearer ")
			w.Header().Set("X-Echo", auth)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"authorization":%q,"token":%q,"b64":%q,"hex":"%x"}`, auth, tok, base64.StdEncoding.EncodeToString([]byte(tok)), tok)
		})
		other := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {})
		const token = "tok-alice-5f2e9c8a71"
		conns := connections{f.alice.ID: {
			"acme":  {Name: "acme", Provider: "acme", AccessToken: token, APIHosts: []string{"127.0.0.1:" + srv.port()}},
			"stale": {Name: "stale", Provider: "acme", APIHosts: []string{"127.0.0.1:" + srv.port()}},
		}}
		g := f.gateway(srv, outbound.Options{AllowPrivate: true, Connections: conns})
		hdr := map[string]string{"Authorization": "{{connection:acme}}"}

		resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/me", Headers: hdr})
		if err != nil || resp.Status != 200 {
			t.Fatalf("use: %+v %v", resp, err)
		}
		if auth != "Bearer "+token {
			t.Fatalf("the provider got %q", auth)
		}
		if !slices.Equal(resp.ConnectionsUsed, []string{"acme"}) || len(resp.SecretsUsed) != 0 {
			t.Fatalf("used: %+v", resp)
		}
		if !strings.Contains(resp.Body, `"token":"{{connection:acme}}"`) {
			t.Fatalf("body not scrubbed as expected: %s", resp.Body)
		}
		var answers []string
		answers = append(answers, fmt.Sprint(resp))

		// Elsewhere: refused before anything is sent.
		_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: other.URL + "/steal", Headers: hdr})
		if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "provider's hosts") || other.hits.Load() != 0 {
			t.Fatalf("another host: %v (hits %d)", err, other.hits.Load())
		}
		answers = append(answers, err.Error())
		// In the body to another host, too.
		_, err = g.Do(ctx, f.aliceC, outbound.Request{Method: "POST", URL: other.URL + "/steal", Body: "t={{connection:acme}}"})
		if codeOf(err) != capabilities.CodeInvalidInput || other.hits.Load() != 0 {
			t.Fatalf("body to another host: %v", err)
		}
		// Never in the URL.
		_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/?t={{connection:acme}}"})
		if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "not allowed in the URL") {
			t.Fatalf("in the URL: %v", err)
		}
		_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/", Headers: map[string]string{"Authorization": "{{connection:acme"}})
		if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "malformed") {
			t.Fatalf("malformed: %v", err)
		}
		// Bob cannot use alice's connection: it does not exist for him.
		hits := srv.hits.Load()
		_, err = g.Do(ctx, f.bobC, outbound.Request{URL: srv.URL + "/me", Headers: hdr})
		if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), `no connection named "acme"`) || srv.hits.Load() != hits {
			t.Fatalf("bob: %v", err)
		}
		// An expired connection is refused.
		_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/me", Headers: map[string]string{"Authorization": "{{connection:stale}}"}})
		if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("expired: %v", err)
		}
		// A gateway without connections knows none.
		_, err = f.gateway(srv, outbound.Options{AllowPrivate: true}).Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/me", Headers: hdr})
		if codeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("no connections: %v", err)
		}
		for _, a := range answers {
			if strings.Contains(a, token) || strings.Contains(a, base64.StdEncoding.EncodeToString([]byte(token))) || strings.Contains(a, fmt.Sprintf("%x", token)) {
				t.Fatalf("an answer holds the token: %s", a)
			}
		}
		// The audit log names the connection and the host, never the token.
		var rows []map[string]any
		if err := s.DB.NewSelect().Table("audit_events").Scan(ctx, &rows); err != nil {
			t.Fatal(err)
		}
		uses := 0
		for _, r := range rows {
			line := fmt.Sprint(r)
			if strings.Contains(line, token) {
				t.Fatalf("an audit row holds the token: %s", line)
			}
			if r["action"] == "connection_use" {
				uses++
			}
		}
		if uses < 3 {
			t.Fatalf("connection uses audited: %d", uses)
		}
	})
}
