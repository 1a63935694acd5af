package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	encquota "github.com/enclave-mcp/enclave/quota"
)

// serveMain runs one server under test until SIGTERM/SIGINT or
// -max-lifetime, whichever comes first. When it is ready it prints
// "READY <addr>" on stdout; for enclave servers the bearer tokens of its
// users are written to -tokens-out first, one a line.
func serveMain(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	kind := fs.String("kind", "a", "f or floor (plain net/http JSON-RPC echo, no MCP library), a (bare mcp-go), b (enclave on SQLite) or c (enclave on PostgreSQL)")
	users := fs.Int("users", 16, "users to create, each with its own OAuth client and token (b, c)")
	tokensOut := fs.String("tokens-out", "", "file to write the users' access tokens to (b, c)")
	traceOut := fs.String("trace-out", "", "file to write the SQL statements of one traced tools/call to (b, c)")
	quota := fs.String("quota", "memory", "quota counter: memory (per-user fixed window in process), sql (one UPSERT per call) or meter (enclave's quota package: in memory, flushed to SQL in batches)")
	pg := fs.String("pg", os.Getenv("ENCLAVE_TEST_POSTGRES"), "PostgreSQL URL for kind c (a schema is created and dropped)")
	logLevel := fs.String("log-level", "warn", "server log level (info turns on enclave's per-request access log)")
	maxLife := fs.Duration("max-lifetime", 10*time.Minute, "exit by itself after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole serving time to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile (with every allocation sampled since start: pprof -sample_index=alloc_space) to this file at exit")
	cacheTTL := fs.Duration("caller-cache-ttl", 30*time.Second, "enclave's --caller-cache-ttl (b, c); 0 turns the caller cache off (every call runs the SQL bearer check)")
	stateOut := fs.String("state-out", "", "write the data directory, database URL and base URL to this file, for a second replica to -join (c)")
	join := fs.String("join", "", "serve as a second replica of the server that wrote this -state-out file: same database, data directory and base URL; no users are made (c)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ttl := *cacheTTL
	if ttl == 0 {
		ttl = -1 // enclave.Config: negative is off
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *maxLife)
	defer cancel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	switch *kind {
	case "f", "floor":
		return serveFloor(ctx, ln)
	case "a":
		return serveBare(ctx, ln)
	case "b":
		return serveEnclave(ctx, ln, enclaveRun{users: *users, tokensOut: *tokensOut, traceOut: *traceOut, quota: *quota, ttl: ttl}, logger)
	case "c":
		if *pg == "" {
			return errors.New("kind c needs -pg or ENCLAVE_TEST_POSTGRES")
		}
		return serveEnclave(ctx, ln, enclaveRun{pg: *pg, users: *users, tokensOut: *tokensOut, traceOut: *traceOut, quota: *quota, ttl: ttl,
			stateOut: *stateOut, join: *join}, logger)
	}
	return fmt.Errorf("unknown kind %q", *kind)
}

func ready(ln net.Listener) { fmt.Printf("READY %s\n", ln.Addr()) }

// serveBare is server (a): mcp-go's streamable HTTP transport with one
// echo tool, its defaults, no authentication: what an MCP library alone
// costs (the floor, (f), is below it).
func serveBare(ctx context.Context, ln net.Listener) error {
	s := mcpserver.NewMCPServer("bench-bare", "1", mcpserver.WithToolCapabilities(false))
	s.AddTool(mcpgo.NewTool("echo",
		mcpgo.WithDescription("Echoes its text."),
		mcpgo.WithString("text", mcpgo.Required(), mcpgo.Description("text to echo")),
	), func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		return mcpgo.NewToolResultText(req.GetString("text", "")), nil
	})
	return serveMCPHandler(ctx, ln, mcpserver.NewStreamableHTTPServer(s))
}

// serveMCPHandler serves h at /mcp on ln, says READY, and shuts down
// (5 s grace) when ctx ends.
func serveMCPHandler(ctx context.Context, ln net.Listener, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	ready(ln)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	return nil
}

// echoIn is the echo capability's input.
type echoIn struct {
	Text string `json:"text" jsonschema:"text to echo"`
}

// echoCapability is the same tool as the bare server's, as an enclave
// capability that needs the user role and a permission, so every call
// really checks the freshly loaded roles.
func echoCapability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[echoIn, capabilities.Result]{
		Name: "echo", Domain: "bench", Title: "Echo", Description: "Echoes its text.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleUser, Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (capabilities.Result, error) {
			return capabilities.TextResult(in.Text), nil
		},
	})
}

// serveEnclave is server (b) (dbURL empty: SQLite in a temp dir) or (c)
// (PostgreSQL, in a schema made for the run and dropped after it).
// enclaveRun is how serveEnclave runs.
type enclaveRun struct {
	pg                         string // PostgreSQL base URL (c); empty: SQLite (b)
	users                      int
	tokensOut, traceOut, quota string
	ttl                        time.Duration // Config.CallerCacheTTL
	stateOut, join             string        // two replicas (c2)
}

// replicaState is what a second replica needs of the first.
type replicaState struct {
	DataDir, DatabaseURL, BaseURL string
}

func serveEnclave(ctx context.Context, ln net.Listener, run enclaveRun, logger *slog.Logger) error {
	pgURL, users, tokensOut, traceOut, quotaKind := run.pg, run.users, run.tokensOut, run.traceOut, run.quota
	base := "http://" + ln.Addr().String()
	var dir, dbURL string
	if run.join != "" {
		b, err := os.ReadFile(run.join)
		if err != nil {
			return err
		}
		var st replicaState
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
		dir, dbURL, base = st.DataDir, st.DatabaseURL, st.BaseURL
	} else {
		var err error
		if dir, err = os.MkdirTemp("", "enclave-bench-*"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if pgURL != "" {
			u, drop, err := pgSchema(context.Background(), dir, pgURL)
			if err != nil {
				return err
			}
			defer drop()
			dbURL = u
		}
	}
	quota := &lazyQuota{}
	login := newBenchLogin()
	srv, err := enclave.New(ctx, enclave.Config{
		Addr:        ln.Addr().String(),
		BaseURL:     base,
		DataDir:     dir,
		DatabaseURL: dbURL,
		// TokenVerifier stays nil: /mcp checks bearer tokens with enclave's
		// own authorization server, the default.
		OAuth:      oauth.Options{LoginConsent: login},
		Quota:      quota,
		Migrations: []migrations.Source{benchMigrations},
		// Cheap hashing: signup is setup, not what is measured.
		Accounts:       accounts.Config{Argon2: accounts.Argon2Params{MemoryKiB: 64, Iterations: 1}},
		Logger:         logger,
		CallerCacheTTL: run.ttl,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	switch quotaKind {
	case "memory":
		quota.set(newMemoryQuota())
	case "sql":
		quota.set(sqlQuotaFor(srv.Store()))
	case "meter":
		// enclave's default quota: counted in memory, flushed to SQL every
		// second, refusals decided from the reconciled totals.
		m := encquota.New(srv.Store(), encquota.Limits{Daily: map[string]int64{encquota.DefaultClass: quotaLimit}}, logger)
		mctx, stopMeter := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { m.Run(mctx); close(done) }()
		defer func() { stopMeter(); <-done }()
		quota.set(m)
	case "none":
	default:
		return fmt.Errorf("unknown quota %q", quotaKind)
	}
	if err := srv.Registry().Register(echoCapability()); err != nil {
		return err
	}
	if run.join != "" {
		// A second replica: the first made the users and their tokens.
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ctx, ln) }()
		ready(ln)
		return <-errc
	}
	if run.stateOut != "" {
		b, _ := json.Marshal(replicaState{DataDir: dir, DatabaseURL: dbURL, BaseURL: base})
		if err := os.WriteFile(run.stateOut, b, 0o600); err != nil {
			return err
		}
	}
	tokens, err := issueTokens(ctx, srv.OAuth(), login, srv.Accounts(), users+1)
	if err != nil {
		return err
	}
	// The last user is traced in process: the SQL statements of its
	// tools/call requests, through the same handler the network gets.
	rec := recordQueries(srv.Store())
	rec.prepared = srv.OAuth().BearerChecks
	trace, err := traceCall(srv.Handler(), rec, tokens[users])
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	tokens = tokens[:users]
	if traceOut != "" {
		b, _ := json.MarshalIndent(trace, "", "  ")
		if err := os.WriteFile(traceOut, b, 0o644); err != nil {
			return err
		}
	}
	if tokensOut != "" {
		if err := os.WriteFile(tokensOut, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	ready(ln)
	return <-errc
}

// benchLogin signs in the user named by a header, on requests that also
// carry a secret made at start: only the bench's own in-process requests
// (the network never learns the secret).
type benchLogin struct{ secret string }

const (
	benchUserHeader   = "X-Bench-User"
	benchSecretHeader = "X-Bench-Secret"
)

func newBenchLogin() benchLogin {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return benchLogin{secret: base64.RawURLEncoding.EncodeToString(b)}
}

func (l benchLogin) Login(w http.ResponseWriter, r *http.Request, _ *oauth.AuthorizeRequest) (int64, bool) {
	id, err := strconv.ParseInt(r.Header.Get(benchUserHeader), 10, 64)
	if err != nil || subtle.ConstantTimeCompare([]byte(r.Header.Get(benchSecretHeader)), []byte(l.secret)) != 1 {
		http.Error(w, "no bench user", http.StatusUnauthorized)
		return 0, false
	}
	return id, true
}

func (benchLogin) Consent(http.ResponseWriter, *http.Request, *oauth.AuthorizeRequest, int64) (bool, bool) {
	return true, true
}

// issueTokens creates n users and runs, for each, a dynamic client
// registration, an authorization code request with PKCE S256 and a token
// exchange against the OAuth server, in process. It returns one access
// token per user.
func issueTokens(ctx context.Context, as *oauth.Server, login benchLogin, acc *accounts.Service, n int) ([]string, error) {
	mux := http.NewServeMux()
	as.Register(mux)
	const redirect = "http://127.0.0.1:9/callback"
	tokens := make([]string, 0, n)
	for i := range n {
		u, _, err := acc.Identity.CreateUser(ctx, accounts.CreateUserInput{
			Email: fmt.Sprintf("bench%d@example.test", i), Username: fmt.Sprintf("bench%d", i),
			Password: "bench-password-0123456789", Verified: true,
		})
		if err != nil {
			return nil, err
		}
		reg, err := as.RegisterClient(ctx, oauth.ClientMetadata{
			RedirectURIs: []string{redirect}, TokenEndpointAuthMethod: "none", ClientName: fmt.Sprintf("bench agent %d", i),
		})
		if err != nil {
			return nil, err
		}
		vb := make([]byte, 32)
		_, _ = rand.Read(vb)
		verifier := base64.RawURLEncoding.EncodeToString(vb)
		sum := sha256.Sum256([]byte(verifier))
		q := url.Values{
			"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirect}, "scope": {oauth.ScopeMCP},
			"state": {"bench-state-0123456789"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
			"code_challenge_method": {"S256"}, "resource": {as.Resource()},
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, oauth.PathAuthorize+"?"+q.Encode(), nil)
		req.Header.Set(benchUserHeader, strconv.FormatInt(u.ID, 10))
		req.Header.Set(benchSecretHeader, login.secret)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		loc, err := url.Parse(rec.Header().Get("Location"))
		if err != nil || loc.Query().Get("code") == "" {
			return nil, fmt.Errorf("authorize: %d %s %s", rec.Code, rec.Header().Get("Location"), rec.Body.String())
		}
		form := url.Values{
			"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "client_id": {reg.ClientID},
			"redirect_uri": {redirect}, "code_verifier": {verifier}, "resource": {as.Resource()},
		}
		req = httptest.NewRequestWithContext(ctx, http.MethodPost, oauth.PathToken, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec = httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var tok struct {
			AccessToken string `json:"access_token"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || tok.AccessToken == "" {
			return nil, fmt.Errorf("token: %d %s", rec.Code, rec.Body.String())
		}
		tokens = append(tokens, tok.AccessToken)
	}
	return tokens, nil
}
