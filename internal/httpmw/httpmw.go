// Package httpmw holds the middleware around a server's whole HTTP
// surface: the client address in the request context, the access log,
// panic recovery, the canonical host of production, CORS for browser MCP
// clients, the request-body deadline and the bounded route class that
// metrics and traces label requests with.
package httpmw

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/internal/requestid"
	"github.com/enclave-mcp/enclave/internal/statuswriter"
	"github.com/enclave-mcp/enclave/oauth"
)

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ClientAddr puts the client's address, as key finds it (the web shell's
// ClientKey: under the trusted proxies, grouped as its rows record it),
// in the request context (clientnet.Addr), for the audit log's hashed
// client address and the denial-burst alert.
func ClientAddr(key func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(clientnet.WithAddr(r.Context(), key(r))))
	})
}

// AccessLog logs one line per request, with its request id, and reports
// each request's route class, status and duration to observe (metrics).
func AccessLog(log *slog.Logger, observe func(route string, status int, elapsed time.Duration), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := statuswriter.New(w)
		next.ServeHTTP(sw, r)
		status := sw.StatusOr200()
		elapsed := time.Since(start)
		if observe != nil {
			observe(RouteClass(r.URL.Path), status, elapsed)
		}
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		log.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int64("bytes", sw.Bytes()),
			slog.Duration("duration", elapsed),
			slog.String("request_id", requestid.FromContext(r.Context())),
		)
	})
}

// RecoverPanics turns a handler panic into a 500 that names only the
// request id; the panic and its stack go to the log.
func RecoverPanics(log *slog.Logger, next http.Handler) http.Handler {
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
			WriteJSON(w, http.StatusInternalServerError, map[string]string{
				"error":      "internal_error",
				"message":    "internal server error",
				"request_id": id,
			})
		}()
		next.ServeHTTP(w, r)
	})
}

// CanonicalHost answers 404 (no-store) to a request for the web shell or
// the authorization server whose Host is not baseURL's: pages, cookies,
// consent and OAuth metadata live under one name only, so another name
// the server happens to answer to (its address, a stale DNS name, a name
// pointed at it by someone else) is never a second origin holding
// sessions or issuing redirects. The paths of anyName (the MCP endpoint,
// which checks every token's audience and refuses DNS rebinding itself,
// and the probes, which use internal names) answer under any name. The
// server turns it on in production.
func CanonicalHost(baseURL string, anyName []string, next http.Handler) http.Handler {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return next // the server refuses such a base URL in production
	}
	want := canonicalHostPort(u.Host, u.Scheme)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Exact paths only: the mux serves "/mcp" alone, and anything
		// under "/mcp/" (or an unclean "/mcp/../login") falls through to
		// the web shell, which must not answer under another name.
		if !slices.Contains(anyName, r.URL.Path) && canonicalHostPort(r.Host, u.Scheme) != want {
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

// RouteClass names the part of the surface a path belongs to, as a
// bounded metric label.
func RouteClass(path string) string {
	switch {
	case path == "/mcp" || strings.HasPrefix(path, "/mcp/"):
		return "mcp"
	case strings.HasPrefix(path, "/.well-known/"):
		return "metadata"
	case path == oauth.PathToken:
		return "oauth_token"
	case path == oauth.PathRegister:
		return "oauth_register"
	case strings.HasPrefix(path, "/oauth/"):
		return "oauth"
	case path == "/healthz" || path == "/readyz":
		return "health"
	case strings.HasPrefix(path, "/admin"):
		return "admin"
	case strings.HasPrefix(path, "/account"):
		return "account"
	case strings.HasPrefix(path, "/static/"):
		return "static"
	default:
		return "web"
	}
}

// corsPath reports whether a browser page on an allowed origin may call
// path: the MCP endpoint, the token and registration endpoints and the
// metadata documents.
func corsPath(path string) bool {
	return path == "/mcp" || path == oauth.PathToken || path == oauth.PathRegister || path == oauth.PathUserinfo ||
		strings.HasPrefix(path, "/.well-known/oauth-authorization-server") ||
		strings.HasPrefix(path, "/.well-known/oauth-protected-resource")
}

// CORS answers CORS for browser MCP clients on the origins given (none:
// no CORS header is ever sent). Credentials (cookies) are never allowed:
// these endpoints take bearer tokens and form posts, not the web shell's
// session.
func CORS(origins []string, next http.Handler) http.Handler {
	if len(origins) == 0 {
		return next
	}
	allowed := make([]string, 0, len(origins))
	for _, o := range origins {
		allowed = append(allowed, strings.TrimRight(strings.TrimSpace(o), "/"))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !corsPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		if !slices.Contains(allowed, origin) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate, Retry-After, X-Request-Id")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			// Mcp-Method and Mcp-Name are sent by 2026-07-28 clients.
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Mcp-Session-Id, Mcp-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID, X-Request-Id")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}
