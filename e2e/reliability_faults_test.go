package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/relclient"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// The fault-injection suite: a component fails or stalls while real
// clients use the server over HTTP. Requests must fail cleanly (503 or a
// JSON-RPC error, never a misleading 401, never internal detail), no
// goroutine may be left behind, work resumes when the component returns,
// and no acknowledged write is lost. Figures: docs/reliability.md.

// liveServer is an assembled server on a real listener.
type liveServer struct {
	srv  *enclave.Server
	base string
	ts   *httptest.Server
}

func startLive(t *testing.T, cfg enclave.Config, prepare ...func(*enclave.Server)) *liveServer {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	cfg.BaseURL = base
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	cfg.Accounts.Argon2 = fastArgon.Argon2
	srv := openServer(t, cfg) // closed after the cleanup below
	for _, p := range prepare {
		p(srv)
	}
	ts.Config.Handler = srv.Handler()
	ts.Start()
	bg, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.RunBackground(bg); close(done) }()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		stop()
		<-done
	})
	return &liveServer{srv: srv, base: base, ts: ts}
}

func (l *liveServer) user(t *testing.T, name string) (email, password string) {
	t.Helper()
	email, password = name+"@example.com", "a long password for "+name
	if _, _, err := l.srv.Accounts().Identity.CreateUser(context.Background(), accounts.CreateUserInput{Email: email, Username: name, Password: password, Verified: true}); err != nil {
		t.Fatal(err)
	}
	return email, password
}

// agent returns an MCP session of a new user, authorized through the real
// OAuth flow, and a web client signed in as the same user.
func (l *liveServer) agent(t *testing.T, name string) (*relclient.Session, *relclient.Client) {
	s, web, _ := l.agentTokens(t, name)
	return s, web
}

// agentTokens is agent, with the token pair and the agent's client.
func (l *liveServer) agentTokens(t *testing.T, name string) (*relclient.Session, *relclient.Client, relclient.Tokens) {
	t.Helper()
	ctx := t.Context()
	email, password := l.user(t, name)
	c := relclient.New(l.base, nil)
	tok, err := c.Authorize(ctx, email, password)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Open(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SignIn(ctx, email, password); err != nil {
		t.Fatal(err)
	}
	return s, c, tok
}

// secretNames lists the session user's secret names.
func secretNames(t *testing.T, s *relclient.Session) map[string]bool {
	t.Helper()
	r, err := s.Call(t.Context(), "secretList", map[string]any{"limit": 1000})
	if err != nil || r.IsError {
		t.Fatalf("secretList: %v %s", err, r.Text())
	}
	var out struct {
		Secrets []struct {
			Name string `json:"name"`
		} `json:"secrets"`
	}
	if err := json.Unmarshal(r.Structured, &out); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range out.Secrets {
		names[s.Name] = true
	}
	return names
}

// stableGoroutines returns the goroutine count once it has not changed
// for 300 ms (the server's background lanes and relays have started): the
// baseline of goroutinesSettle.
func stableGoroutines() int {
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// goroutinesSettle waits until the goroutine count is back within slack of
// base, and fails with a dump of the stacks otherwise.
func goroutinesSettle(t *testing.T, base, slack int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > base+slack && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base+slack {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("goroutines: %d, baseline %d (+%d allowed)\n%s", n, base, slack, buf)
	}
	return n
}

// faultProxy is a TCP proxy in front of a database: Down cuts every open
// connection and refuses new ones until Up.
type faultProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

func (p *faultProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *faultProxy) Down() { p.mu.Lock(); p.down = true; p.mu.Unlock(); p.cut() }
func (p *faultProxy) Up()   { p.mu.Lock(); p.down = false; p.mu.Unlock() }

// TestFaultDatabaseOutage cuts PostgreSQL away for three seconds under
// MCP and web traffic.
func TestFaultDatabaseOutage(t *testing.T) {
	dbURL := storagetest.PostgresSchemaURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFaultProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	l := startLive(t, enclave.Config{DataDir: t.TempDir(), DatabaseURL: u.String()})
	s, web, tok := l.agentTokens(t, "alice")
	ctx := t.Context()
	if r, err := s.Call(ctx, "secretSet", map[string]any{"name": "before", "value": "v"}); err != nil || r.IsError {
		t.Fatalf("secretSet before the outage: %v %s", err, r.Text())
	}
	base := stableGoroutines()

	proxy.Down()
	outage := time.Now()
	acked, refused := map[string]bool{}, map[string]int{}
	for i := 0; time.Since(outage) < 3*time.Second; i++ {
		name := fmt.Sprintf("during-%d", i)
		r, err := s.Call(ctx, "secretSet", map[string]any{"name": name, "value": "v"})
		switch {
		case err == nil && !r.IsError:
			acked[name] = true
		case err == nil:
			refused["tool error"]++
			if strings.Contains(r.Text(), "connection") || strings.Contains(r.Text(), "dial") {
				t.Fatalf("tool error leaks internal detail: %s", r.Text())
			}
		case relclient.StatusOf(err) == http.StatusServiceUnavailable:
			refused["503"]++
		default:
			t.Fatalf("during the outage, secretSet answered %v (want 503 or a tool error: a 401 makes clients drop good tokens)", err)
		}
		status, body, err := web.Get(ctx, "/account")
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusServiceUnavailable {
			t.Fatalf("during the outage, /account answered %d (want 503): %.200s", status, body)
		}
		// A refresh that cannot be checked must not look like a refused
		// grant (invalid_grant makes the client drop its refresh token).
		if _, err := web.Refresh(ctx, tok); err == nil {
			t.Fatal("a token refresh succeeded with the database down")
		} else if st := relclient.StatusOf(err); st < 500 {
			t.Fatalf("token refresh during the outage: %v (want a 5xx: the grant is not invalid)", err)
		}
		// Liveness stays up (a restart would not help); readiness goes down.
		if status, _, _ := web.Get(ctx, "/healthz"); status != http.StatusOK {
			t.Fatalf("healthz during the outage: %d", status)
		}
		if status, _, _ := web.Get(ctx, "/readyz"); status != http.StatusServiceUnavailable {
			t.Fatalf("readyz during the outage: %d", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	proxy.Up()
	t.Logf("outage: %d writes acknowledged, refused: %v", len(acked), refused)

	// Work resumes within seconds.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := s.Call(ctx, "secretSet", map[string]any{"name": "after", "value": "v"})
		if err == nil && !r.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery 15 s after the database returned: %v %s", err, r.Text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("recovered %s after the database returned", time.Since(outage)-3*time.Second)
	names := secretNames(t, s)
	for _, want := range []string{"before", "after"} {
		if !names[want] {
			t.Errorf("secret %q lost", want)
		}
	}
	for name := range acked {
		if !names[name] {
			t.Errorf("acknowledged secret %q lost", name)
		}
	}
	if status, _, _ := web.Get(ctx, "/account"); status != http.StatusOK {
		t.Errorf("/account after recovery: %d", status)
	}
	// The refresh token survived the outage.
	if _, err := web.Refresh(ctx, tok); err != nil {
		t.Errorf("refresh after recovery: %v", err)
	}
	l.ts.CloseClientConnections()
	goroutinesSettle(t, base, 10)
}

// newWeb returns a web client that is not signed in.
func (l *liveServer) newWeb() *relclient.Client { return relclient.New(l.base, nil) }
