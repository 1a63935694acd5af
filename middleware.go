package enclave

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/internal/statuswriter"
	"github.com/enclave-mcp/enclave/mcp"
)

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
		sw := statuswriter.New(w)
		next.ServeHTTP(sw, r)
		status := sw.StatusOr200()
		elapsed := time.Since(start)
		s.metrics.ObserveHTTP(routeClass(r.URL.Path), status, elapsed)
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		s.log.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int64("bytes", sw.Bytes()),
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

// canonicalHost, in production, answers 404 (no-store) to a request for the
// web shell or the authorization server whose Host is not BaseURL's: pages,
// cookies, consent and OAuth metadata live under one name only, so another
// name the server happens to answer to (its address, a stale DNS name, a
// name pointed at it by someone else) is never a second origin holding
// sessions or issuing redirects. /mcp (which checks the audience of every
// token and refuses DNS rebinding itself), /healthz and /readyz answer
// under any name: probes use internal ones.
func (s *Server) canonicalHost(next http.Handler) http.Handler {
	if !s.cfg.Production {
		return next
	}
	u, err := url.Parse(s.cfg.BaseURL)
	if err != nil || u.Host == "" {
		return next // New refuses such a base URL in production
	}
	want := canonicalHostPort(u.Host, u.Scheme)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		// Exact paths only: the mux serves mcp.Path alone, and anything
		// under "/mcp/" (or an unclean "/mcp/../login") falls through to
		// the web shell, which must not answer under another name.
		case r.URL.Path == "/healthz", r.URL.Path == "/readyz", r.URL.Path == mcp.Path:
		case canonicalHostPort(r.Host, u.Scheme) != want:
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// canonicalHostPort lowercases host, drops a trailing dot and the scheme's
// default port.
func canonicalHostPort(host, scheme string) string {
	host = strings.ToLower(host)
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = host, ""
	}
	h = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
	if port == "" || scheme == "https" && port == "443" || scheme == "http" && port == "80" {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return net.JoinHostPort(h, port)
}
