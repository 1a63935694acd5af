package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mcp"
)

// A session's GET stream on the assembled server, with tokens from the
// real OAuth flow (#27 review): another user's token neither opens,
// resumes, ends nor takes over it; it ends when its grant is revoked and
// when its user is suspended, and the revoked token opens nothing after.
func TestMCPSessionStreamCredentials(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{MCP: mcp.Options{Recheck: 50 * time.Millisecond}}})
	alice, bob, carol := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "carol")
	send := func(method, token, sid, last, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, s.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", enclavetest.ProtocolVersion)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	open := func(token string) (sid string, stream *http.Response) {
		t.Helper()
		sid = s.MCP(t, token).SessionID()
		stream = send(http.MethodGet, token, sid, "", "")
		if stream.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d", stream.StatusCode)
		}
		return sid, stream
	}
	// ended is closed when the stream reaches its end.
	ended := func(stream *http.Response) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stream.Body)
			for sc.Scan() {
			}
			close(done)
		}()
		return done
	}
	within := func(done <-chan struct{}, d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}

	aliceToken := alice.Token(t)
	sid, stream := open(aliceToken)
	streamEnded := ended(stream)
	bobToken := bob.Token(t)
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		for _, last := range []string{"", "0123456789abcdef0123456789abcdef"} {
			if resp := send(m, bobToken, sid, last, ""); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("bob's %s of alice's session (Last-Event-ID %q): %d", m, last, resp.StatusCode)
			}
		}
	}
	if within(streamEnded, 300*time.Millisecond) {
		t.Fatal("alice's stream ended when bob's token named her session")
	}
	if resp := send(http.MethodPost, aliceToken, sid, "", `{"jsonrpc":"2.0","id":2,"method":"ping"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's session after bob's attempts: %d", resp.StatusCode)
	}

	// Revoking alice's grants ends the stream; the token opens nothing.
	if err := s.OAuth().RevokeAll(context.Background(), alice.ID); err != nil {
		t.Fatal(err)
	}
	if !within(streamEnded, 5*time.Second) {
		t.Fatal("alice's stream still open 5 s after her grants were revoked")
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if resp := send(m, aliceToken, sid, "", ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s with the revoked token: %d", m, resp.StatusCode)
		}
	}

	// Suspending carol ends hers.
	_, carolStream := open(carol.Token(t))
	if _, err := s.Accounts().Lifecycle.Suspend(context.Background(), carol.ID); err != nil {
		t.Fatal(err)
	}
	if !within(ended(carolStream), 5*time.Second) {
		t.Fatal("carol's stream still open 5 s after her suspension")
	}
}
