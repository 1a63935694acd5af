package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func getJSON(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode, body
}

// /readyz says whether the server can serve (database, schema, keeper) and
// names the version; each failure is a 503 with a reason.
func TestReadyz(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			srv := newServer(t, d)
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			code, body := getJSON(t, ts.URL+"/readyz")
			if code != 200 || body["status"] != "ok" || body["version"] != enclave.Version() || body["version"] == "" {
				t.Fatalf("readyz = %d %v", code, body)
			}
			srv.Store().DB.Close()
			time.Sleep(1100 * time.Millisecond) // past the one-second cache
			code, body = getJSON(t, ts.URL+"/readyz")
			if code != http.StatusServiceUnavailable || body["reason"] != "database unreachable" {
				t.Fatalf("readyz with the database gone = %d %v", code, body)
			}
			if code, _ := getJSON(t, ts.URL+"/healthz"); code != 200 {
				t.Fatalf("healthz = %d with the database gone, want 200", code)
			}
		})
	}
	t.Run("keeper", func(t *testing.T) {
		srv := newServer(t, storage.SQLite)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		srv.Store().Keeper.Close()
		code, body := getJSON(t, ts.URL+"/readyz")
		if code != http.StatusServiceUnavailable || body["reason"] != "keeper unusable" {
			t.Fatalf("readyz with the keeper closed = %d %v", code, body)
		}
	})
	t.Run("no-migrate", func(t *testing.T) {
		sc := storagetest.Config(t, storage.SQLite)
		// A database never migrated: New refuses, naming the fix.
		if err := newServerError(t, storage.SQLite, func(c *enclave.Config) { c.DataDir, c.NoMigrate = sc.DataDir, true }); !strings.Contains(err.Error(), "enclave migrate") {
			t.Fatalf("NoMigrate on an empty database: %v", err)
		}
		// A database one migration behind: it starts, and is not ready.
		first := openServer(t, enclave.Config{DataDir: sc.DataDir, Logger: quiet()})
		if _, err := first.Store().DB.ExecContext(context.Background(), "DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)"); err != nil {
			t.Fatal(err)
		}
		first.Close()
		srv := openServer(t, enclave.Config{DataDir: sc.DataDir, NoMigrate: true, Logger: quiet()})
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		code, body := getJSON(t, ts.URL+"/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body["reason"], "migrations pending") {
			t.Fatalf("readyz on an unmigrated database with NoMigrate = %d %v", code, body)
		}
	})
}

// Shutdown ends an open MCP GET stream at once instead of waiting the
// whole shutdown timeout for it; the stream's client sees it end.
func TestShutdownEndsOpenStreams(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) {
		c.BaseURL, c.TokenVerifier, c.ShutdownTimeout = base, testVerifier(&base), 30*time.Second
	})
	u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice", Password: "a long password for alice"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()

	token := "test-token:" + u.StableID
	session := enclavetest.Dial(t, base, token).SessionID()
	req, _ := http.NewRequest("GET", base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	streamEnded := make(chan struct{})
	go func() { io.Copy(io.Discard, bufio.NewReader(resp.Body)); close(streamEnded) }()

	// And a 2026-07-28 listening stream (subscriptions/listen).
	listen, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["notes://anything"]},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`))
	listen.Header.Set("Authorization", "Bearer "+token)
	listen.Header.Set("Content-Type", "application/json")
	listen.Header.Set("Accept", "application/json, text/event-stream")
	listen.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	listen.Header.Set("Mcp-Method", "subscriptions/listen")
	lresp, err := http.DefaultClient.Do(listen)
	if err != nil {
		t.Fatal(err)
	}
	defer lresp.Body.Close()
	if lresp.StatusCode != 200 || !strings.HasPrefix(lresp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(lresp.Body)
		t.Fatalf("subscriptions/listen: %d %s", lresp.StatusCode, b)
	}
	listenEnded := make(chan struct{})
	go func() { io.Copy(io.Discard, lresp.Body); close(listenEnded) }()
	time.Sleep(100 * time.Millisecond) // the streams are registered
	select {
	case <-listenEnded:
		t.Fatal("the listen stream ended by itself")
	default:
	}

	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return within 2 s with open MCP streams")
	}
	for _, ended := range []chan struct{}{streamEnded, listenEnded} {
		select {
		case <-ended:
		case <-time.After(time.Second):
			t.Fatal("a client's stream did not end")
		}
	}
	t.Logf("shutdown took %v", time.Since(start))
}

// The metrics listener serves the Prometheus text format, which the
// official parser reads; the counters move with traffic.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := mln.Addr().String()
	mln.Close()
	base := "http://" + ln.Addr().String()
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) {
		c.BaseURL, c.TokenVerifier, c.MetricsAddr = base, testVerifier(&base), metricsAddr
	})
	u, err := srv.Accounts().Identity.Signup(ctx, accounts.SignupInput{Email: "alice@example.com", Username: "alice", Password: "a long password for alice"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	defer func() { stop(); <-done }()

	token := "test-token:" + u.StableID
	c := enclavetest.Dial(t, base, token)
	session := c.SessionID()
	// The MCP serverInfo names the build's version.
	if want, _ := json.Marshal(enclave.Version()); !strings.Contains(string(c.InitializeResult()), `"serverInfo":{"name":"enclave","version":`+string(want)+`}`) {
		t.Errorf("initialize serverInfo lacks the version %s: %s", want, c.InitializeResult())
	}
	rpc(t, base, token, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
	rpc(t, base, token, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"adminAuditLogQuery","arguments":{}}}`)
	rpc(t, base, "not-a-test-token", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	getJSON(t, base+"/readyz")

	// Never on the public listener.
	if resp, err := http.Get(base + "/metrics"); err != nil || resp.StatusCode == 200 {
		t.Fatalf("/metrics on the public listener: %v %v", resp.StatusCode, err)
	}

	var families map[string]*dto.MetricFamily
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			continue
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err = parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("official text parser: %v", err)
		}
		break
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := families[name]
		if !ok {
			t.Fatalf("no metric family %s", name)
		}
	next:
		for _, m := range f.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("%s has no series with %v", name, labels)
		return 0
	}
	if v := value("enclave_capability_calls_total", map[string]string{"capability": "whoami", "outcome": "allowed"}); v != 1 {
		t.Errorf("whoami allowed = %v, want 1", v)
	}
	if v := value("enclave_capability_calls_total", map[string]string{"capability": "adminAuditLogQuery", "outcome": "role"}); v != 1 {
		t.Errorf("admin capability denied for role = %v, want 1", v)
	}
	if v := value("enclave_token_refusals_total", map[string]string{"reason": "invalid"}); v != 1 {
		t.Errorf("token refusals = %v, want 1", v)
	}
	if v := value("enclave_http_requests_total", map[string]string{"route": "mcp", "code": "401"}); v != 1 {
		t.Errorf("mcp 401s = %v, want 1", v)
	}
	if v := value("enclave_http_request_duration_seconds", map[string]string{"route": "health"}); v < 1 {
		t.Errorf("health latency samples = %v", v)
	}
	if v := value("enclave_mcp_sessions", nil); v != 1 {
		t.Errorf("live sessions = %v, want 1", v)
	}
	value("enclave_mcp_streams", nil)
	value("enclave_jobs_queued", nil)
	value("enclave_jobs_dead", nil)
	value("go_sql_open_connections", map[string]string{"db_name": "primary"})
	if v := value("enclave_build_info", map[string]string{"version": enclave.Version()}); v != 1 {
		t.Errorf("build info = %v", v)
	}
}

// CORS is off by default and answers only the listed origins, only on the
// endpoints a browser MCP client needs.
func TestCORS(t *testing.T) {
	srv := newServer(t, storage.SQLite, func(c *enclave.Config) { c.AllowedOrigins = []string{"https://app.example.com"} })
	plain := newServer(t, storage.SQLite)
	preflight := func(h http.Handler, path, origin string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("OPTIONS", path, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, path := range []string{"/mcp", "/oauth/token", "/oauth/register", "/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/mcp"} {
		rec := preflight(srv.Handler(), path, "https://app.example.com")
		if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
			!strings.Contains(rec.Header().Get("Access-Control-Allow-Headers"), "Authorization") ||
			// protocol 2026-07-28 clients send these on every request
			!strings.Contains(rec.Header().Get("Access-Control-Allow-Headers"), "Mcp-Method") ||
			!strings.Contains(rec.Header().Get("Access-Control-Allow-Headers"), "Mcp-Name") {
			t.Errorf("preflight %s from an allowed origin: %d %v", path, rec.Code, rec.Header())
		}
		if rec.Header().Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s allows credentials", path)
		}
		if rec.Header().Get("Vary") != "Origin" {
			t.Errorf("preflight %s: Vary %q, want Origin", path, rec.Header().Get("Vary"))
		}
		if rec := preflight(srv.Handler(), path, "https://evil.example"); rec.Header().Get("Access-Control-Allow-Origin") != "" ||
			rec.Header().Get("Access-Control-Allow-Methods") != "" || rec.Code == http.StatusNoContent {
			t.Errorf("preflight %s from another origin got CORS headers: %d %v", path, rec.Code, rec.Header())
		}
		if rec := preflight(srv.Handler(), path, "https://app.example.com.evil.example"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight %s from a lookalike origin got CORS headers", path)
		}
		if rec := preflight(plain.Handler(), path, "https://app.example.com"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s sends CORS headers with no allowed origins configured", path)
		}
	}
	// Not on the web shell.
	if rec := preflight(srv.Handler(), "/account", "https://app.example.com"); rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Error("the web shell answers CORS")
	}
	// A simple request from the allowed origin gets the header on the real response.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/oauth/token", strings.NewReader("grant_type=authorization_code"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://app.example.com")
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("token POST from the allowed origin: %d %v", rec.Code, rec.Header())
	}
}

// A probe whose client hangs up (its request context ends) must not make
// the server look unready: the readiness result is cached for a second,
// so anyone sending aborted /readyz requests would otherwise keep every
// replica out of its load balancer.
func TestReadyzNotPoisonedByAbortedProbe(t *testing.T) {
	for _, d := range storagetest.Dialects() {
		t.Run(string(d), func(t *testing.T) {
			srv := newServer(t, d)
			h := srv.Handler()
			time.Sleep(1100 * time.Millisecond) // past any result cached by New
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil).WithContext(ctx))
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("readyz after an aborted probe = %d %s", rec.Code, rec.Body)
			}
			if err := srv.Ready(ctx); err != nil {
				t.Fatalf("Ready with an ended context on a healthy server: %v", err)
			}
		})
	}
}
