package web

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
)

// Guards are HTTP middleware that admit only signed-in people, or people
// holding a role or a permission. The account and its roles are loaded
// fresh for every request (never taken from the cookie); when the roles
// cannot be loaded the person holds none (fail closed).
//
// A request without a valid session gets 401 JSON when the client prefers
// JSON and otherwise a redirect to the login page, carrying the requested
// path in redirectTo (same-origin paths only). A signed-in person without
// the role or permission gets 403.
type Guards struct {
	accounts  *accounts.Service
	loginPath string
	forbidden http.Handler
	log       *slog.Logger
}

// GuardOptions configures Guards. Zero values are defaults.
type GuardOptions struct {
	// LoginPath is the login page signed-out browsers are sent to, as an
	// absolute path (include the site's path prefix). Default "/login".
	LoginPath string
	// Forbidden answers signed-in HTML requests that lack the role or
	// permission; it must write status 403. Default: a plain-text 403.
	Forbidden http.Handler
	// Logger receives role-loading failures. Default slog.Default().
	Logger *slog.Logger
}

// NewGuards returns guards that authenticate with svc.
func NewGuards(svc *accounts.Service, opts GuardOptions) *Guards {
	g := &Guards{accounts: svc, loginPath: opts.LoginPath, forbidden: opts.Forbidden, log: opts.Logger}
	if g.loginPath == "" {
		g.loginPath = "/login"
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	return g
}

// Principal is the signed-in person of a request that passed a guard.
type Principal struct {
	Session accounts.Session // Session.User is the account, as loaded for this request
	Grants  accounts.Grants  // empty when the roles could not be loaded
}

// Caller returns the capabilities caller of p: a person at a web page, so
// interactive and not limited by OAuth scopes.
func (p *Principal) Caller() capabilities.Caller {
	c := accounts.CallerFor(p.Session.User, p.Grants)
	c.AllScopes, c.Interactive = true, true
	return c
}

type principalKey struct{}

// PrincipalFrom returns the signed-in person that a guard admitted, or nil.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// RequireUser admits requests with a valid session of an active account.
func (g *Guards) RequireUser(next http.Handler) http.Handler {
	return g.require(next, func(*Principal) bool { return true })
}

// RequireRole admits signed-in people holding role.
func (g *Guards) RequireRole(role string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return g.require(next, func(p *Principal) bool { return p.Grants.HasRole(role) })
	}
}

// RequirePermission admits signed-in people holding permission p.
func (g *Guards) RequirePermission(p capabilities.Permission) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return g.require(next, func(pr *Principal) bool { return pr.Grants.Has(p) })
	}
}

func (g *Guards) require(next http.Handler, allowed func(*Principal) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context())
		if p == nil {
			var ok bool
			if p, ok = g.load(w, r); !ok {
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		if !allowed(p) {
			g.deny(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// load authenticates r and loads the account's grants. When it returns
// false it has answered the request.
func (g *Guards) load(w http.ResponseWriter, r *http.Request) (*Principal, bool) {
	ctx := r.Context()
	sess, err := g.accounts.Credentials.Authenticate(ctx, r)
	switch {
	case err == nil:
	case errors.Is(err, accounts.ErrNoSession):
		// A forged, expired or revoked cookie is dropped. (The cookie of a
		// suspended or deleting account is kept: it works again after an
		// unsuspension, and the deletion flow retries with it.)
		if presentsSessionCookie(r) {
			g.accounts.Credentials.EndSession(w, r)
		}
		g.unauthenticated(w, r)
		return nil, false
	case errors.Is(err, accounts.ErrSuspended), errors.Is(err, accounts.ErrDeleting):
		g.unauthenticated(w, r)
		return nil, false
	default:
		g.log.ErrorContext(ctx, "web: session check failed", "error", err)
		w.Header().Set("Retry-After", "5")
		writeGuardError(w, r, http.StatusServiceUnavailable, "unavailable", "Please try again in a moment.")
		return nil, false
	}
	return &Principal{Session: sess, Grants: g.accounts.Roles.FreshGrants(ctx, sess.User.ID)}, true
}

func presentsSessionCookie(r *http.Request) bool {
	for _, c := range r.Cookies() {
		if c.Name == accounts.SessionCookieName || c.Name == accounts.SecureSessionCookieName {
			return true
		}
	}
	return false
}

func (g *Guards) unauthenticated(w http.ResponseWriter, r *http.Request) {
	if PrefersJSON(r) {
		writeGuardError(w, r, http.StatusUnauthorized, "unauthenticated", "Sign in to continue.")
		return
	}
	target := g.loginPath + "?redirectTo=" + url.QueryEscape(SafeRedirectPath(r.URL.RequestURI()))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (g *Guards) deny(w http.ResponseWriter, r *http.Request) {
	if g.forbidden != nil && !PrefersJSON(r) {
		g.forbidden.ServeHTTP(w, r)
		return
	}
	writeGuardError(w, r, http.StatusForbidden, "forbidden", "You do not have access to this page.")
}

// writeGuardError answers with a JSON error body when the client prefers
// JSON, plain text otherwise.
func writeGuardError(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if PrefersJSON(r) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "message": message})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(message + "\n"))
}

// PrefersJSON reports whether r's Accept header ranks JSON (application/json
// or a +json type) above HTML. A request without Accept prefers JSON only
// when its body is JSON. Browsers navigating to a page never prefer JSON.
func PrefersJSON(r *http.Request) bool {
	accept := strings.Join(r.Header.Values("Accept"), ",")
	if strings.TrimSpace(accept) == "" {
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		return ct == "application/json"
	}
	jsonQ, htmlQ := 0.0, 0.0
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
				q = f
			}
		}
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			jsonQ = max(jsonQ, q)
		case mt == "text/html" || mt == "application/xhtml+xml":
			htmlQ = max(htmlQ, q)
		}
	}
	return jsonQ > 0 && jsonQ > htmlQ
}

// SafeRedirectPath returns s when it is a path on this origin ("/…", not
// "//host" or "/\host", no scheme, no control characters), and "/"
// otherwise. Use it on every redirectTo value before redirecting to it.
func SafeRedirectPath(s string) string {
	if len(s) == 0 || len(s) > 2048 || s[0] != '/' || strings.HasPrefix(s, "//") || strings.ContainsAny(s, "\\") {
		return "/"
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return s
}
