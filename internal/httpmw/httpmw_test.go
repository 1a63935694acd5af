package httpmw

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/internal/requestid"
)

func TestPanicsBecomeGeneric500s(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	h := requestid.Middleware(RecoverPanics(log, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
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
