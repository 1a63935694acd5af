package enclave

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/oauth"
)

func TestPanicsBecomeGeneric500s(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	h := requestid.Middleware(recoverPanics(log, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("secret detail: db password hunter2")
	})))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 500 {
		t.Fatalf("status %d", rec.Code)
	}
	id := rec.Header().Get("X-Request-Id")
	if strings.Contains(string(body), "hunter2") || !strings.Contains(string(body), id) {
		t.Fatalf("body %q: must name the request id %q and nothing of the panic", body, id)
	}
	if !strings.Contains(logged.String(), "hunter2") || !strings.Contains(logged.String(), id) {
		t.Fatalf("log lacks the panic or the request id: %q", logged.String())
	}
}

func TestStatusWriterKeepsStreaming(t *testing.T) {
	rec := httptest.NewRecorder()
	var w http.ResponseWriter = &statusWriter{ResponseWriter: rec}
	if _, ok := w.(http.Flusher); !ok {
		t.Fatal("statusWriter hides http.Flusher")
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		t.Fatalf("ResponseController cannot reach the writer: %v", err)
	}
	if !rec.Flushed {
		t.Fatal("flush did not pass through")
	}
}

func TestTokenRefusalReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrTokenMalformed), "malformed"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrTokenExpired), "expired"},
		{fmt.Errorf("%w: %w [https://other/mcp]", oauth.ErrInvalidToken, oauth.ErrWrongAudience), "wrong_audience"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrTokenUnknown), "unknown_or_revoked"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrPasswordChanged), "revoked_by_password_change"},
		{errors.New("expired, but not from oauth"), "invalid"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrAccountSuspended), "account_suspended"},
		{fmt.Errorf("%w: %w", oauth.ErrInvalidToken, oauth.ErrAccountDeleting), "account_deleting"},
		{errors.New("anything else"), "invalid"},
	} {
		if got := tokenRefusal(tc.err); got != tc.want {
			t.Errorf("tokenRefusal(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestMetricsAddrOnEveryInterface(t *testing.T) {
	for addr, want := range map[string]bool{
		":9090": true, "0.0.0.0:9090": true, "[::]:9090": true,
		"127.0.0.1:9090": false, "[::1]:9090": false, "10.0.0.5:9090": false, "metrics.internal:9090": false,
	} {
		if got := onEveryInterface(addr); got != want {
			t.Errorf("onEveryInterface(%q) = %v, want %v", addr, got, want)
		}
	}
}
