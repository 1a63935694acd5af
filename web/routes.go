package web

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
)

// maxFormBytes bounds the body of a form post.
const maxFormBytes = 64 << 10

// devPathPrefixes are the path prefixes reserved for development and
// maintenance endpoints. A path under one of them that is not a registered
// development route (and every such path in production) answers 404 with a
// JSON body, never a page.
var devPathPrefixes = []string{"/dev/", "/debug/", "/maintenance/"}

// routes builds the web shell's router. Every route is behind cross-origin
// protection: a non-safe request from another origin is refused with 403
// before any handler runs.
func (h *Handler) routes() http.Handler {
	mux := http.NewServeMux()
	h.serveMux = mux
	handle := func(pattern string, fn http.HandlerFunc) {
		h.patterns = append(h.patterns, pattern)
		mux.Handle(pattern, h.readGuard(pattern, fn))
	}
	handle("GET "+stylesheetPath, h.serveStylesheet)

	for _, p := range devPathPrefixes {
		handle(p, h.notFoundJSON)
		handle(strings.TrimSuffix(p, "/"), h.notFoundJSON)
	}
	if h.opts.DevRoutes && !h.opts.Production && h.devMail != nil {
		handle("GET /dev/mail", h.devMailbox)
	}

	limit := func(fn http.HandlerFunc) http.HandlerFunc { return h.LimitCredentials(fn).ServeHTTP }
	user := func(fn http.HandlerFunc) http.HandlerFunc { return h.guards.RequireUser(fn).ServeHTTP }

	handle("GET "+pathSignup, h.signupForm)
	handle("POST "+pathSignup, limit(h.signup))
	handle("GET "+pathLogin, h.loginForm)
	handle("POST "+pathLogin, limit(h.login))
	handle("POST "+pathLogout, h.logout)
	handle("GET "+pathVerifyEmail, h.verifyEmailForm)
	handle("POST "+pathVerifyEmail, limit(h.verifyEmail))
	handle("GET "+pathResetRequest, h.resetRequestForm)
	handle("POST "+pathResetRequest, limit(h.resetRequest))
	handle("GET "+pathResetConfirm, h.resetConfirmForm)
	handle("POST "+pathResetConfirm, limit(h.resetConfirm))
	handle("GET "+accounts.PasswordSetupPath, h.passwordSetupForm)
	handle("POST "+accounts.PasswordSetupPath, limit(h.passwordSetup))
	handle("GET "+pathAccount, user(h.account))
	handle("POST "+pathAccountPass, limit(user(h.changePassword)))
	handle("POST "+pathAccountEmail, limit(user(h.changeEmail)))
	handle("GET "+pathConfirmEmail, h.confirmEmailForm)
	handle("POST "+pathConfirmEmail, limit(h.confirmEmail))
	handle("POST "+pathAccountVerify, limit(user(h.resendVerification)))
	h.factorRoutes(handle)
	h.accountIdentityRoutes(handle)
	h.externalRoutes(handle)
	h.identityRoutes(handle)
	h.lifecycleRoutes(handle)
	h.secretRoutes(handle)
	h.packageRoutes(handle)
	h.memoryRoutes(handle)
	h.communityRoutes(handle)
	h.usageRoutes(handle)
	h.mailRoutes(handle)
	h.connectionRoutes(handle)
	h.mcpServerRoutes(handle)
	h.feedbackRoutes(handle)
	h.adminRoutes(handle)
	h.workspaceRoutes(handle)
	h.siteRoutes(handle)

	handle("/", h.notFound)
	return h.csrf.Handler(limitBody(h.identify(mux)))
}

// limitBody caps request bodies: the shell only takes small forms.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			n := int64(maxFormBytes)
			if r.URL.Path == pathCommunityPublish {
				n = communityPublishFormBytes // a readme up to community.MaxReadmeBytes
			}
			r.Body = http.MaxBytesReader(w, r.Body, n)
		}
		next.ServeHTTP(w, r)
	})
}

// crossOriginDenied answers a refused cross-origin request.
func (h *Handler) crossOriginDenied(w http.ResponseWriter, r *http.Request) {
	h.log.InfoContext(r.Context(), "web: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
	h.renderError(w, r, http.StatusForbidden, "This request came from another site and was refused. Go back to the page and try again.")
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.renderError(w, r, http.StatusNotFound, "There is no page at this address.")
}

// devMailbox lists the kept development mail. The messages hold working
// sign-in links, so only a client on a loopback address (after the
// trusted-proxy rules) may read them; anyone else gets the same 404 as
// for a path that does not exist.
//
// Two ways around the address check are closed as well. A tunnel or proxy
// on this machine that is not a trusted proxy makes every client look
// local: a request carrying forwarding headers from an untrusted peer is
// refused. And a web page can point its own host name at 127.0.0.1 (DNS
// rebinding) and read the mailbox from the developer's browser: the Host
// must be a loopback name or address, or the host of BaseURL.
func (h *Handler) devMailbox(w http.ResponseWriter, r *http.Request) {
	if !h.devMailAllowed(r) {
		h.notFoundJSON(w, r)
		return
	}
	h.render(w, r, http.StatusOK, devMailPage(h.page(r, "Development mailbox"), h.devMail.Messages()))
}

// identify attaches the signed-in person, if any, to every request, so
// pages show who is signed in and guards do not load them again. A
// missing, invalid or refused session leaves the request anonymous (the
// guards answer it); a failure to load roles leaves none (fail closed).
func (h *Handler) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasSessionCookie(r) || strings.HasPrefix(r.URL.Path, "/static/") {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		sess, err := h.opts.Accounts.Credentials.Authenticate(ctx, r)
		if err == nil {
			p := &Principal{Session: sess, Grants: h.opts.Accounts.Roles.FreshGrants(ctx, sess.User.ID)}
			r = r.WithContext(context.WithValue(ctx, principalKey{}, p))
		}
		next.ServeHTTP(w, r)
	})
}

func hasSessionCookie(r *http.Request) bool {
	for _, name := range []string{accounts.SessionCookieName, accounts.SecureSessionCookieName} {
		if _, err := r.Cookie(name); err == nil {
			return true
		}
	}
	return false
}

// devMailAllowed reports whether r may read the development mailbox (see
// devMailbox).
func (h *Handler) devMailAllowed(r *http.Request) bool {
	if a := h.ipOf.Addr(r); !a.IsValid() || !a.IsLoopback() {
		return false
	}
	if peer := parseHostAddr(r.RemoteAddr); !h.ipOf.trusted(peer) {
		for _, name := range []string{"X-Forwarded-For", "Forwarded", "X-Real-Ip", "X-Forwarded-Host"} {
			if r.Header.Get(name) != "" {
				return false
			}
		}
	}
	host := r.Host
	if hostname, _, err := net.SplitHostPort(host); err == nil {
		host = hostname
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "localhost" {
		return true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsLoopback()
	}
	if base, err := url.Parse(h.opts.BaseURL); err == nil && base.Hostname() != "" {
		return strings.EqualFold(base.Hostname(), host)
	}
	return false
}
