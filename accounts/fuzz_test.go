package accounts_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/internal/fuzzseed"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// FuzzSessionCookie feeds arbitrary cookie values to the session parser.
// "{alice}" in the input is replaced by a real session cookie of alice, so
// the fuzzer mutates around a valid value. The property: no panic; the
// only answers are a session of alice or a refusal with one of the
// documented errors; never another account.
func FuzzSessionCookie(f *testing.F) {
	svc, _ := newService(f, storagetest.Open(f, storage.SQLite), accounts.Config{})
	alice := signup(f, svc, "alice")
	signup(f, svc, "bob")
	rec := httptest.NewRecorder()
	if _, err := svc.Credentials.StartSession(rec, httptest.NewRequest(http.MethodGet, "/", nil), alice, false); err != nil {
		f.Fatal(err)
	}
	good := rec.Result().Cookies()[0].Value
	parts := strings.Split(good, ".")
	fuzzseed.Add(f,
		[]any{"{alice}"},
		[]any{"{alice}x"},
		[]any{strings.Join(append(parts[:2:2], "bob-stable-id", parts[3], parts[4], parts[5]), ".")},
		[]any{strings.Join(append(parts[:3:3], "99999999999999999999", parts[4], parts[5]), ".")},
		[]any{strings.Join(append(parts[:4:4], "2", parts[5]), ".")},
		[]any{"v1.kdeadbeefdeadbeef.x.0.0.AAAA"},
		[]any{"v1.a.b.c.d.e"},
		[]any{"....."},
		[]any{strings.Repeat("A", 600)},
		[]any{"\xff\xfe.\x00"},
		[]any{""},
	)
	f.Fuzz(func(t *testing.T, value string) {
		value = strings.ReplaceAll(value, "{alice}", good)
		sess, err := svc.Credentials.VerifySession(context.Background(), value)
		switch {
		case err == nil:
			if sess.User.ID != alice.ID {
				t.Fatalf("cookie %q signs in user %d, not alice (%d)", value, sess.User.ID, alice.ID)
			}
		case errors.Is(err, accounts.ErrNoSession), errors.Is(err, accounts.ErrSuspended), errors.Is(err, accounts.ErrDeleting):
		default:
			t.Fatalf("cookie %q: unexpected error %v", value, err)
		}
		// Through the request parser too (the cookie header is parsed by
		// net/http first).
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Cookie", "enclave_session="+value+"; __Host-enclave_session="+value)
		if sess, err := svc.Credentials.Authenticate(context.Background(), r); err == nil && sess.User.ID != alice.ID {
			t.Fatalf("cookie header %q signs in user %d", value, sess.User.ID)
		}
	})
}
