package outbound_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type fixture struct {
	store        *storage.Store
	sec          *secrets.Service
	log          *audit.Log
	alice, bob   storage.Owner
	aliceC, bobC capabilities.Caller
	owners       capabilities.OwnerOf
}

func setup(t *testing.T, s *storage.Store) *fixture {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	f := &fixture{store: s}
	for i, name := range []string{"alice", "bob"} {
		stable := strings.Repeat(name[:1], 64)
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO users (id, stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
			i+1, stable, name+"@example.com", name, now, now); err != nil {
			t.Fatal(err)
		}
	}
	f.alice = storage.Owner{ID: 1, StableID: strings.Repeat("a", 64)}
	f.bob = storage.Owner{ID: 2, StableID: strings.Repeat("b", 64)}
	v, _ := capabilities.NewVocabulary()
	mk := func(o storage.Owner) capabilities.Caller {
		return capabilities.Caller{UserID: o.StableID, Roles: []string{"user"}, Permissions: v.RolePermissions(capabilities.RoleUser),
			State: capabilities.AccountActive, AllScopes: true, Interactive: true}
	}
	f.aliceC, f.bobC = mk(f.alice), mk(f.bob)
	owners := map[string]storage.Owner{f.alice.StableID: f.alice, f.bob.StableID: f.bob}
	f.owners = func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
		o, ok := owners[c.UserID]
		if !ok {
			return capabilities.Owner{}, fmt.Errorf("no such user")
		}
		return o, nil
	}
	var err error
	if f.sec, err = secrets.New(ctx, s); err != nil {
		t.Fatal(err)
	}
	f.log = audit.New(s, make([]byte, 32), slog.New(slog.NewTextHandler(io.Discard, nil)))
	return f
}

// secret stores a secret for o with the given allowed hosts and expiry.
func (f *fixture) secret(t *testing.T, o storage.Owner, name, value string, hosts []string, exp *time.Time) {
	t.Helper()
	if _, _, err := f.sec.Put(context.Background(), o, name, "", []byte(value), &secrets.Policy{AllowedHosts: hosts, ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
}

// server is an httptest TLS server that records what reached it.
type server struct {
	*httptest.Server
	hits    atomic.Int32
	lastKey atomic.Value // the X-Key header of the last request
	lastBod atomic.Value
}

func newServer(t *testing.T, h func(s *server, w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.lastKey.Store(r.Header.Get("X-Key"))
		b, _ := io.ReadAll(r.Body)
		s.lastBod.Store(string(b))
		h(s, w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) port() string {
	u, _ := url.Parse(s.URL)
	return u.Port()
}

func (f *fixture) gateway(srv *server, o outbound.Options) *outbound.Gateway {
	o.Secrets, o.Owner, o.Audit = f.sec, f.owners, f.log
	if srv != nil && o.TLSConfig == nil {
		o.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	}
	return outbound.New(o)
}

func codeOf(err error) capabilities.Code { return capabilities.CodeOf(err) }

// echo answers with the X-Key header it received, raw and in the
// encodings an API might echo it in, in the body and a header.
func echo(s *server, w http.ResponseWriter, r *http.Request) {
	k := r.Header.Get("X-Key")
	w.Header().Set("X-Echo", "key="+k)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"raw":%q,"b64":%q,"b64url":%q,"query":%q,"body":%q}`, k,
		base64.StdEncoding.EncodeToString([]byte(k)), base64.RawURLEncoding.EncodeToString([]byte(k)),
		url.QueryEscape(k), s.lastBod.Load())
}

func TestGateway(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		f := setup(t, st)
		srv := newServer(t, echo)
		const aliceKey = "sk-alice>>>???~~~v1 &="
		f.secret(t, f.alice, "api", aliceKey, []string{"127.0.0.1:" + srv.port()}, nil)
		f.secret(t, f.alice, "elsewhere", "sk-elsewhere", []string{"api.example.com", "*.example.org"}, nil)
		past := time.Now().Add(-time.Minute)
		f.secret(t, f.alice, "old", "sk-old", []string{"127.0.0.1:" + srv.port()}, &past)
		f.secret(t, f.bob, "api", "sk-bob", []string{"127.0.0.1:" + srv.port()}, nil)
		g := f.gateway(srv, outbound.Options{AllowPrivate: true})

		t.Run("placeholder filled for an approved host, echo scrubbed", func(t *testing.T) {
			resp, err := g.Do(ctx, f.aliceC, outbound.Request{Method: "POST", URL: srv.URL + "/v1",
				Headers: map[string]string{"X-Key": "{{secret:api}}"}, Body: `token={{secret:api}}`})
			if err != nil {
				t.Fatal(err)
			}
			if got := srv.lastKey.Load(); got != aliceKey {
				t.Fatalf("the server got X-Key %q, want the secret", got)
			}
			if got := srv.lastBod.Load(); got != "token="+aliceKey {
				t.Fatalf("the server got body %q", got)
			}
			all, _ := json.Marshal(resp)
			for _, form := range []string{aliceKey, base64.StdEncoding.EncodeToString([]byte(aliceKey)),
				base64.RawURLEncoding.EncodeToString([]byte(aliceKey)), url.QueryEscape(aliceKey), "sk-alice"} {
				if strings.Contains(string(all), form) {
					t.Fatalf("the response shows the secret (%q): %s", form, all)
				}
			}
			var body map[string]string
			if err := json.Unmarshal([]byte(resp.Body), &body); err != nil {
				t.Fatalf("body %q: %v", resp.Body, err)
			}
			for _, k := range []string{"raw", "b64", "b64url", "query"} {
				if body[k] != "{{secret:api}}" {
					t.Errorf("body[%s] = %q, want the placeholder", k, body[k])
				}
			}
			if body["body"] != "token={{secret:api}}" {
				t.Errorf("echoed body = %q", body["body"])
			}
			if resp.Headers["X-Echo"][0] != "key={{secret:api}}" || resp.Status != 200 || resp.SecretsUsed[0] != "api" {
				t.Fatalf("response = %+v", resp)
			}
		})

		t.Run("refused for another host, before anything is sent", func(t *testing.T) {
			before := srv.hits.Load()
			_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:elsewhere}}"}})
			if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), `"elsewhere"`) || !strings.Contains(err.Error(), "127.0.0.1") ||
				strings.Contains(err.Error(), "sk-elsewhere") {
				t.Fatalf("err = %v", err)
			}
			// One approved and one unapproved secret: nothing is sent either.
			_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}, Body: "{{secret:elsewhere}}"})
			if codeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("err = %v", err)
			}
			if srv.hits.Load() != before {
				t.Fatal("the server was reached")
			}
		})

		t.Run("refused after expiry", func(t *testing.T) {
			before := srv.hits.Load()
			_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:old}}"}})
			if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "expired") || strings.Contains(err.Error(), "sk-old") {
				t.Fatalf("err = %v", err)
			}
			// A secret that expires later is refused once the clock passes it.
			soon := time.Now().Add(time.Hour)
			f.secret(t, f.alice, "soon", "sk-soon", []string{"127.0.0.1:" + srv.port()}, &soon)
			later := f.gateway(srv, outbound.Options{AllowPrivate: true, Now: func() time.Time { return soon.Add(time.Second) }})
			if _, err := later.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Body: "{{secret:soon}}"}); codeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("after expiry: %v", err)
			}
			if srv.hits.Load() != before {
				t.Fatal("the server was reached")
			}
			if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Body: "{{secret:soon}}"}); err != nil {
				t.Fatalf("before expiry: %v", err)
			}
		})

		t.Run("cross-user: placeholders resolve the caller's own secrets only", func(t *testing.T) {
			if _, err := g.Do(ctx, f.bobC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:elsewhere}}"}}); codeOf(err) != capabilities.CodeInvalidInput ||
				!strings.Contains(err.Error(), "no secret named") {
				t.Fatalf("bob uses alice's secret name: %v", err)
			}
			resp, err := g.Do(ctx, f.bobC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := srv.lastKey.Load(); got != "sk-bob" {
				t.Fatalf("bob's request carried %q", got)
			}
			if strings.Contains(resp.Body, "sk-bob") {
				t.Fatalf("bob's echo not scrubbed: %s", resp.Body)
			}
		})

		t.Run("bad requests", func(t *testing.T) {
			before := srv.hits.Load()
			for _, r := range []outbound.Request{
				{URL: srv.URL + "/?k={{secret:api}}"},
				{URL: srv.URL + "/%7B%7Bsecret:api%7D%7D"},
				{URL: strings.Replace(srv.URL, "https", "http", 1)},
				{URL: "https://user:pw@127.0.0.1:" + srv.port()},
				{URL: srv.URL, Method: "CONNECT"},
				{URL: srv.URL, Headers: map[string]string{"Host": "evil.example"}},
				{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:bad name}}"}},
				{URL: srv.URL, Headers: map[string]string{"X-Key": "a\r\nX-Injected: 1"}},
				{URL: srv.URL, Body: strings.Repeat("x", outbound.DefaultMaxRequestBytes+1)},
			} {
				if _, err := g.Do(ctx, f.aliceC, r); codeOf(err) != capabilities.CodeInvalidInput {
					t.Errorf("%.80v: err = %v", r, err)
				}
			}
			var many strings.Builder
			for i := range outbound.MaxSecretsPerRequest + 1 {
				fmt.Fprintf(&many, "{{secret:s%d}}", i)
			}
			if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Body: many.String()}); codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "at most") {
				t.Errorf("too many secrets: %v", err)
			}
			if srv.hits.Load() != before {
				t.Fatal("the server was reached")
			}
		})

		t.Run("audited: name, host, status; never the value", func(t *testing.T) {
			var evs []audit.Event
			if err := st.DB.NewSelect().Model(&evs).Where("category = ?", audit.CategoryOutbound).OrderExpr("id").Scan(ctx); err != nil {
				t.Fatal(err)
			}
			var ok, denied bool
			for _, e := range evs {
				if strings.Contains(e.Reason, "sk-") {
					t.Fatalf("audit row holds a value: %+v", e)
				}
				if e.Result == audit.ResultSuccess && e.Reason == "secret=api host=127.0.0.1 status=200" && e.UserHash == f.log.HashUser(f.alice.StableID) {
					ok = true
				}
				if e.Result == audit.ResultDenied && strings.Contains(e.Reason, "secret=elsewhere host=127.0.0.1") {
					denied = true
				}
			}
			if !ok || !denied {
				t.Fatalf("audit rows: %+v", evs)
			}
		})
	})
}

func TestGatewayRedirects(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	other := newServer(t, echo)
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
		case "/away":
			http.Redirect(w, r, "https://localhost:"+other.port()+"/stolen", http.StatusFound)
		default:
			echo(s, w, r)
		}
	})
	f.secret(t, f.alice, "api", "sk-redirected", []string{"127.0.0.1:" + srv.port()}, nil)
	// Every httptest server has the same certificate, which does not name
	// localhost: trust it whatever name was dialled.
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	anyName := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots})
		return err
	}}
	g := f.gateway(srv, outbound.Options{AllowPrivate: true, TLSConfig: anyName})

	// A redirect on an approved host keeps the secret (307 re-sends the body).
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{Method: "POST", URL: srv.URL + "/same", Headers: map[string]string{"X-Key": "{{secret:api}}"}, Body: "b={{secret:api}}"})
	if err != nil || !strings.HasSuffix(resp.URL, "/final") || srv.lastBod.Load() != "b=sk-redirected" {
		t.Fatalf("same-host redirect: %+v %v (body %v)", resp, err, srv.lastBod.Load())
	}
	// A redirect to a host the secret is not approved for is refused, and
	// nothing reaches that host.
	_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/away", Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "localhost") || !strings.Contains(err.Error(), `"api"`) || strings.Contains(err.Error(), "sk-redirected") {
		t.Fatalf("redirect away: %v", err)
	}
	if other.hits.Load() != 0 {
		t.Fatal("the secret followed the redirect to an unapproved host")
	}
	var denied int
	if err := st.DB.NewSelect().Table("audit_events").ColumnExpr("count(*)").
		Where("category = ? AND result = ? AND reason LIKE ?", audit.CategoryOutbound, audit.ResultDenied, "secret=api host=localhost %").Scan(ctx, &denied); err != nil || denied != 1 {
		t.Fatalf("refused redirect audited %d times (%v)", denied, err)
	}
	// Without secrets the host check does not apply: the redirect is
	// followed (egress's address and scheme checks still run).
	resp, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/away"})
	if err != nil || other.hits.Load() != 1 || !strings.HasSuffix(resp.URL, "/stolen") {
		t.Fatalf("redirect without secrets: %+v %v", resp, err)
	}
	// Too many redirects.
	loop := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/again", http.StatusFound)
	})
	gl := f.gateway(loop, outbound.Options{AllowPrivate: true, Limits: outbound.Limits{MaxRedirects: 2}})
	if _, err := gl.Do(ctx, f.aliceC, outbound.Request{URL: loop.URL}); codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "more than 2 redirects") {
		t.Fatalf("redirect loop: %v", err)
	}
	if n := loop.hits.Load(); n != 3 {
		t.Fatalf("loop hits = %d, want 3", n)
	}
}

func TestGatewayPrivateAddressRefused(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	srv := newServer(t, echo)
	f.secret(t, f.alice, "api", "sk-private", []string{"127.0.0.1:" + srv.port(), "localhost:" + srv.port()}, nil)
	// Trusting the test certificate, but without the test-only AllowPrivate.
	g := f.gateway(srv, outbound.Options{})
	for _, r := range []outbound.Request{
		{URL: srv.URL},
		{URL: "https://localhost:" + srv.port(), Headers: map[string]string{"X-Key": "{{secret:api}}"}},
		{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}},
	} {
		_, err := g.Do(ctx, f.aliceC, r)
		if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "not on the public internet") {
			t.Fatalf("%s: err = %v", r.URL, err)
		}
	}
	if srv.hits.Load() != 0 {
		t.Fatal("a loopback server was reached")
	}
}

func TestGatewayLimits(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	big := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(500 * time.Millisecond)
		}
		io.WriteString(w, strings.Repeat("x", 4096))
	})
	m := quota.New(st, quota.Limits{}, nil)
	g := f.gateway(big, outbound.Options{AllowPrivate: true, Quota: m,
		Limits: outbound.Limits{DailyRequests: 3, MaxResponseBytes: 1024, Timeout: 200 * time.Millisecond}})
	if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: big.URL}); codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "larger than 1024 bytes") {
		t.Fatalf("large response: %v", err)
	}
	if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: big.URL + "/slow"}); codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("slow response: %v", err)
	}
	if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: big.URL}); codeOf(err) != capabilities.CodeConflict {
		t.Fatalf("third: %v", err)
	}
	hits := big.hits.Load()
	_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: big.URL})
	if at, ok := capabilities.RetryAfterOf(err); codeOf(err) != capabilities.CodeQuotaExceeded || !ok || at.Before(time.Now()) ||
		!strings.Contains(err.Error(), "Daily limit of 3 outbound requests") {
		t.Fatalf("fourth request of the day: %v", err)
	}
	if big.hits.Load() != hits {
		t.Fatal("a request over the quota was sent")
	}
	// The quota is per user.
	if _, err := g.Do(ctx, f.bobC, outbound.Request{URL: big.URL}); codeOf(err) == capabilities.CodeQuotaExceeded {
		t.Fatalf("bob is refused by alice's quota: %v", err)
	}
}

// The capability runs Do through the registry, for the calling user.
func TestHTTPRequestCapability(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	srv := newServer(t, echo)
	f.secret(t, f.alice, "api", "sk-cap-value", []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	reg := capabilities.NewRegistry(capabilities.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := reg.Register(g.Capability()); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"url": srv.URL, "headers": map[string]string{"X-Key": "{{secret:api}}"}})
	res, err := reg.Invoke(ctx, f.aliceC, "httpRequest", args)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(res)
	if strings.Contains(string(out), "sk-cap-value") || !strings.Contains(string(out), "{{secret:api}}") || srv.lastKey.Load() != "sk-cap-value" {
		t.Fatalf("result = %s", out)
	}
	if _, err := reg.Invoke(ctx, f.bobC, "httpRequest", args); codeOf(err) != capabilities.CodeInvalidInput {
		t.Fatalf("bob: %v", err)
	}
}

// anyNameTLS trusts the httptest certificate whatever name was dialled
// (the certificate names 127.0.0.1 and example.com only).
func anyNameTLS(srv *server) *tls.Config {
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots})
		return err
	}}
}

// A host is approved under the name the request is sent to. Go lowercases
// U+0130 (İ) to a plain "i"; IDNA, which net/http resolves with, maps it
// to "i" plus a combining dot: APİ.example.com is xn--api-bec.example.com,
// not api.example.com.
func TestGatewayApprovesTheSentHostName(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	other := newServer(t, echo)
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upper":
			http.Redirect(w, r, "https://LOCALHOST.:"+other.port()+"/ok", http.StatusTemporaryRedirect)
		case "/dotted-i":
			http.Redirect(w, r, "https://İ.localhost:"+other.port()+"/stolen", http.StatusTemporaryRedirect)
		default:
			echo(s, w, r)
		}
	})
	f.secret(t, f.alice, "api", "sk-idna-value", []string{"api.example.com", "127.0.0.1:" + srv.port(), "localhost:" + other.port(), "i.localhost:" + other.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true, TLSConfig: anyNameTLS(srv), Limits: outbound.Limits{Timeout: 3 * time.Second}})

	_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: "https://APİ.example.com/", Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "not approved for host xn--api-bec.example.com") {
		t.Fatalf("APİ.example.com: %v", err)
	}
	// A redirect's name is compared, and followed, the same way.
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/upper", Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if err != nil || other.hits.Load() != 1 || other.lastKey.Load() != "sk-idna-value" || !strings.Contains(resp.URL, "https://localhost:"+other.port()+"/ok") {
		t.Fatalf("redirect to LOCALHOST.: %+v %v", resp, err)
	}
	_, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/dotted-i", Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "Redirect to xn--i-9bb.localhost refused") {
		t.Fatalf("redirect to İ.localhost: %v", err)
	}
	if other.hits.Load() != 1 {
		t.Fatal("the secret followed a redirect to an unapproved host")
	}
}

// The size limits apply to the request as sent, secrets filled in: a body
// of placeholders for a 64 KiB secret would otherwise grow 5,000-fold in
// memory (1 MiB of placeholders: about 5.6 GB).
func TestGatewayBoundsTheFilledRequest(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, st *storage.Store) {
		ctx := context.Background()
		f := setup(t, st)
		srv := newServer(t, echo)
		f.secret(t, f.alice, "big", strings.Repeat("k", secrets.MaxValueBytes), []string{"127.0.0.1:" + srv.port()}, nil)
		g := f.gateway(srv, outbound.Options{AllowPrivate: true})
		body := strings.Repeat("{{secret:big}}", 20) // 280 bytes; 1.3 MB filled
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{Method: "POST", URL: srv.URL, Body: body}); codeOf(err) != capabilities.CodeInvalidInput ||
			!strings.Contains(err.Error(), "body is larger than") {
			t.Fatalf("body of placeholders: %v", err)
		}
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:big}}{{secret:big}}{{secret:big}}"}}); codeOf(err) != capabilities.CodeInvalidInput ||
			!strings.Contains(err.Error(), "headers are larger than") {
			t.Fatalf("header of placeholders: %v", err)
		}
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Pad": strings.Repeat("p", outbound.MaxHeaderBytes)}}); codeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("oversized header: %v", err)
		}
		if srv.hits.Load() != 0 {
			t.Fatal("an oversized request was sent")
		}
		// Within the limits the secret is filled in.
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{Method: "POST", URL: srv.URL, Body: "{{secret:big}}"}); err != nil || len(srv.lastBod.Load().(string)) != secrets.MaxValueBytes {
			t.Fatalf("one placeholder: %v", err)
		}
	})
}

// An echo is scrubbed whatever shape the transfer takes: a caller may not
// ask for a compressed answer (net/http would hand it over compressed, the
// secret inside unseen by the scrubber), an answer compressed for the
// transport's own request is decompressed before scrubbing, and header
// names are scrubbed like values.
func TestGatewayScrubsCompressedEcho(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	const key = "Sk-Gzip-Secret-Value"
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("X-Key")
		w.Header()[k] = []string{"1"}
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "key=%s", k)
			zw.Close()
			return
		}
		fmt.Fprintf(w, "key=%s", k)
	})
	f.secret(t, f.alice, "api", key, []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})

	leaks := func(resp outbound.Response) bool {
		all, _ := json.Marshal(resp)
		if strings.Contains(string(all), key) {
			return true
		}
		if resp.BodyEncoding == "base64" {
			raw, _ := base64.StdEncoding.DecodeString(resp.Body)
			if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
				plain, _ := io.ReadAll(zr)
				return strings.Contains(string(plain), key)
			}
		}
		return false
	}
	before := srv.hits.Load()
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}", "Accept-Encoding": "gzip"}})
	if err == nil && leaks(resp) {
		t.Fatalf("the secret came back compressed: %+v", resp)
	}
	if codeOf(err) != capabilities.CodeInvalidInput || srv.hits.Load() != before {
		t.Fatalf("Accept-Encoding from the caller: %v", err)
	}
	resp, err = g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if err != nil || leaks(resp) || resp.Body != "key={{secret:api}}" || resp.Headers["{{secret:api}}"] == nil {
		t.Fatalf("transport-compressed echo: %+v %v", resp, err)
	}
}

// A response naming two codings in two Content-Encoding lines is decoded
// whole or refused: net/http, left to decode its own gzip, would undo one
// layer and drop the header, handing the agent a gzip body holding the
// echo. A reserved header spelled with an underscore is still reserved.
func TestGatewayScrubsStackedEncodingLines(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	const key = "Sk-Stacked-Gzip-Secret"
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Encoding"] = []string{"gzip", "gzip"}
		w.Write(gz(gz([]byte("key=" + r.Header.Get("X-Key")))))
	})
	f.secret(t, f.alice, "api", key, []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if err == nil {
		body := []byte(resp.Body)
		if resp.BodyEncoding == "base64" {
			body, _ = base64.StdEncoding.DecodeString(resp.Body)
		}
		for range 3 {
			zr, zerr := gzip.NewReader(bytes.NewReader(body))
			if zerr != nil {
				break
			}
			body, _ = io.ReadAll(zr)
		}
		if strings.Contains(string(body), key) {
			t.Errorf("the secret came back under a second gzip layer: %+v", resp)
		} else if resp.Body != "key={{secret:api}}" {
			t.Errorf("stacked gzip: %+v", resp)
		}
	}
	// An answer without a body holds no echo, whatever coding it names
	// (a HEAD, a 204).
	empty := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		w.WriteHeader(http.StatusNoContent)
	})
	f.secret(t, f.alice, "api2", key, []string{"127.0.0.1:" + empty.port()}, nil)
	g2 := f.gateway(empty, outbound.Options{AllowPrivate: true})
	for _, m := range []string{http.MethodHead, http.MethodGet} {
		if resp, err := g2.Do(ctx, f.aliceC, outbound.Request{Method: m, URL: empty.URL, Headers: map[string]string{"X-Key": "{{secret:api2}}"}}); err != nil || resp.Status != http.StatusNoContent {
			t.Errorf("%s, no body, Content-Encoding br: %+v %v", m, resp, err)
		}
	}
	before := srv.hits.Load()
	for _, name := range []string{"If_Range", "accept_encoding", "Transfer_Encoding"} {
		if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{name: "x"}}); codeOf(err) != capabilities.CodeInvalidInput {
			t.Errorf("header %q: %v, want refused", name, err)
		}
	}
	if srv.hits.Load() != before {
		t.Fatal("a request with a reserved header was sent")
	}
}

// A refused redirect is audited with its host, which the server chose: a
// Location that echoes the secret must not put the value in the audit log.
func TestGatewayAuditOfRefusedRedirectIsScrubbed(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	const key = "sk-audit-leak-7f3a"
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://"+r.Header.Get("X-Key")+".invalid/", http.StatusFound)
	})
	f.secret(t, f.alice, "api", key, []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "refused") || strings.Contains(err.Error(), key) {
		t.Fatalf("err = %v", err)
	}
	var evs []audit.Event
	if err := st.DB.NewSelect().Model(&evs).Where("category = ?", audit.CategoryOutbound).Scan(ctx); err != nil || len(evs) == 0 {
		t.Fatalf("audit rows: %v %v", evs, err)
	}
	for _, e := range evs {
		if strings.Contains(e.Reason, key) {
			t.Fatalf("audit row holds the value: %q", e.Reason)
		}
	}
}

// Echoes in the shapes common servers write JSON and URLs in are scrubbed:
// PHP escapes "/" (an AWS-style key has several), Python writes non-ASCII
// as \u escapes, some servers percent-encode in lowercase, and JSON without
// Go's HTML escaping leaves <, > and & alone.
func TestGatewayScrubsCommonEchoShapes(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	const key = "wJalrXUtnFEMI/K7MDENG/bPxRfi<&>Ключ"
	shapes := []string{
		strings.ReplaceAll(key, "/", `\/`),
		`wJalrXUtnFEMI/K7MDENG/bPxRfi<&>\u041a\u043b\u044e\u0447`,
		regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(url.QueryEscape(key), strings.ToLower),
		key,
	}
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != key {
			http.Error(w, "wrong key", http.StatusForbidden)
			return
		}
		io.WriteString(w, strings.Join(shapes, "\n"))
	})
	f.secret(t, f.alice, "aws", key, []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:aws}}"}})
	if err != nil || resp.Status != 200 {
		t.Fatalf("%+v %v", resp, err)
	}
	for i, line := range strings.Split(resp.Body, "\n") {
		if line != "{{secret:aws}}" {
			t.Errorf("shape %d (%q) came back as %q", i, shapes[i], line)
		}
	}
}

// A user may have only so many requests in flight: a slow server cannot
// make one agent hold its whole daily quota of connections and response
// buffers at once. Other users are not affected; a finished request frees
// its place.
func TestGatewayBoundsRequestsInFlight(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	release := make(chan struct{})
	var held atomic.Int32
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held.Add(1)
			<-release
		}
		io.WriteString(w, "ok")
	})
	g := f.gateway(srv, outbound.Options{AllowPrivate: true, Limits: outbound.Limits{MaxConcurrent: 2, Timeout: 10 * time.Second}})
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/hold"})
			done <- err
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); held.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the held requests did not arrive")
		}
	}
	_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/quick"})
	_, bobErr := g.Do(ctx, f.bobC, outbound.Request{URL: srv.URL + "/quick"})
	close(release)
	for range 2 {
		if e := <-done; e != nil {
			t.Errorf("held request: %v", e)
		}
	}
	if codeOf(err) != capabilities.CodeQuotaExceeded || !strings.Contains(err.Error(), "in flight") {
		t.Fatalf("third request in flight: %v", err)
	}
	if bobErr != nil {
		t.Fatalf("bob is refused by alice's requests in flight: %v", bobErr)
	}
	if _, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/quick"}); err != nil {
		t.Fatalf("after the held requests finished: %v", err)
	}
}

// Scrubbing a short secret replaces each byte of its echo by a longer
// placeholder: the scrubbed body is bounded (twice MaxResponseBytes) and
// never built past that bound.
func TestGatewayBoundsTheScrubbedBody(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat(r.Header.Get("X-Key"), 64<<10))
	})
	f.secret(t, f.alice, "s", "a", []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true, Limits: outbound.Limits{MaxResponseBytes: 64 << 10}})
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:s}}"}})
	if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "replaced by placeholders, is larger than") {
		t.Fatalf("64 KiB echo of a 1-byte secret: %d bytes, %v", len(resp.Body), err)
	}
	// An echo that shrinks or stays within the bound comes back scrubbed.
	srv2 := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat(r.Header.Get("X-Key")+" ", 100))
	})
	f.secret(t, f.alice, "long", "sk-a-long-enough-value", []string{"127.0.0.1:" + srv2.port()}, nil)
	g2 := f.gateway(srv2, outbound.Options{AllowPrivate: true, Limits: outbound.Limits{MaxResponseBytes: 64 << 10}})
	resp, err = g2.Do(ctx, f.aliceC, outbound.Request{URL: srv2.URL, Headers: map[string]string{"X-Key": "{{secret:long}}"}})
	if err != nil || resp.Body != strings.Repeat("{{secret:long}} ", 100) {
		t.Fatalf("%q %v", resp.Body, err)
	}
}

// A reflected secret must not come back in pieces: Range and If-Range
// are the gateway's, and a 206 to a request carrying secrets is refused
// (a server may send one unasked).
func TestGatewayRefusesPartialAnswers(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	const key = "sk-partial-secret-value"
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("X-Key")
		if len(k) >= 4 {
			k = k[:4] // a piece too short to be recognised
		}
		w.Header().Set("Content-Range", "bytes 0-3/"+fmt.Sprint(len(r.Header.Get("X-Key"))))
		w.WriteHeader(http.StatusPartialContent)
		io.WriteString(w, k)
	})
	f.secret(t, f.alice, "api", key, []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	for _, h := range []string{"Range", "range", "If-Range"} {
		before := srv.hits.Load()
		_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}", h: "bytes=0-3"}})
		if codeOf(err) != capabilities.CodeInvalidInput || srv.hits.Load() != before {
			t.Fatalf("%s from the caller: %v", h, err)
		}
	}
	resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), "(206)") || strings.Contains(err.Error(), "sk-p") || resp.Body != "" {
		t.Fatalf("206 to a secret-bearing request: %+v %v", resp, err)
	}
	// Without secrets, a 206 is an answer like any other.
	if resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL}); err != nil || resp.Status != http.StatusPartialContent {
		t.Fatalf("206 without secrets: %+v %v", resp, err)
	}
}

// A server may compress its answer in a coding nobody asked for; the
// gateway decodes gzip and deflate (bounded) before scrubbing and refuses
// what it cannot read.
func TestGatewayScrubsUnaskedEncodings(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	const key = "sk-encoded-secret-value"
	compress := func(coding string, b []byte) []byte {
		var buf bytes.Buffer
		var w io.WriteCloser
		switch coding {
		case "gzip":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		case "raw-deflate":
			w, _ = flate.NewWriter(&buf, flate.BestSpeed)
		}
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	srv := newServer(t, func(s *server, w http.ResponseWriter, r *http.Request) {
		body := []byte("key=" + r.Header.Get("X-Key"))
		switch mode := r.URL.Query().Get("mode"); mode {
		case "gzip", "deflate":
			w.Header().Set("Content-Encoding", mode)
			w.Write(compress(mode, body))
		case "raw-deflate":
			w.Header().Set("Content-Encoding", "deflate")
			w.Write(compress(mode, body))
		case "stacked":
			w.Header().Set("Content-Encoding", "deflate, gzip")
			w.Write(compress("gzip", compress("deflate", body)))
		case "br":
			w.Header().Set("Content-Encoding", "br")
			w.Write(body) // whatever the bytes, the gateway cannot read br
		case "named":
			w.Header().Set("Content-Encoding", r.Header.Get("X-Key"))
			w.Write(body)
		case "bomb":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(compress("gzip", bytes.Repeat([]byte("0"), 8<<20)))
		case "corrupt":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte("not gzip at all"))
		}
	})
	f.secret(t, f.alice, "api", key, []string{"127.0.0.1:" + srv.port()}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	call := func(mode string) (outbound.Response, error) {
		return g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL + "/?mode=" + mode, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	}
	for _, mode := range []string{"gzip", "deflate", "raw-deflate", "stacked"} {
		resp, err := call(mode)
		if err != nil || resp.Body != "key={{secret:api}}" || resp.Headers["Content-Encoding"] != nil {
			t.Fatalf("%s: %+v %v", mode, resp, err)
		}
	}
	for mode, want := range map[string]string{"br": `encoded as "br"`, "named": "encoded as", "bomb": "larger than", "corrupt": ""} {
		resp, err := call(mode)
		if codeOf(err) != capabilities.CodeConflict || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), key) || resp.Body != "" {
			t.Fatalf("%s: %+v %v", mode, resp, err)
		}
	}
	var leaked, refused int
	if err := st.DB.NewSelect().Table("audit_events").ColumnExpr("COUNT(*)").Where("reason LIKE ?", "%"+key+"%").Scan(ctx, &leaked); err != nil || leaked != 0 {
		t.Fatalf("the secret reached the audit log %d times (%v)", leaked, err)
	}
	if err := st.DB.NewSelect().Table("audit_events").ColumnExpr("COUNT(*)").Where("result = ? AND reason LIKE ?", audit.ResultDenied, "%encoded as%").Scan(ctx, &refused); err != nil || refused != 2 {
		t.Fatalf("refused encodings audited: %d (%v)", refused, err)
	}
}

// Approving a host without a port approves port 443 only: a secret for
// 127.0.0.1 does not go to 127.0.0.1 on the test server's port.
func TestGatewayHostApprovalNamesThePort(t *testing.T) {
	st := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	f := setup(t, st)
	srv := newServer(t, echo)
	f.secret(t, f.alice, "api", "sk-port-value", []string{"127.0.0.1"}, nil)
	g := f.gateway(srv, outbound.Options{AllowPrivate: true})
	_, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}})
	if codeOf(err) != capabilities.CodeInvalidInput || !strings.Contains(err.Error(), "not approved") || srv.hits.Load() != 0 {
		t.Fatalf("a secret approved for port 443 sent to port %s: %v", srv.port(), err)
	}
	f.secret(t, f.alice, "api", "sk-port-value", []string{"127.0.0.1:" + srv.port()}, nil)
	if resp, err := g.Do(ctx, f.aliceC, outbound.Request{URL: srv.URL, Headers: map[string]string{"X-Key": "{{secret:api}}"}}); err != nil || srv.hits.Load() != 1 || !strings.Contains(resp.Body, "{{secret:api}}") {
		t.Fatalf("with the port approved: %+v %v", resp, err)
	}
}
