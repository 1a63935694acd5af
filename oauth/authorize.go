package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/ory/fosite"

	"github.com/enclave-mcp/enclave/capabilities"
)

// AuthorizeRequest is a validated authorization request, as the login and
// consent pages present it.
type AuthorizeRequest struct {
	ClientID   string
	ClientName string
	// ClientHost is the host of the client's metadata document when its
	// ClientID is that document's URL: whoever controls that host vouches
	// for the app, and the consent page says "app from <host>". Empty for
	// a client from dynamic registration: its name is whatever the
	// registrant chose, and the page marks it as unverified.
	ClientHost string
	// RedirectURI is where the answer goes; RedirectHost is its host (or its
	// scheme, for a private-use scheme), to show the user.
	RedirectURI  string
	RedirectHost string
	// Scopes are what the grant carries when the person approves: the
	// requested scopes without ScopeAdmin. On the login page they are the
	// requested scopes as asked.
	Scopes []string
	// OptionalScopes are requested scopes the grant carries only when the
	// person ticks them on the consent page (see ScopedConsent): ScopeAdmin,
	// when the client asked for it and the account holds the admin role.
	// A scope the account may not hold is never in it: it was dropped.
	OptionalScopes []string
	// FormAction is the URL (path and query) the login and consent forms
	// must post to: the authorization endpoint with this request's
	// parameters.
	FormAction string
}

// ScopedConsent is implemented by a LoginConsent whose consent page lets
// the person grant a request's OptionalScopes, each one a checkbox left
// unticked by default. ConsentScopes is Consent that also returns which of
// req.OptionalScopes the person ticked (anything else it returns is
// ignored). A LoginConsent without it never grants an optional scope.
// package web's Handler implements it.
type ScopedConsent interface {
	ConsentScopes(w http.ResponseWriter, r *http.Request, req *AuthorizeRequest, userID int64) (ticked []string, approved, ok bool)
}

// LoginConsent is implemented by the web shell: it signs the user in and
// asks for consent on the authorization endpoint. The authorization
// endpoint calls it only for a request that is already valid (client,
// exact redirect URI, S256 PKCE challenge, state, resource), so a bad
// request never reaches a login page.
//
// Both methods either answer (ok true) or write a response themselves (ok
// false: a page, a redirect, an error) and the endpoint stops.
//
// The answer to a form posted from either page may be a redirect to the
// client (req.RedirectURI). Browsers apply a page's CSP form-action to every
// redirect its form submission follows, so the pages' policy must allow
// req.RedirectURI's origin (or scheme), or the browser stays on the page;
// package web's pages do.
type LoginConsent interface {
	// Login returns the internal id of the user signed in on r. When nobody
	// is, it serves the login form instead: fields email and password,
	// posted to req.FormAction. On a POST carrying valid credentials it
	// signs the user in (session cookie) and returns them, so consent
	// follows in the same request. Login rate limiting belongs here too.
	Login(w http.ResponseWriter, r *http.Request, req *AuthorizeRequest) (userID int64, ok bool)

	// Consent asks userID to approve req. On a POST whose form carries
	// decision=approve or decision=deny (and a valid CSRF token) it returns
	// approved accordingly; otherwise it renders the consent page (client
	// name, redirect host, scopes; buttons named decision) posting to
	// req.FormAction with anti-framing headers. It is not called when the
	// user already approved these scopes for this client.
	Consent(w http.ResponseWriter, r *http.Request, req *AuthorizeRequest, userID int64) (approved, ok bool)
}

// maxFormBytes bounds the bodies of the OAuth endpoints.
const maxFormBytes = 64 << 10

func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		s.writeAuthorizePage(w, r, nil, fosite.ErrInvalidRequest.WithHint("The request body could not be parsed."))
		return
	}
	if s.opts.LoginConsent == nil {
		s.writeAuthorizePage(w, r, nil, fosite.ErrServerError.WithWrap(errors.New("oauth: no LoginConsent configured")))
		return
	}
	// RFC 8707: the audience is always the MCP resource; a resource
	// parameter may only name it. fosite checks the audience against the
	// client's, which is that same resource.
	resourceErr := s.checkResources(r.Form)
	if err := checkOpenIDParams(r.Form); err != nil {
		s.writeAuthorizePage(w, r, nil, err)
		return
	}
	r.Form.Set("audience", s.resource)
	if r.Form.Get("scope") == "" {
		r.Form.Set("scope", ScopeMCP)
	}

	// A client whose id is the URL of its metadata document is fetched
	// (or found fresh in the cache) before fosite loads it.
	if err := s.resolveClient(ctx, r, r.Form.Get("client_id")); err != nil {
		s.writeAuthorizePage(w, r, nil, resolveError(err))
		return
	}

	// The client fosite loads for this request also lists the requested
	// redirect URI when it is a loopback URI registered on another port
	// (RFC 8252 §7.3), so that fosite's matching agrees with ours.
	ar, err := s.provider.NewAuthorizeRequest(withRequestedRedirect(ctx, r.Form.Get("redirect_uri")), r)
	if err != nil {
		s.writeAuthorizeError(w, r, ar, err)
		return
	}
	client, _ := ar.GetClient().(*Client)
	switch {
	case client == nil:
		err = fosite.ErrInvalidClient
	case !redirectRegistered(ar):
		err = fosite.ErrInvalidRequest.WithHint("The redirect_uri is not one the client registered.")
	case ar.GetResponseMode() != fosite.ResponseModeQuery && ar.GetResponseMode() != fosite.ResponseModeDefault:
		err = fosite.ErrUnsupportedResponseMode.WithHint("Only the query response mode is supported.")
	case ar.GetRequestForm().Get("code_challenge") == "":
		err = fosite.ErrInvalidRequest.WithHint("A PKCE code_challenge is required.")
	case ar.GetRequestForm().Get("code_challenge_method") != "S256":
		err = fosite.ErrInvalidRequest.WithHint("The code_challenge_method must be S256.")
	case resourceErr != nil:
		err = resourceErr
	}
	if err != nil {
		s.writeAuthorizeError(w, r, ar, err)
		return
	}

	redirect := ar.GetRedirectURI()
	host := redirect.Host
	if host == "" {
		host = redirect.Scheme + ":"
	}
	req := &AuthorizeRequest{
		ClientID:     client.ID,
		ClientName:   client.Name,
		ClientHost:   client.MetadataHost,
		RedirectURI:  redirect.String(),
		RedirectHost: host,
		Scopes:       slices.Clone(ar.GetRequestedScopes()),
		FormAction:   PathAuthorize + "?" + authorizeQuery(r.Form).Encode(),
	}
	userID, ok := s.opts.LoginConsent.Login(w, r, req)
	if !ok {
		return
	}
	acct, err := s.loadAccount(ctx, s.store.db.Reader, userID)
	if err == nil {
		err = s.refusal(acct, ar.GetRequestedAt())
		if errors.Is(err, ErrPasswordChanged) {
			err = nil // only issued tokens predate a password change
		}
	}
	if err != nil {
		if hint, known := accountRefusalHints[err]; known {
			s.writeAuthorizeError(w, r, ar, fosite.ErrAccessDenied.WithHint(hint))
		} else {
			s.writeAuthorizeError(w, r, ar, fosite.ErrServerError.WithWrap(err))
		}
		return
	}
	if err := s.splitScopes(ctx, req, userID); err != nil {
		s.writeAuthorizeError(w, r, ar, fosite.ErrServerError.WithWrap(err))
		return
	}
	// Consent is remembered for the scopes it granted: asked for the
	// admin scope again after leaving it unticked, the person is asked
	// again (that is how an agent steps up).
	granted := slices.Concat(req.Scopes, req.OptionalScopes)
	remembered, err := s.hasConsent(ctx, userID, client.ID, granted)
	if err != nil {
		s.writeAuthorizeError(w, r, ar, fosite.ErrServerError.WithWrap(err))
		return
	}
	if promptsConsent(r.Form) {
		remembered = false // OpenID Connect's prompt=consent asks again
	}
	if !remembered {
		var approved bool
		var ticked []string
		if sc, ok := s.opts.LoginConsent.(ScopedConsent); ok {
			ticked, approved, ok = sc.ConsentScopes(w, r, req, userID)
			if !ok {
				return
			}
		} else if approved, ok = s.opts.LoginConsent.Consent(w, r, req, userID); !ok {
			return
		}
		if !approved {
			s.writeAuthorizeError(w, r, ar, fosite.ErrAccessDenied.WithHint("The user denied the request."))
			return
		}
		granted = slices.Clone(req.Scopes)
		for _, sc := range req.OptionalScopes {
			if slices.Contains(ticked, sc) {
				granted = append(granted, sc)
			}
		}
		if err := s.rememberConsent(ctx, userID, client.ID, granted); err != nil {
			s.writeAuthorizeError(w, r, ar, fosite.ErrServerError.WithWrap(err))
			return
		}
	}
	for _, scope := range granted {
		ar.GrantScope(scope)
	}
	ar.GrantAudience(s.resource)
	resp, err := s.provider.NewAuthorizeResponse(ctx, ar, &session{UserID: userID, Subject: acct.StableID})
	if err != nil {
		s.writeAuthorizeError(w, r, ar, err)
		return
	}
	resp.AddParameter("iss", s.issuer)
	writeAuthorizeResponse(w, ar, resp)
}

// writeAuthorizeResponse sends the browser back to the client with the
// response's parameters in the redirect URI's query: the only response
// mode this server accepts (serveAuthorize refuses the others). It does
// what fosite's WriteAuthorizeResponse does for that mode; calling
// fosite's would link its form_post template's execution, and with it
// text/template's reflective method lookup, which keeps every exported
// method of every type in the binary (see cmd/enclave's size test).
func writeAuthorizeResponse(w http.ResponseWriter, ar fosite.AuthorizeRequester, resp fosite.AuthorizeResponder) {
	h := w.Header()
	for k := range resp.GetHeader() {
		h.Set(k, resp.GetHeader().Get(k))
	}
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	u := *ar.GetRedirectURI()
	q := u.Query()
	params := resp.GetParameters()
	for k := range params {
		q.Set(k, params.Get(k))
	}
	u.RawQuery = q.Encode()
	h.Set("Location", u.String())
	w.WriteHeader(http.StatusSeeOther)
}

// authorizeParams are the parameters the login and consent forms carry
// back to the authorization endpoint.
var authorizeParams = []string{"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method", "resource", "response_mode", "nonce", "prompt"}

func authorizeQuery(form url.Values) url.Values {
	q := url.Values{}
	for _, k := range authorizeParams {
		if v, ok := form[k]; ok {
			q[k] = v
		}
	}
	return q
}

// splitScopes sets the scopes of req for userID, once signed in: the
// requested scopes without ScopeAdmin (or ScopeMCP, when that leaves none)
// in Scopes; ScopeAdmin in OptionalScopes when it was requested and the
// account holds the admin role, and otherwise nowhere (dropped silently:
// the token response's scope tells the client what it got).
func (s *Server) splitScopes(ctx context.Context, req *AuthorizeRequest, userID int64) error {
	asked := slices.Contains(req.Scopes, ScopeAdmin)
	req.Scopes = slices.DeleteFunc(req.Scopes, func(sc string) bool { return sc == ScopeAdmin })
	if len(req.Scopes) == 0 {
		req.Scopes = []string{ScopeMCP}
	}
	req.OptionalScopes = nil
	if !asked {
		return nil
	}
	admin, err := s.holdsRole(ctx, userID, capabilities.RoleAdmin)
	if err != nil {
		return err
	}
	if admin {
		req.OptionalScopes = []string{ScopeAdmin}
	}
	return nil
}

// holdsRole reports whether the account holds role now.
func (s *Server) holdsRole(ctx context.Context, userID int64, role string) (bool, error) {
	ok, err := s.store.db.Reader.NewSelect().Table("user_roles").
		Where("user_id = ? AND role_name = ?", userID, role).Exists(ctx)
	if err != nil {
		return false, fmt.Errorf("oauth: load roles: %w", err)
	}
	return ok, nil
}

// writeAuthorizeError answers a failed authorization request. When the
// client and its exact redirect URI are known, the error goes back to the
// client as a redirect carrying error, error_description, state and iss
// (RFC 9207); otherwise the person whose browser is on the page gets a
// page saying what happened and what to do (see ErrorPage), and nothing
// is sent to an unverified URI.
func (s *Server) writeAuthorizeError(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, err error) {
	if ar == nil || !ar.IsRedirectURIValid() || !redirectRegistered(ar) {
		s.writeAuthorizePage(w, r, ar, err)
		return
	}
	rfc := fosite.ErrorToRFC6749Error(err)
	if rfc.CodeField >= 500 {
		s.opts.Logger.ErrorContext(r.Context(), "oauth: authorize failed", "err", describe(err))
	}
	u := *ar.GetRedirectURI()
	u.Fragment = ""
	q := u.Query()
	q.Set("error", rfc.ErrorField)
	if d := publicDescription(rfc); d != "" {
		q.Set("error_description", d)
	}
	if st := ar.GetState(); st != "" {
		q.Set("state", st)
	}
	q.Set("iss", s.issuer)
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", u.String())
	w.WriteHeader(http.StatusSeeOther)
}

// redirectRegistered reports whether the request's redirect URI is one
// the client registered: character for character, except that a loopback
// http URI may name any port (RFC 8252 §7.3). fosite alone would also
// accept an IP loopback URI with another scheme or host spelling, and not
// accept localhost on another port.
func redirectRegistered(ar fosite.AuthorizeRequester) bool {
	c, ok := ar.GetClient().(*Client)
	if !ok || c == nil {
		return false
	}
	raw := ar.GetRequestForm().Get("redirect_uri")
	if raw == "" {
		return len(c.RedirectURIs) == 1
	}
	if raw != strings.TrimSpace(raw) {
		return false
	}
	for _, reg := range c.RedirectURIs {
		// A metadata document's redirect URIs match exactly: the
		// document lists every one its publisher vouches for.
		if raw == reg || (c.MetadataHost == "" && loopbackMatch(reg, raw)) {
			return true
		}
	}
	return false
}

// loopbackMatch reports whether requested is the registered loopback
// redirect URI on another port: both http, the same loopback host
// (127.0.0.1 or another 127/8 address, [::1], localhost), and the same
// path and query. Any other URI matches only exactly.
func loopbackMatch(registered, requested string) bool {
	reg, err := url.Parse(registered)
	if err != nil {
		return false
	}
	req, err := url.Parse(requested)
	if err != nil {
		return false
	}
	if reg.Scheme != "http" || req.Scheme != "http" || reg.Opaque != "" || req.Opaque != "" ||
		reg.User != nil || req.User != nil || reg.Fragment != "" || req.Fragment != "" {
		return false
	}
	if !isLoopback(reg.Hostname()) || !strings.EqualFold(reg.Hostname(), req.Hostname()) {
		return false
	}
	// Everything but the port must be the same.
	same := *req
	same.Host = reg.Host
	return same.String() == reg.String()
}

// requestedRedirectKey carries the redirect URI of an authorization
// request to the store's GetClient.
type requestedRedirectKey struct{}

func withRequestedRedirect(ctx context.Context, raw string) context.Context {
	if raw == "" {
		return ctx
	}
	return context.WithValue(ctx, requestedRedirectKey{}, raw)
}

// withLoopbackPort returns c, or a copy of c that also lists the requested
// redirect URI of ctx when that is one of c's loopback URIs on another
// port. Only the authorization endpoint sets that URI.
func withLoopbackPort(ctx context.Context, c *Client) *Client {
	raw, _ := ctx.Value(requestedRedirectKey{}).(string)
	if raw == "" || c.MetadataHost != "" || slices.Contains(c.RedirectURIs, raw) {
		return c
	}
	for _, reg := range c.RedirectURIs {
		if loopbackMatch(reg, raw) {
			cp := *c
			cp.RedirectURIs = append(slices.Clone(c.RedirectURIs), raw)
			return &cp
		}
	}
	return c
}
