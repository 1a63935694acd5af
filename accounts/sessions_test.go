package accounts_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// startSession signs u in and returns the cookie set.
func startSession(t *testing.T, svc *accounts.Service, r *http.Request, u accounts.User, remember bool) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	if _, err := svc.Credentials.StartSession(rec, r, u, remember); err != nil {
		t.Fatal(err)
	}
	cs := rec.Result().Cookies()
	if len(cs) != 1 {
		t.Fatalf("%d cookies set", len(cs))
	}
	return cs[0]
}

func withCookie(c *http.Cookie) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(c)
	return r
}

func TestSessionCookieAttributes(t *testing.T) {
	t.Parallel()
	s := storagetest.Open(t, storage.SQLite)
	svc, _ := newService(t, s, accounts.Config{})
	u := signup(t, svc, "kim")

	plain := startSession(t, svc, httptest.NewRequest(http.MethodGet, "http://app.test/", nil), u, false)
	if plain.Name != accounts.SessionCookieName || plain.Secure || !plain.HttpOnly || plain.SameSite != http.SameSiteLaxMode || plain.Path != "/" || plain.Domain != "" {
		t.Errorf("plain-HTTP cookie %+v", plain)
	}
	if plain.MaxAge != int(accounts.DefaultSessionLifetime/time.Second) && plain.MaxAge != int(accounts.DefaultSessionLifetime/time.Second)-1 {
		t.Errorf("max age %d, want 7 days", plain.MaxAge)
	}
	tlsReq := httptest.NewRequest(http.MethodGet, "https://app.test/", nil)
	tlsReq.TLS = &tls.ConnectionState{}
	secure := startSession(t, svc, tlsReq, u, true)
	if secure.Name != accounts.SecureSessionCookieName || !secure.Secure || !secure.HttpOnly || secure.SameSite != http.SameSiteLaxMode || secure.Path != "/" || secure.Domain != "" {
		t.Errorf("TLS cookie %+v", secure)
	}
	if secure.MaxAge < int(29*24*time.Hour/time.Second) {
		t.Errorf("remember-me max age %d, want 30 days", secure.MaxAge)
	}
	// On a secure server the plain-named cookie is not read (a sibling host
	// could have set it).
	r := httptest.NewRequest(http.MethodGet, "https://app.test/", nil)
	r.TLS = &tls.ConnectionState{}
	r.AddCookie(&http.Cookie{Name: accounts.SessionCookieName, Value: plain.Value})
	if _, err := svc.Credentials.Authenticate(context.Background(), r); !errors.Is(err, accounts.ErrNoSession) {
		t.Errorf("plain cookie on TLS = %v", err)
	}
	r.AddCookie(secure)
	if sess, err := svc.Credentials.Authenticate(context.Background(), r); err != nil || sess.User.ID != u.ID || !sess.RememberMe {
		t.Errorf("secure cookie = %+v, %v", sess, err)
	}
	behindProxy, _ := newService(t, s, accounts.Config{SecureCookies: true})
	if c := startSession(t, behindProxy, httptest.NewRequest(http.MethodGet, "http://app.test/", nil), u, false); c.Name != accounts.SecureSessionCookieName || !c.Secure {
		t.Errorf("SecureCookies: %+v", c)
	}

	rec := httptest.NewRecorder()
	svc.Credentials.EndSession(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if cs := rec.Result().Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Errorf("end session set %+v", cs)
	}
}

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{})
		u := signup(t, svc, "lee")
		req := httptest.NewRequest(http.MethodGet, "/", nil)

		c := startSession(t, svc, req, u, false)
		sess, err := svc.Credentials.Authenticate(ctx, withCookie(c))
		if err != nil || sess.User.ID != u.ID || sess.User.StableID != u.StableID || sess.RememberMe {
			t.Fatalf("authenticate = %+v, %v", sess, err)
		}
		if _, err := svc.Credentials.Authenticate(ctx, req); !errors.Is(err, accounts.ErrNoSession) {
			t.Fatalf("no cookie = %v", err)
		}

		t.Run("tampering", func(t *testing.T) {
			parts := strings.Split(c.Value, ".")
			other := signup(t, svc, "lee-other")
			for name, v := range map[string]string{
				"other user id": strings.Replace(c.Value, u.StableID, other.StableID, 1),
				"later issue":   strings.Join(append(parts[:3:3], parts[3]+"9", parts[4], parts[5]), "."),
				"remember flag": strings.Join(append(parts[:4:4], "1", parts[5]), "."),
				"unknown key":   strings.Join(append(parts[:1:1], "kffffffffffffffff", parts[2], parts[3], parts[4], parts[5]), "."),
				"no mac":        strings.Join(parts[:5], "."),
				"garbage":       "s1.x.y.z.0.AAAA",
				"empty":         "",
			} {
				if _, err := svc.Credentials.VerifySession(ctx, v); !errors.Is(err, accounts.ErrNoSession) {
					t.Errorf("%s: %v, want ErrNoSession", name, err)
				}
			}
		})

		t.Run("expiry", func(t *testing.T) {
			short := startSession(t, svc, req, u, false)
			long := startSession(t, svc, req, u, true)
			clk.Advance(accounts.DefaultSessionLifetime - time.Second)
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(short)); err != nil {
				t.Fatalf("just before expiry: %v", err)
			}
			clk.Advance(time.Second)
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(short)); !errors.Is(err, accounts.ErrNoSession) {
				t.Fatalf("at 7 days: %v", err)
			}
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(long)); err != nil {
				t.Fatalf("remember-me at 7 days: %v", err)
			}
			clk.Advance(accounts.DefaultRememberMeLifetime - accounts.DefaultSessionLifetime)
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(long)); !errors.Is(err, accounts.ErrNoSession) {
				t.Fatalf("remember-me at 30 days: %v", err)
			}
		})

		t.Run("password change revokes", func(t *testing.T) {
			before := startSession(t, svc, req, u, true)
			hooked := 0
			svc.OnPasswordChange(func(ctx context.Context, _ bun.Tx, userID int64) error {
				if userID != u.ID {
					t.Errorf("hook for user %d", userID)
				}
				hooked++
				return nil
			})
			// The clock does not move: the change happens in the same
			// microsecond the session was issued, and still revokes it.
			changed, err := svc.Credentials.ChangePassword(ctx, u.ID, goodPassword, "a brand new passphrase")
			if err != nil {
				t.Fatal(err)
			}
			if hooked != 1 {
				t.Errorf("password-change hook ran %d times", hooked)
			}
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(before)); !errors.Is(err, accounts.ErrNoSession) {
				t.Fatalf("session from before the change = %v", err)
			}
			after := startSession(t, svc, req, changed, false)
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(after)); err != nil {
				t.Fatalf("session issued after the change: %v", err)
			}
			if _, err := svc.Credentials.ChangePassword(ctx, u.ID, "not the current one", "whatever else long"); !errors.Is(err, accounts.ErrInvalidCredentials) {
				t.Fatalf("wrong current password = %v", err)
			}
			if _, err := svc.Credentials.ChangePassword(ctx, u.ID, "a brand new passphrase", "short"); !errors.Is(err, accounts.ErrWeakPassword) {
				t.Fatalf("weak new password = %v", err)
			}
		})

		t.Run("suspended and deleting", func(t *testing.T) {
			v := signup(t, svc, "lee-states")
			c := startSession(t, svc, req, v, false)
			if _, err := svc.Lifecycle.Suspend(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(c)); !errors.Is(err, accounts.ErrSuspended) {
				t.Fatalf("suspended = %v", err)
			}
			suspended, _ := svc.Identity.UserByID(ctx, v.ID)
			if _, err := svc.Credentials.StartSession(httptest.NewRecorder(), req, suspended, false); !errors.Is(err, accounts.ErrSuspended) {
				t.Fatalf("start session for a suspended account = %v", err)
			}
			if _, err := svc.Lifecycle.Unsuspend(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Credentials.Authenticate(ctx, withCookie(c)); err != nil {
				t.Fatalf("after unsuspend = %v", err)
			}
			if _, err := svc.Lifecycle.MarkDeleting(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
			sess, err := svc.Credentials.Authenticate(ctx, withCookie(c))
			if !errors.Is(err, accounts.ErrDeleting) || sess.User.ID != v.ID {
				t.Fatalf("deleting = %+v, %v (want ErrDeleting with the session, for the deletion retry)", sess, err)
			}
		})
	})
}

func TestSessionKeyRotation(t *testing.T) {
	t.Parallel()
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		svc, clk := newService(t, s, accounts.Config{})
		u := signup(t, svc, "mia")
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		old := startSession(t, svc, req, u, true)

		// A second replica on the same store verifies the first one's cookies.
		replica, _ := newService(t, s, accounts.Config{Now: clk.Now})
		if _, err := replica.Credentials.Authenticate(ctx, withCookie(old)); err != nil {
			t.Fatalf("replica: %v", err)
		}

		if err := svc.Credentials.RotateSessionKey(ctx); err != nil {
			t.Fatal(err)
		}
		fresh := startSession(t, svc, req, u, true)
		keyID := func(c *http.Cookie) string { return strings.Split(c.Value, ".")[1] }
		if keyID(fresh) == keyID(old) {
			t.Fatal("rotation did not change the signing key")
		}
		if _, err := svc.Credentials.Authenticate(ctx, withCookie(old)); err != nil {
			t.Fatalf("cookie signed with the retired key: %v", err)
		}
		if _, err := svc.Credentials.Authenticate(ctx, withCookie(fresh)); err != nil {
			t.Fatal(err)
		}
		// The replica has not seen the new key yet; it reloads the keys when
		// a cookie names an unknown one, at most once a second.
		if _, err := replica.Credentials.VerifySession(ctx, fresh.Value); !errors.Is(err, accounts.ErrNoSession) {
			t.Fatalf("replica right after its own load = %v, want ErrNoSession (reload is rate-limited)", err)
		}
		clk.Advance(2 * time.Second)
		if _, err := replica.Credentials.VerifySession(ctx, fresh.Value); err != nil {
			t.Fatalf("replica after the reload interval: %v", err)
		}

		// Keys retired longer than the longest session are deleted at the
		// next rotation; their cookies have expired anyway.
		clk.Advance(accounts.DefaultRememberMeLifetime + time.Hour)
		if err := svc.Credentials.RotateSessionKey(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := s.DB.NewSelect().Table("session_keys").Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 2 { // the key retired just now, and the new signer
			t.Fatalf("%d session keys kept, want 2", n)
		}
		var cts []string
		if err := s.DB.NewSelect().Table("session_keys").Column("ciphertext").Scan(ctx, &cts); err != nil {
			t.Fatal(err)
		}
		for _, ct := range cts {
			if len(ct) < 60 {
				t.Errorf("stored key %q does not look encrypted", ct)
			}
		}
	})
}

func TestConfiguredSessionKeys(t *testing.T) {
	t.Parallel()
	s := storagetest.Open(t, storage.SQLite)
	ctx := context.Background()
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	if _, err := accounts.New(ctx, s, accounts.Config{Argon2: cheap, SessionKeys: [][]byte{[]byte("too short")}}); err == nil {
		t.Fatal("a short session key was accepted")
	}
	first, _ := newService(t, s, accounts.Config{SessionKeys: [][]byte{k1}})
	u := signup(t, first, "noor")
	old := startSession(t, first, httptest.NewRequest(http.MethodGet, "/", nil), u, false)
	rotated, _ := newService(t, s, accounts.Config{SessionKeys: [][]byte{k2, k1}})
	if _, err := rotated.Credentials.Authenticate(ctx, withCookie(old)); err != nil {
		t.Fatalf("old key still verifies: %v", err)
	}
	dropped, _ := newService(t, s, accounts.Config{SessionKeys: [][]byte{k2}})
	if _, err := dropped.Credentials.Authenticate(ctx, withCookie(old)); !errors.Is(err, accounts.ErrNoSession) {
		t.Fatalf("dropped key = %v", err)
	}
	if err := rotated.Credentials.RotateSessionKey(ctx); err == nil {
		t.Fatal("RotateSessionKey with configured keys succeeded")
	}
}
