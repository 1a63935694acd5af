package statuswriter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/enclave-mcp/enclave/internal/statuswriter"
)

func TestKeepsStreaming(t *testing.T) {
	rec := httptest.NewRecorder()
	var w http.ResponseWriter = statuswriter.New(rec)
	if _, ok := w.(http.Flusher); !ok {
		t.Fatal("Writer hides http.Flusher")
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		t.Fatalf("ResponseController cannot reach the writer: %v", err)
	}
	if !rec.Flushed {
		t.Fatal("flush did not pass through")
	}
}

func TestRecordsFirstStatusAndSize(t *testing.T) {
	rec := httptest.NewRecorder()
	w := statuswriter.New(rec)
	if w.Status() != 0 || w.StatusOr200() != http.StatusOK {
		t.Fatalf("before any write: Status %d, StatusOr200 %d", w.Status(), w.StatusOr200())
	}
	w.WriteHeader(http.StatusTeapot)
	w.WriteHeader(http.StatusInternalServerError) // superfluous: ignored by net/http too
	_, _ = w.Write([]byte("hello"))
	_, _ = w.Write([]byte(" world"))
	if w.Status() != http.StatusTeapot || w.Bytes() != 11 {
		t.Fatalf("Status %d Bytes %d, want 418 and 11", w.Status(), w.Bytes())
	}
	w2 := statuswriter.New(httptest.NewRecorder())
	_, _ = w2.Write([]byte("x"))
	if w2.Status() != http.StatusOK {
		t.Fatalf("a body without a header: Status %d, want 200", w2.Status())
	}
}

func ExampleWriter() {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("queued"))
	})
	sw := statuswriter.New(httptest.NewRecorder())
	h.ServeHTTP(sw, httptest.NewRequest("POST", "/", nil))
	fmt.Println(sw.Status(), sw.Bytes())
	// Output: 202 6
}
