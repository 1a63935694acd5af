package remotemcp_test

// Tests of the attacker's review of remote MCP servers (#31).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/cluster"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// consented adds f's server as rem for c and finishes consent.
func consented(t *testing.T, e env, f *fakeRemote, o storage.Owner) {
	t.Helper()
	if _, err := e.svc.Add(t.Context(), o, f.srv.URL+"/mcp", "rem"); err != nil {
		t.Fatal(err)
	}
	u, err := e.svc.ConsentStart(t.Context(), o, "rem", binding)
	if err != nil {
		t.Fatal(err)
	}
	q := f.authorize(t, u)
	if _, err := e.svc.ConsentFinish(t.Context(), o, binding, remotemcp.Callback{Server: publicID(q.Get("redirect_uri")), State: q.Get("state"), Code: q.Get("code")}); err != nil {
		t.Fatal(err)
	}
}

// A refused renewal expires the server and a failed refresh records its
// error, on both dialects (an UPDATE naming updated_at twice is refused by
// PostgreSQL, and the error was dropped).
func TestReviewFailuresRecordedOnEveryDialect(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, 5*time.Second)
		f := newFakeRemote(t, false)
		f.expiresIn = 60
		alice := ownerOf(addUser(t, s, "alice"))
		consented(t, e, f, alice)
		// The remote stops answering tools/list: Refresh fails, and says so
		// on the row.
		f.mu.Lock()
		f.tokens = map[string]bool{}
		f.mu.Unlock()
		if _, err := e.svc.Refresh(t.Context(), alice, "rem"); err == nil {
			t.Fatal("a refresh of a refusing remote succeeded")
		}
		l, _ := e.svc.List(t.Context(), alice)
		if len(l) != 1 || l[0].LastError == "" {
			t.Fatalf("after a failed refresh: %+v", l)
		}
		// The remote refusing the refresh token: the server expires.
		f.mu.Lock()
		f.refreshes = map[string]bool{}
		f.mu.Unlock()
		e.clock.Add(remotemcp.MinRefreshInterval)
		if _, err := e.svc.AccessToken(t.Context(), alice, "rem"); err == nil {
			t.Fatal("a refused renewal answered a token")
		}
		l, _ = e.svc.List(t.Context(), alice)
		if len(l) != 1 || l[0].Status != remotemcp.StatusExpired {
			t.Fatalf("after a refused renewal: %+v", l)
		}
	})
}

// Calls arriving together when the token is due renew it once: with an
// authorization server that rotates refresh tokens (OAuth 2.1 for public
// clients), the others' use of the old refresh token would be refused
// (invalid_grant) and expire a server whose token was just renewed.
func TestReviewConcurrentRenewalsWithRotation(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, 5*time.Second)
		f := newFakeRemote(t, true)
		f.expiresIn, f.rotate, f.tokenDelay = 60, true, 50*time.Millisecond
		alice := ownerOf(addUser(t, s, "alice"))
		consented(t, e, f, alice)
		e.clock.Add(remotemcp.MinRefreshInterval)
		var wg sync.WaitGroup
		errs := make([]error, 6)
		toks := make([]string, 6)
		for i := range errs {
			wg.Go(func() { toks[i], errs[i] = e.svc.AccessToken(t.Context(), alice, "rem") })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil || toks[i] == "" {
				t.Fatalf("call %d: %q %v", i, toks[i], err)
			}
		}
		l, _ := e.svc.List(t.Context(), alice)
		if len(l) != 1 || l[0].Status != remotemcp.StatusActive {
			t.Fatalf("after concurrent renewals: %+v", l)
		}
		f.mu.Lock()
		n := f.refreshed
		f.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d renewals for one due token", n)
		}
	})
}

// bigRemote offers MaxTools tools of nearly MaxSchemaBytes of schema and
// MaxDescription of description each, 32 a page.
func bigRemote(t testing.TB) *remote {
	r := &remote{mcp: mcpserver.NewMCPServer("remote", "1", mcpserver.WithToolCapabilities(false), mcpserver.WithPaginationLimit(32))}
	h := func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText("ok"), nil
	}
	var props []string
	for i := 0; len(strings.Join(props, ",")) < remotemcp.MaxSchemaBytes-600; i++ {
		props = append(props, fmt.Sprintf(`"p%03d":{"type":"string","description":"%s"}`, i, strings.Repeat("s", 60)))
	}
	schema := json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`)
	for i := range remotemcp.MaxTools {
		r.mcp.AddTool(mcpgo.NewToolWithRawSchema(fmt.Sprintf("t%03d", i), strings.Repeat("d", remotemcp.MaxDescription), schema), h)
	}
	hs := mcpserver.NewStreamableHTTPServer(r.mcp)
	r.srv = httptest.NewServer(hs)
	t.Cleanup(r.srv.Close)
	return r
}

// BenchmarkReviewVisibleBigServers lists the tools of a person with
// MaxServers servers of MaxTools big tools each: the cost of every
// tools/list they send (and of every call, which looks its tool up).
func BenchmarkReviewVisibleBigServers(b *testing.B) {
	s := storagetest.Open(b, storage.SQLite)
	e := newEnv(b, s, 30*time.Second)
	alice := addUser(b, s, "alice")
	r := bigRemote(b)
	for i := range remotemcp.MaxServers {
		if _, err := e.svc.Add(b.Context(), ownerOf(alice), r.srv.URL, fmt.Sprintf("s%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	if n := len(e.reg.VisibleOwn(b.Context(), alice)); n != remotemcp.MaxServers*remotemcp.MaxTools {
		b.Fatalf("%d tools", n)
	}
	b.ResetTimer()
	for b.Loop() {
		e.reg.VisibleOwn(b.Context(), alice)
	}
}

// BenchmarkReviewLookupBigServer looks one tool of a big server up, as
// every call does.
func BenchmarkReviewLookupBigServer(b *testing.B) {
	s := storagetest.Open(b, storage.SQLite)
	e := newEnv(b, s, 30*time.Second)
	alice := addUser(b, s, "alice")
	r := bigRemote(b)
	if _, err := e.svc.Add(b.Context(), ownerOf(alice), r.srv.URL, "big"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if !e.reg.IsOwn(b.Context(), alice, "mcp_big__t127") {
			b.Fatal("not found")
		}
	}
}

// A server added or removed on one replica changes the owner's generation
// on every replica (through the cluster bus): their MCP sessions there are
// told their tool list changed, and their cached visible sets are worked
// out again.
func TestReviewGenerationAcrossReplicas(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	bus := cluster.NewLocal()
	t.Cleanup(func() { _ = bus.Close() })
	replica := func() *remotemcp.Service {
		ring, err := envelope.Open(t.Context(), s.DB, s.Keeper)
		if err != nil {
			t.Fatal(err)
		}
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		svc, err := remotemcp.New(remotemcp.Config{Options: remotemcp.Options{AllowLoopbackHTTP: true, Timeout: 5 * time.Second},
			Store: s, Ring: ring, Owners: owners, Registry: reg, BaseURL: "https://enclave.example", Logger: quiet(), Bus: bus})
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.AddProvider(remotemcp.Prefix, svc.Provider()); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	a, b := replica(), replica()
	alice := addUser(t, s, "alice")
	bob := addUser(t, s, "bob")
	r := newRemote(t, echoTools)
	gen := func() (uint64, uint64) {
		return b.Provider().Generation(alice.UserID), b.Provider().Generation(bob.UserID)
	}
	before, bobBefore := gen()
	if _, err := a.Add(t.Context(), ownerOf(alice), r.srv.URL, "tools"); err != nil {
		t.Fatal(err)
	}
	added, bobAdded := gen()
	if added == before {
		t.Fatal("an add on replica a left alice's generation on replica b as it was")
	}
	if _, err := a.Remove(t.Context(), ownerOf(alice), "tools"); err != nil {
		t.Fatal(err)
	}
	removed, bobRemoved := gen()
	if removed == added {
		t.Fatal("a removal on replica a left alice's generation on replica b as it was")
	}
	if bobBefore != bobAdded || bobAdded != bobRemoved {
		t.Fatal("alice's changes moved bob's generation")
	}
}

// Adds racing each other keep MaxServers: the count is checked before the
// remote is probed (seconds), and again after the row is written.
func TestReviewConcurrentAddsKeepMaxServers(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, 10*time.Second)
		r := newRemote(t, echoTools)
		alice := ownerOf(addUser(t, s, "alice"))
		var wg sync.WaitGroup
		for i := range remotemcp.MaxServers + 10 {
			wg.Go(func() { _, _ = e.svc.Add(t.Context(), alice, r.srv.URL, fmt.Sprintf("s%d", i)) })
		}
		wg.Wait()
		l, err := e.svc.List(t.Context(), alice)
		if err != nil || len(l) > remotemcp.MaxServers {
			t.Fatalf("%d servers kept (limit %d): %v", len(l), remotemcp.MaxServers, err)
		}
	})
}

// A server whose authorization server does not answer goes to the back of
// the renewal lane's queue: it cannot hold the lane (every person's
// renewals) tick after tick.
func TestReviewLaneNotHeldBySlowServer(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		e := newEnv(t, s, 500*time.Millisecond)
		slow, good := newFakeRemote(t, false), newFakeRemote(t, false)
		slow.expiresIn, good.expiresIn = 60, 60
		mallory, alice := ownerOf(addUser(t, s, "mallory")), ownerOf(addUser(t, s, "alice"))
		consented(t, e, slow, mallory)
		e.clock.Add(time.Second)
		consented(t, e, good, alice)
		slow.mu.Lock()
		slow.tokenDelay = 2 * time.Second
		slow.mu.Unlock()
		e.clock.Add(remotemcp.MinRefreshInterval)
		for range 2 {
			_, _ = e.svc.RenewDue(t.Context(), 1)
			e.clock.Add(time.Second)
		}
		good.mu.Lock()
		n := good.refreshed
		good.mu.Unlock()
		if n != 1 {
			t.Fatalf("alice's token renewed %d times in two ticks behind a slow server", n)
		}
	})
}

// A remote announcing tools/list_changed at every call gets its tool list
// read again at most once per MinRefreshInterval, not once per call (each
// reading compiles up to MaxTools schemas and tells every session of the
// owner that their tools changed).
func TestReviewListChangedStorm(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, 5*time.Second)
	alice := addUser(t, s, "alice")
	m := mcpserver.NewMCPServer("remote", "1", mcpserver.WithToolCapabilities(true))
	m.AddTool(mcpgo.NewTool("ping"), func(ctx context.Context, _ mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		if err := m.SendNotificationToClient(ctx, mcpgo.MethodNotificationToolsListChanged, nil); err != nil {
			return nil, err
		}
		return mcpgo.NewToolResultText("pong"), nil
	})
	var lists atomic.Int64
	h := mcpserver.NewStreamableHTTPServer(m)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), `"tools/list"`) {
				lists.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	if _, err := e.svc.Add(t.Context(), ownerOf(alice), srv.URL, "x"); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if _, err := e.invoke(t, alice, "mcp_x__ping", struct{}{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the background reading ends
	}
	if n := lists.Load(); n > 2 {
		t.Fatalf("%d tool list readings for 6 calls (1 by Add)", n)
	}
}

// A remote's readOnlyHint is its own word: its tools are never read-only
// to the registry (which would let them run during the account's
// deletion, without a write lease or replay protection).
func TestReviewRemoteReadOnlyHintNotTrusted(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	e := newEnv(t, s, 5*time.Second)
	alice := addUser(t, s, "alice")
	r := newRemote(t, func(m *mcpserver.MCPServer) {
		m.AddTool(mcpgo.NewTool("peek", mcpgo.WithReadOnlyHintAnnotation(true)), func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("ok"), nil
		})
	})
	if _, err := e.svc.Add(t.Context(), ownerOf(alice), r.srv.URL, "x"); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.reg.Visible(t.Context(), alice) {
		if c.Name == "mcp_x__peek" {
			if c.Annotations != nil && c.Annotations.ReadOnly {
				t.Fatal("the remote's readOnlyHint made its tool read-only here")
			}
			return
		}
	}
	t.Fatal("mcp_x__peek is not among alice's capabilities")
}
