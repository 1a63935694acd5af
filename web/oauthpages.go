package web

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/oauth"
)

// Handler signs people in and asks for their consent on the OAuth
// authorization endpoint.
var (
	_ oauth.LoginConsent  = (*Handler)(nil)
	_ oauth.ScopedConsent = (*Handler)(nil)
	_ oauth.ErrorPage     = (*Handler)(nil)
)

// Login implements oauth.LoginConsent. A signed-in person is returned at
// once. Otherwise a POST carrying email and password is checked like the
// login page (cross-origin protection, the shared credential rate limit)
// and starts a session; anything else gets the login form, posting back to
// the authorization endpoint.
func (h *Handler) Login(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest) (int64, bool) {
	ctx := r.Context()
	if hasSessionCookie(r) {
		sess, err := h.opts.Accounts.Credentials.Authenticate(ctx, r)
		if err == nil {
			return sess.User.ID, true
		}
		if !errors.Is(err, accounts.ErrNoSession) && !errors.Is(err, accounts.ErrSuspended) && !errors.Is(err, accounts.ErrDeleting) {
			h.internalError(w, r, "oauth login: session", err)
			return 0, false
		}
	}
	f := authForm{Action: req.FormAction, ClientName: req.ClientName, PasskeyNext: req.FormAction}
	// "Sign in with ..." comes back to this authorization request.
	f.External = h.externalButtons(req.FormAction)
	csp := authorizePolicy(req.RedirectURI)
	if r.Method == http.MethodPost && r.PostFormValue("pending") != "" {
		return h.oauthSecondFactor(w, r, req, f, csp)
	}
	if r.Method != http.MethodPost || r.PostFormValue("password") == "" {
		h.renderCSP(w, r, http.StatusOK, loginPage(h.loginFramePage(r), f), csp)
		return 0, false
	}
	if err := h.csrf.Check(r); err != nil {
		h.crossOriginDenied(w, r)
		return 0, false
	}
	if !formStorable(r) { // r.PostFormValue parsed the form
		h.renderError(w, r, http.StatusBadRequest, "The form contains characters that are not allowed. Go back and try again.")
		return 0, false
	}
	if !h.allowCredential(w, r) {
		return 0, false
	}
	f.Email = strings.TrimSpace(r.PostFormValue("email"))
	u, ok := h.signIn(w, r, &f)
	if !ok {
		if sf := f.secondFactor; sf != nil {
			sf.Action, sf.ClientName, sf.Next = req.FormAction, req.ClientName, req.FormAction
			h.renderSecondFactor(w, r, http.StatusOK, *sf, csp)
			return 0, false
		}
		h.renderCSP(w, r, f.status(), loginPage(h.loginFramePage(r), f), csp)
		return 0, false
	}
	return u.ID, true
}

// oauthSecondFactor is the second step of a sign-in on the authorization
// endpoint: the code posted with the token of the pending sign-in (checked
// like the password: cross-origin protection, the credential bucket).
func (h *Handler) oauthSecondFactor(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, f authForm, csp string) (int64, bool) {
	if err := h.csrf.Check(r); err != nil {
		h.crossOriginDenied(w, r)
		return 0, false
	}
	if !formStorable(r) {
		h.renderError(w, r, http.StatusBadRequest, "The form contains characters that are not allowed. Go back and try again.")
		return 0, false
	}
	if !h.allowCredential(w, r) {
		return 0, false
	}
	sf := secondFactorForm{Action: req.FormAction, Pending: r.PostFormValue("pending"), ClientName: req.ClientName, Next: req.FormAction}
	u, status := h.completeSecondFactor(w, r, &sf)
	if status == 0 {
		return u.ID, true
	}
	if sf.Pending == "" {
		f.Error, f.errStatus = sf.Error, status
		h.renderCSP(w, r, status, loginPage(h.loginFramePage(r), f), csp)
		return 0, false
	}
	if pk, err := h.opts.Accounts.SecondFactors.FactorsOfPending(r.Context(), sf.Pending); err == nil {
		sf.Passkeys = pk
	}
	h.renderSecondFactor(w, r, status, sf, csp)
	return 0, false
}

// Consent implements oauth.LoginConsent: a cross-origin-checked POST with
// decision=approve or decision=deny answers; anything else shows the
// consent page. The page cannot be framed (frame-ancestors 'none',
// X-Frame-Options DENY).
//
// The sign-in and consent pages are the only ones whose form-action also
// allows the request's redirect URI (see authorizePolicy): their forms post
// here, and the answer redirects the browser to the client.
func (h *Handler) Consent(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) (approved, ok bool) {
	_, approved, ok = h.ConsentScopes(w, r, req, userID)
	return approved, ok
}

// ConsentScopes implements oauth.ScopedConsent: Consent, and the optional
// scopes of req (the admin scope) whose checkbox (a field grant with the
// scope as its value) the approving form carried.
//
// The page lists, by domain, what the app will be able to call: the
// registry's capabilities visible to the person's agent with the scopes
// the grant carries; with the admin scope offered, the admin capabilities
// it would add are listed beside its checkbox.
func (h *Handler) ConsentScopes(w http.ResponseWriter, r *http.Request, req *oauth.AuthorizeRequest, userID int64) (ticked []string, approved, ok bool) {
	if r.Method == http.MethodPost {
		switch r.PostFormValue("decision") {
		case "approve", "deny":
			if err := h.csrf.Check(r); err != nil {
				h.crossOriginDenied(w, r)
				return nil, false, false
			}
			if r.PostFormValue("decision") == "deny" {
				return nil, false, true
			}
			for _, sc := range r.PostForm["grant"] {
				if slices.Contains(req.OptionalScopes, sc) && !slices.Contains(ticked, sc) {
					ticked = append(ticked, sc)
				}
			}
			return ticked, true, true
		}
	}
	ctx := r.Context()
	u, err := h.opts.Accounts.Identity.UserByID(ctx, userID)
	if err != nil {
		h.internalError(w, r, "oauth consent: load user", err)
		return nil, false, false
	}
	// The caller the app's tokens will stand for: an agent session, with
	// the grant's scopes and no others.
	caller := accounts.CallerFor(u, h.opts.Accounts.Roles.FreshGrants(ctx, u.ID))
	caller.Interactive, caller.AllScopes, caller.Scopes = true, false, slices.Clone(req.Scopes)
	v := consentView{AdminOffered: slices.Contains(req.OptionalScopes, oauth.ScopeAdmin)}
	base := h.opts.Registry.Visible(ctx, caller)
	v.Groups = groupCapabilities(base, nil)
	if v.AdminOffered {
		seen := make(map[string]bool, len(base))
		for _, c := range base {
			seen[c.Name] = true
		}
		caller.Scopes = append(caller.Scopes, oauth.ScopeAdmin)
		v.AdminGroups = groupCapabilities(h.opts.Registry.Visible(ctx, caller), seen)
	} else {
		v.AdminNotAsked = caller.HasRole(adminRole)
	}
	p := h.page(r, "Connect "+req.ClientName)
	p.Viewer = &viewer{Username: u.Username}
	h.renderCSP(w, r, http.StatusOK, consentPage(p, req, u.Username, v), authorizePolicy(req.RedirectURI))
	return nil, false, false
}

// consentView is what the consent page shows of the capabilities.
type consentView struct {
	// Groups are what the app can call with the grant's scopes.
	Groups []capabilityGroup
	// AdminOffered: the app asked for the admin scope and the person may
	// grant it (a checkbox, unticked); AdminGroups is what it would add.
	AdminOffered bool
	AdminGroups  []capabilityGroup
	// AdminNotAsked: the person is an admin, but the app did not ask for
	// the admin scope.
	AdminNotAsked bool
}

// capabilityGroup is the capabilities of one domain.
type capabilityGroup struct {
	Domain, Label string
	Titles        []string
}

// groupCapabilities groups caps by domain (sorted by domain, each in the
// registry's order), leaving out the names in skip.
func groupCapabilities(caps []capabilities.Capability, skip map[string]bool) []capabilityGroup {
	byDomain := map[string]*capabilityGroup{}
	var out []*capabilityGroup
	for _, c := range caps {
		if skip[c.Name] {
			continue
		}
		g := byDomain[c.Domain]
		if g == nil {
			g = &capabilityGroup{Domain: c.Domain, Label: domainLabel(c.Domain)}
			byDomain[c.Domain] = g
			out = append(out, g)
		}
		g.Titles = append(g.Titles, cmp.Or(c.Title, c.Name))
	}
	slices.SortFunc(out, func(a, b *capabilityGroup) int { return cmp.Compare(a.Domain, b.Domain) })
	groups := make([]capabilityGroup, len(out))
	for i, g := range out {
		groups[i] = *g
	}
	return groups
}

// domainLabel is a capability domain as a heading: its first letter in
// upper case ("Other" for none).
func domainLabel(domain string) string {
	if domain == "" {
		return "Other"
	}
	r, n := utf8.DecodeRuneInString(domain)
	return string(unicode.ToUpper(r)) + domain[n:]
}

// AuthorizeError implements oauth.ErrorPage: an error of the authorization
// endpoint that cannot go back to the app is the shell's error page, with
// the sentence that says what to do, and its status (400 for a bad
// request, an unknown app included; never a Basic challenge).
func (h *Handler) AuthorizeError(w http.ResponseWriter, r *http.Request, e *oauth.AuthorizeError) {
	h.render(w, r, e.Status, errorPage(h.page(r, e.Title), e.Status, e.Message))
}
