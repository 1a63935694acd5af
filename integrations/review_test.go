package integrations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newLoggedService is newService with its log kept in buf.
func newLoggedService(t testing.TB, s *storage.Store, buf *syncBuffer, now func() time.Time, ps ...integrations.Provider) *integrations.Service {
	t.Helper()
	ring, err := envelope.Open(context.Background(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Config{Options: integrations.Options{Providers: ps}, Store: s, Ring: ring,
		Owners: owners, BaseURL: "https://enclave.example", Logger: slog.New(slog.NewTextHandler(buf, nil)), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// Review (#31): a hostile provider's token endpoint answers an error whose
// RFC 6749 "error" parameter echoes the refresh token (or the code) it was
// sent. The log, the lane's error and Use's error must not carry it: only
// a standard error code is ever repeated.
func TestReviewProviderErrorEchoNeverLogged(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFakeProvider(t)
	f.ttl = time.Minute // due for renewal at once
	var buf syncBuffer
	svc := newLoggedService(t, s, &buf, nil, provider(f, false))
	alice := addUser(t, s, "alice")
	connect(t, svc, f, alice, "")
	var echoed []string
	f.tokenHook = func(w http.ResponseWriter) bool { return false }
	f.mu.Lock()
	for rt := range f.refresh {
		echoed = append(echoed, rt)
	}
	f.mu.Unlock()
	if len(echoed) != 1 {
		t.Fatalf("refresh tokens: %v", echoed)
	}
	rt := echoed[0]
	f.tokenHook = func(w http.ResponseWriter) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": rt, "error_description": "bad " + rt})
		return true
	}
	_, lerr := svc.RefreshDue(t.Context(), 10)
	if lerr == nil {
		t.Fatal("a failed renewal reported no error")
	}
	_, uerr := svc.Use(t.Context(), ownerOf(alice), "acme")
	for what, text := range map[string]string{"log": buf.String(), "lane error": lerr.Error(), "use error": errText(uerr)} {
		if strings.Contains(text, rt) || strings.Contains(text, rt[:20]) {
			t.Fatalf("the %s carries the refresh token the provider echoed: %s", what, text)
		}
	}
	if !strings.Contains(buf.String(), "token refresh failed") {
		t.Fatalf("the failed renewal was not logged: %s", buf.String())
	}

	// The code exchange: the provider echoes the code.
	f.tokenHook = nil
	u, err := svc.Start(t.Context(), ownerOf(alice), "acme", "second", binding)
	if err != nil {
		t.Fatal(err)
	}
	q := f.authorize(t, u)
	code := q.Get("code")
	f.tokenHook = func(w http.ResponseWriter) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
		return true
	}
	_, ferr := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: code})
	if ferr == nil {
		t.Fatal("connected with a refused exchange")
	}
	if strings.Contains(buf.String(), code) || strings.Contains(ferr.Error(), code) {
		t.Fatalf("the code the provider echoed reached the log or the error: %s / %v", buf.String(), ferr)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Review (#31): a provider issuing access tokens that live less than
// RefreshBefore (a hostile one: expires_in of a few seconds) made every
// Use (every outbound request naming the connection, even one the gateway
// then refuses for its host) call the provider's token endpoint: an agent
// could make enclave hammer the provider without bound. A connection is
// renewed at most once per MinRefreshInterval.
func TestReviewRefreshIsRateLimited(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		f.ttl = time.Minute // always inside RefreshBefore
		svc := newService(t, s, provider(f, false))
		alice := addUser(t, s, "alice")
		connect(t, svc, f, alice, "")
		issued := func() int {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.issued)
		}
		before := issued()
		for range 20 {
			u, err := svc.Use(t.Context(), ownerOf(alice), "acme")
			if err != nil || u.AccessToken == "" {
				t.Fatalf("use: %v", err)
			}
		}
		if n := issued() - before; n > 1 {
			t.Fatalf("20 uses within a few seconds renewed the token %d times", n)
		}
		// Later than MinRefreshInterval, a use renews it again.
		later := newServiceAt(t, s, func() time.Time { return time.Now().Add(integrations.MinRefreshInterval + time.Second) }, provider(f, false))
		before = issued()
		if _, err := later.Use(t.Context(), ownerOf(alice), "acme"); err != nil {
			t.Fatal(err)
		}
		if issued()-before != 1 {
			t.Fatal("a token about to expire was not renewed after MinRefreshInterval")
		}
	})
}

// Review (#31): the token response's "scope" is the provider's text and
// was stored and shown as is (connectionList, the page, the export): a
// provider echoing the access or refresh token there put it in front of
// the agent. A granted scope holding a token is dropped.
func TestReviewScopeEchoingTokenDropped(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFakeProvider(t)
	const at, rt = "at-echoed-0123456789abcdef", "rt-echoed-0123456789abcdef"
	f.tokenHook = func(w http.ResponseWriter) bool {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": at, "refresh_token": rt, "token_type": "Bearer",
			"expires_in": 3600, "scope": "read access=" + at + " " + rt + ",write"})
		return true
	}
	svc := newService(t, s, provider(f, false))
	alice := addUser(t, s, "alice")
	conn := connect(t, svc, f, alice, "")
	list, err := svc.List(t.Context(), ownerOf(alice))
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]any{"connection": conn, "list": list} {
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), "0123456789abcdef") {
			t.Fatalf("the %s shows a token the provider echoed in its scope: %s", what, b)
		}
	}
	if len(list) != 1 || strings.Join(list[0].Scopes, " ") != "read write" {
		t.Fatalf("scopes: %+v", list)
	}
}

// Review (#31): a renewal racing a disconnect (or the account's deletion)
// got fresh tokens from the provider after the connection's row was gone:
// they were dropped unrevoked, still usable at the provider by anyone who
// saw them. Tokens a renewal cannot store are revoked.
func TestReviewRefreshAfterDisconnectRevokesNewTokens(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		f.ttl = time.Minute // due at once
		svc := newService(t, s, provider(f, false))
		alice := addUser(t, s, "alice")
		connect(t, svc, f, alice, "")
		// While the provider renews the token, the person disconnects: the
		// row goes before the renewal is stored.
		var once sync.Once
		f.tokenHook = func(http.ResponseWriter) bool {
			once.Do(func() {
				if _, err := s.DB.NewDelete().Table("integration_connections").Where("user_id = ?", alice.OwnerID).Exec(context.Background()); err != nil {
					t.Error(err)
				}
			})
			return false
		}
		if _, err := svc.RefreshDue(t.Context(), 10); err != nil {
			t.Logf("refresh: %v", err)
		}
		issued := f.lastAccessToken()
		f.mu.Lock()
		live := len(f.refresh)
		f.mu.Unlock()
		if live != 0 {
			t.Fatalf("%d refresh token(s) issued for a disconnected connection are still live at the provider", live)
		}
		if rev := f.revocations(); !slices.Contains(rev, issued) {
			t.Fatalf("the access token issued for a disconnected connection was not revoked: %v", rev)
		}
	})
}

// Review (#31): RevokeAll runs inside the account's deletion (often the
// person's own request): a provider whose revocation endpoint hangs held
// it DefaultHTTPTimeout per token, 2 x MaxConnections times (50 minutes).
// The attempts share one budget; what it leaves is recorded as failed and
// the deletion goes on.
func TestReviewRevokeAllIsBounded(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFakeProvider(t)
	svc := newService(t, s, provider(f, false))
	alice := addUser(t, s, "alice")
	for _, n := range []string{"a", "b", "c"} {
		connect(t, svc, f, alice, n)
	}
	var mu sync.Mutex
	calls := 0
	f.revokeHook = func(r *http.Request) bool {
		mu.Lock()
		calls++
		mu.Unlock()
		_ = r.ParseForm()    // the whole request read: a client hanging up is seen
		<-r.Context().Done() // hangs until enclave gives up
		return true
	}
	integrations.SetRevokeAllBudget(t, 300*time.Millisecond)
	if err := svc.RevokeAll(t.Context(), ownerOf(alice)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls > 1 {
		t.Fatalf("after the budget ran out, RevokeAll still called the hanging provider %d times", calls)
	}
}

// Review (#31): the refresh lane renewed up to 100 connections one after
// the other, DefaultHTTPTimeout each: a provider that does not answer held
// every person's renewals for 25 minutes a tick. A tick has a budget; what
// it leaves stays due.
func TestReviewRefreshDueIsBounded(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	f := newFakeProvider(t)
	f.ttl = time.Minute // due at once
	svc := newService(t, s, provider(f, false))
	alice := addUser(t, s, "alice")
	for _, n := range []string{"a", "b", "c"} {
		connect(t, svc, f, alice, n)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the provider closes
	var mu sync.Mutex
	calls := 0
	f.tokenHook = func(http.ResponseWriter) bool {
		mu.Lock()
		calls++
		mu.Unlock()
		<-release
		return true
	}
	integrations.SetRefreshDueBudget(t, 300*time.Millisecond)
	n, _ := svc.RefreshDue(t.Context(), 10)
	mu.Lock()
	defer mu.Unlock()
	if n != 0 || calls > 1 {
		t.Fatalf("renewed %d; the hanging provider was called %d times in one tick", n, calls)
	}
	list, err := svc.List(t.Context(), ownerOf(alice))
	if err != nil || len(list) != 3 {
		t.Fatal(list, err)
	}
	for _, c := range list {
		if c.Status != integrations.StatusActive {
			t.Fatalf("a connection the tick did not reach changed: %+v", c)
		}
	}
}

// A mix-up: the flow was started for one provider, and the code comes
// back on another provider's callback path (a hostile provider sent the
// person to an honest one with its own state). Nothing is exchanged: the
// code and verifier never reach the flow's token endpoint, and the state
// is used up.
func TestReviewCallbackOnAnotherProvidersPath(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		svc := newService(t, s, provider(f, false))
		alice := addUser(t, s, "alice")
		if got := svc.RedirectURL("acme"); !strings.HasSuffix(got, integrations.CallbackPath+"/acme") {
			t.Fatalf("redirect URL %q", got)
		}
		u, err := svc.Start(t.Context(), ownerOf(alice), "acme", "", binding)
		if err != nil {
			t.Fatal(err)
		}
		q := f.authorize(t, u)
		var calls atomic.Int32
		f.tokenHook = func(http.ResponseWriter) bool { calls.Add(1); return false }
		for _, other := range []string{"honest", "", "ACME"} {
			if _, err := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: other, State: q.Get("state"), Code: q.Get("code")}); err == nil {
				t.Fatalf("a callback on provider %q's path connected acme", other)
			}
		}
		if n := calls.Load(); n != 0 {
			t.Fatalf("the code went to the token endpoint %d times", n)
		}
		if _, err := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: q.Get("code")}); err == nil {
			t.Fatal("the state survived a refused callback")
		}
	})
}
