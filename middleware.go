package enclave

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/enclave-mcp/enclave/internal/requestid"
)

// statusWriter records the status and size of a response. It keeps
// streaming working: Flush passes through, and Unwrap lets
// http.ResponseController reach the underlying writer.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type clientIPKey struct{}

// withClientIP puts the client's address in the request context, for the
// audit log's (hashed) client address: found under Config.TrustedProxies
// and grouped exactly as the web shell's rows record it (web.ClientKey).
func (s *Server) withClientIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientIPKey{}, s.web.ClientKey(r))))
	})
}

func clientIP(ctx context.Context) string {
	ip, _ := ctx.Value(clientIPKey{}).(string)
	return ip
}

// accessLog logs one line per request, with its request id.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		elapsed := time.Since(start)
		s.metrics.ObserveHTTP(routeClass(r.URL.Path), sw.status, elapsed)
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		s.log.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Duration("duration", elapsed),
			slog.String("request_id", requestid.FromContext(r.Context())),
		)
	})
}

// recoverPanics turns a handler panic into a 500 that names only the
// request id; the panic and its stack go to the log.
func recoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			id := requestid.FromContext(r.Context())
			log.Error("handler panic", "panic", v, "request_id", id, "stack", string(debug.Stack()))
			writeJSON(w, http.StatusInternalServerError, map[string]string{
				"error":      "internal_error",
				"message":    "internal server error",
				"request_id": id,
			})
		}()
		next.ServeHTTP(w, r)
	})
}
