package requestid

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMiddleware(t *testing.T) {
	var seen string
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = FromContext(r.Context())
	}))
	for _, tc := range []struct {
		name, incoming string
		keep           bool
	}{
		{"none", "", false},
		{"well formed is kept", "req-123_abc.DEF", true},
		{"header injection is replaced", "abc\r\nSet-Cookie: x", false},
		{"too long is replaced", strings.Repeat("a", 65), false},
		{"spaces are replaced", "a b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.incoming != "" {
				r.Header.Set(Header, tc.incoming)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got := w.Header().Get(Header)
			if got == "" || got != seen {
				t.Fatalf("response id %q, context id %q", got, seen)
			}
			if tc.keep != (got == tc.incoming) {
				t.Fatalf("incoming %q, response %q, keep=%v", tc.incoming, got, tc.keep)
			}
		})
	}
	if a, b := New(), New(); a == b || len(a) != 32 {
		t.Fatalf("New() = %q, %q", a, b)
	}
}
