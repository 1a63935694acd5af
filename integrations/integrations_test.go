package integrations_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func addUser(t testing.TB, s *storage.Store, name string) capabilities.Caller {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	stable := hex.EncodeToString(sum[:])
	now := time.Now().UTC()
	var id int64
	err := s.DB.NewRaw("INSERT INTO users (stable_user_id, email, username, created_at, updated_at) VALUES (?, ?, ?, ?, ?) RETURNING id",
		stable, name+"@example.com", name, now, now).Scan(context.Background(), &id)
	if err != nil {
		t.Fatal(err)
	}
	return capabilities.Caller{UserID: stable, OwnerID: id, Username: name, Roles: []string{"user"},
		Permissions: []capabilities.Permission{capabilities.ReadUserOwn, capabilities.UpdateUserOwn},
		AllScopes:   true, State: capabilities.AccountActive, Interactive: true}
}

func ownerOf(c capabilities.Caller) storage.Owner {
	return storage.Owner{ID: c.OwnerID, StableID: c.UserID}
}

const binding = "browser-binding-0123456789"

func provider(f *fakeProvider, discover bool) integrations.Provider {
	p := integrations.Provider{Name: "acme", ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{"read", "write"},
		APIHosts: []string{"api.acme.example"}}
	if discover {
		p.Issuer = f.srv.URL
	} else {
		p.AuthURL, p.TokenURL, p.RevokeURL = f.srv.URL+"/authorize", f.srv.URL+"/token", f.srv.URL+"/revoke"
	}
	return p
}

// connect runs the whole flow for c and returns the connection.
func connect(t *testing.T, svc *integrations.Service, f *fakeProvider, c capabilities.Caller, name string) integrations.Connection {
	t.Helper()
	u, err := svc.Start(t.Context(), ownerOf(c), "acme", name, binding)
	if err != nil {
		t.Fatal(err)
	}
	q := f.authorize(t, u)
	conn, err := svc.Finish(t.Context(), ownerOf(c), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: q.Get("code")})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestConnectUseDisconnect(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		for _, discover := range []bool{false, true} {
			f := newFakeProvider(t)
			svc := newService(t, s, provider(f, discover))
			alice := addUser(t, s, "alice-"+map[bool]string{false: "urls", true: "issuer"}[discover])
			conn := connect(t, svc, f, alice, "")
			if conn.Name != "acme" || conn.Provider != "acme" || conn.Status != integrations.StatusActive || !slices.Equal(conn.Scopes, []string{"read", "write"}) {
				t.Fatalf("connection: %+v", conn)
			}
			token := f.lastAccessToken()
			list, err := svc.List(t.Context(), ownerOf(alice))
			if err != nil || len(list) != 1 {
				t.Fatalf("list: %+v %v", list, err)
			}
			if b, _ := json.Marshal(list); strings.Contains(string(b), token) {
				t.Fatal("the list shows the token")
			}
			u, err := svc.Use(t.Context(), ownerOf(alice), "acme")
			if err != nil || u.AccessToken != token || !slices.Equal(u.APIHosts, []string{"api.acme.example"}) {
				t.Fatalf("use: %+v %v", u, err)
			}
			if list, _ = svc.List(t.Context(), ownerOf(alice)); list[0].LastUsedAt == nil {
				t.Fatal("last use not recorded")
			}
			// The tokens are sealed: the row holds neither.
			var raw string
			if err := s.DB.NewRaw("SELECT token_ciphertext FROM integration_connections WHERE user_id = ?", alice.OwnerID).Scan(t.Context(), &raw); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(raw, token) || strings.Contains(raw, "rt-") {
				t.Fatal("token stored in clear")
			}
			d, err := svc.Disconnect(t.Context(), ownerOf(alice), "acme")
			if err != nil || !d.Disconnected || !d.Revoked {
				t.Fatalf("disconnect: %+v %v", d, err)
			}
			rev := f.revocations()
			if len(rev) != 2 || !strings.HasPrefix(rev[0], "rt-") || rev[1] != token {
				t.Fatalf("revoked at the provider: %v", rev)
			}
			if _, err := svc.Use(t.Context(), ownerOf(alice), "acme"); !errors.Is(err, integrations.ErrNotFound) {
				t.Fatalf("use after disconnect: %v", err)
			}
		}
	})
}

// The state is single-use and bound to the person and the browser that
// started the flow: a replay, another account, another browser or a late
// callback connects nothing.
func TestStateIsBoundAndSingleUse(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		svc := newService(t, s, provider(f, false))
		alice, bob := addUser(t, s, "alice"), addUser(t, s, "bob")
		start := func(c capabilities.Caller) (state, code string) {
			u, err := svc.Start(t.Context(), ownerOf(c), "acme", "", binding)
			if err != nil {
				t.Fatal(err)
			}
			q := f.authorize(t, u)
			return q.Get("state"), q.Get("code")
		}
		cur := svc
		refused := func(what string, c capabilities.Caller, b, state, code string) {
			t.Helper()
			_, err := cur.Finish(t.Context(), ownerOf(c), b, integrations.Callback{Provider: "acme", State: state, Code: code})
			var ce *capabilities.Error
			if !errors.As(err, &ce) || ce.Code != capabilities.CodeInvalidInput || !strings.Contains(ce.Message, "not valid") {
				t.Fatalf("%s: %v", what, err)
			}
		}
		// State fixation: alice's flow finished in bob's session (an
		// attacker making a victim complete the attacker's flow).
		st, code := start(alice)
		refused("another account", bob, binding, st, code)
		refused("after a failed attempt, the state is used up", alice, binding, st, code)
		// CSRF: the callback without the browser's binding.
		st, code = start(alice)
		refused("another browser", alice, "another-browser-binding-xx", st, code)
		// Replay.
		st, code = start(alice)
		if _, err := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: st, Code: code}); err != nil {
			t.Fatal(err)
		}
		refused("replay", alice, binding, st, code)
		refused("made-up state", alice, binding, "made-up", code)
		refused("no state", alice, binding, "", code)
		if list, _ := svc.List(t.Context(), ownerOf(bob)); len(list) != 0 {
			t.Fatalf("bob got a connection: %+v", list)
		}
		// Late: the callback arrives after StateTTL.
		st, code = start(alice)
		late := newServiceAt(t, s, func() time.Time { return time.Now().Add(integrations.StateTTL + time.Second) }, provider(f, false))
		cur = late
		refused("late", alice, binding, st, code)
		cur = svc
		// The provider's refusal or an error callback connects nothing.
		st, _ = start(alice)
		_, err := svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: st, Error: "access_denied"})
		if err == nil || !strings.Contains(err.Error(), "declined") {
			t.Fatalf("declined: %v", err)
		}
		if _, err := svc.Start(t.Context(), ownerOf(alice), "nope", "", binding); err == nil {
			t.Fatal("unknown provider started")
		}
		if _, err := svc.Start(t.Context(), ownerOf(alice), "acme", "", "short"); err == nil {
			t.Fatal("a flow without a browser binding started")
		}
		if _, err := svc.Start(t.Context(), ownerOf(alice), "acme", "bad name!", binding); err == nil {
			t.Fatal("a bad connection name was taken")
		}
		// At most MaxPendingStates flows are kept per person.
		for range integrations.MaxPendingStates + 5 {
			if _, err := svc.Start(t.Context(), ownerOf(alice), "acme", "", binding); err != nil {
				t.Fatal(err)
			}
		}
		n, err := s.DB.NewSelect().Table("integration_states").Where("user_id = ?", alice.OwnerID).Count(t.Context())
		if err != nil || n != integrations.MaxPendingStates {
			t.Fatalf("pending flows: %d %v", n, err)
		}
	})
}

func TestRefresh(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		f.ttl = time.Minute // inside RefreshBefore: due at once
		svc := newService(t, s, provider(f, false))
		alice := addUser(t, s, "alice")
		connect(t, svc, f, alice, "")
		first := f.lastAccessToken()
		n, err := svc.RefreshDue(t.Context(), 10)
		if err != nil || n != 1 {
			t.Fatalf("refresh: %d %v", n, err)
		}
		second := f.lastAccessToken()
		if second == first {
			t.Fatal("no new token")
		}
		u, err := svc.Use(t.Context(), ownerOf(alice), "acme")
		// Use renews a token about to expire too.
		if err != nil || u.AccessToken == first {
			t.Fatalf("use: %v %v", u.AccessToken == first, err)
		}
		// The provider forgets every refresh token: the connection expires.
		f.mu.Lock()
		clear(f.refresh)
		f.mu.Unlock()
		if _, err := svc.RefreshDue(t.Context(), 10); err != nil {
			t.Fatal(err)
		}
		list, _ := svc.List(t.Context(), ownerOf(alice))
		if len(list) != 1 || list[0].Status != integrations.StatusExpired || list[0].LastError == "" {
			t.Fatalf("after a refused refresh: %+v", list)
		}
		if _, err := svc.Use(t.Context(), ownerOf(alice), "acme"); !errors.Is(err, integrations.ErrExpired) {
			t.Fatalf("use of an expired connection: %v", err)
		}
		// Connecting again makes it active.
		connect(t, svc, f, alice, "")
		if list, _ = svc.List(t.Context(), ownerOf(alice)); list[0].Status != integrations.StatusActive || list[0].LastError != "" {
			t.Fatalf("reconnected: %+v", list)
		}
	})
}

// A provider answering with a huge, malformed or non-bearer token
// response connects nothing and says so plainly.
func TestHostileProvider(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	alice := addUser(t, s, "alice")
	for name, hook := range map[string]func(w http.ResponseWriter) bool{
		"huge": func(w http.ResponseWriter) bool {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"` + strings.Repeat("a", 1<<20) + `","token_type":"Bearer"}`))
			return true
		},
		"long token": func(w http.ResponseWriter) bool {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"` + strings.Repeat("a", 20<<10) + `","token_type":"Bearer"}`))
			return true
		},
		"not bearer": func(w http.ResponseWriter) bool {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"x","token_type":"mac"}`))
			return true
		},
		"header injection": func(w http.ResponseWriter) bool {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"x\r\nX-Evil: 1","token_type":"Bearer"}`))
			return true
		},
		"garbage": func(w http.ResponseWriter) bool { _, _ = w.Write([]byte("<html>")); return true },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeProvider(t)
			f.tokenHook = hook
			svc := newService(t, s, provider(f, false))
			u, err := svc.Start(t.Context(), ownerOf(alice), "acme", "", binding)
			if err != nil {
				t.Fatal(err)
			}
			q := f.authorize(t, u)
			_, err = svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: q.Get("code")})
			var ce *capabilities.Error
			if !errors.As(err, &ce) || ce.Code != capabilities.CodeConflict || !strings.Contains(ce.Message, "did not issue a usable token") {
				t.Fatalf("finish: %v", err)
			}
			if list, _ := svc.List(t.Context(), ownerOf(alice)); len(list) != 0 {
				t.Fatalf("connected: %+v", list)
			}
		})
	}
}

// Account deletion's hook revokes every connection at its provider
// first, and records each attempt; a provider that does not answer does
// not stop the deletion.
func TestRevokeAllOnDeletion(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		svc := newService(t, s, provider(f, false))
		alice, bob := addUser(t, s, "alice"), addUser(t, s, "bob")
		connect(t, svc, f, alice, "one")
		connect(t, svc, f, alice, "two")
		connect(t, svc, f, bob, "")
		if err := svc.RevokeAll(t.Context(), ownerOf(alice)); err != nil {
			t.Fatal(err)
		}
		if n := len(f.revocations()); n != 4 { // a refresh and an access token per connection
			t.Fatalf("revocations: %d", n)
		}
		// Bob's connection is untouched and still works.
		if _, err := svc.Use(t.Context(), ownerOf(bob), "acme"); err != nil {
			t.Fatal(err)
		}
		f.srv.Close() // a provider that is gone
		if err := svc.RevokeAll(t.Context(), ownerOf(bob)); err != nil {
			t.Fatalf("an unreachable provider failed the deletion: %v", err)
		}
	})
}

// A provider that does not answer in time connects nothing: the exchange
// ends at Config.Timeout with a clear error, not a hang.
func TestSlowProvider(t *testing.T) {
	s := storagetest.Open(t, storage.SQLite)
	alice := addUser(t, s, "alice")
	f := newFakeProvider(t)
	release := make(chan struct{})
	f.tokenHook = func(w http.ResponseWriter) bool { <-release; return true }
	defer close(release)
	ring, err := envelope.Open(t.Context(), s.DB, s.Keeper)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := integrations.New(integrations.Config{Options: integrations.Options{Providers: []integrations.Provider{provider(f, false)}},
		Store: s, Ring: ring, Owners: owners, BaseURL: "https://enclave.example", Logger: quiet(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	u, err := svc.Start(t.Context(), ownerOf(alice), "acme", "", binding)
	if err != nil {
		t.Fatal(err)
	}
	q := f.authorize(t, u)
	_, err = svc.Finish(t.Context(), ownerOf(alice), binding, integrations.Callback{Provider: "acme", State: q.Get("state"), Code: q.Get("code")})
	var ce *capabilities.Error
	if !errors.As(err, &ce) || ce.Code != capabilities.CodeConflict || !strings.Contains(ce.Message, "did not issue a usable token") {
		t.Fatalf("finish with a provider that does not answer: %v", err)
	}
}
