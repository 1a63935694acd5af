package web

import (
	"context"
	"errors"
	"fmt"
	"github.com/enclave-mcp/enclave/federation"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/internal/outbox"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/storage"
)

// Options configures the web shell. Every zero value is a documented
// default, except Store, which is required.
type Options struct {
	// Store holds the rate-limit log and the mail tokens. Required.
	Store *storage.Store

	// Accounts serves the account and admin pages. Required.
	Accounts *accounts.Service

	// OAuth, when set, adds the connected-apps page (list and revoke the
	// person's OAuth grants). Pass the *oauth.Server.
	OAuth ConnectedApps

	// Lifecycle, when set, adds the export and delete-account pages.
	Lifecycle *lifecycle.Service

	// Audit, when set, receives browser sign-in, sign-up, password,
	// verification and admin events, and adds the admin audit-log page.
	Audit *audit.Log

	// Outbox, when set, carries verification and reset mail: the message is
	// written in the transaction that creates its link and delivered by the
	// outbox relay (register MailHandler with it), so a crash never loses
	// it. Without it, mail goes through an in-memory queue. A DevMailer
	// always gets mail at once.
	Outbox *outbox.Outbox

	// Registry is where every state-changing action of the pages runs:
	// they parse, call Registry.Invoke as the signed-in person (an
	// interactive web-session caller), and render. It must hold the
	// capabilities of accounts (AccountCapabilities, AdminCapabilities with
	// MailSetupLink, FactorCapabilities with the Handler as notifier), of Secrets, OAuth and Lifecycle (Capabilities and
	// DeleteCapability) when those are set, and it adds the admin pages of the overview, OAuth
	// clients and invite codes. Default: a registry of just those built-in
	// capabilities, without the extra admin pages.
	Registry *capabilities.Registry

	// Secrets, when set, adds the secrets page: the one place where a
	// person sees the value of a secret they stored (agents never can).
	Secrets *secrets.Service

	// CodeMode, when set and the registry holds code mode's capabilities
	// (packageList, packageHistory, packageDelete, runList), adds the
	// packages page: the person's saved packages, their jobs' live state
	// (read here) and recent code runs. Pass the *codemode.Service; a nil
	// one (code mode off) counts as none.
	CodeMode PackageJobs

	// Memory, when set and the registry holds the memory capabilities
	// (memoryList, memorySearch, memorySave, memoryUpdate, memoryDelete),
	// adds the memory page, where a person lists, searches, edits and
	// deletes their memories.
	Memory bool

	// Federation, when it has providers, adds "Sign in with ..." buttons
	// to the sign-in and sign-up pages and /oauth/authorize, the
	// /auth/external routes and the linked identities of the security
	// page (identityList, identityUnlink through Registry).
	Federation *federation.Service

	// MinPasswordLength is shown to people choosing a password (the
	// accounts service enforces its own policy). Default
	// accounts.DefaultMinPasswordLength.
	MinPasswordLength int

	// BaseURL is the public origin of the server (scheme, host, optional
	// path, no trailing slash), used in links sent by mail and as the
	// trusted origin for cross-origin checks. Default "http://localhost:8080".
	// Production requires https.
	BaseURL string

	// Production turns on the checks that must hold on a public server: New
	// refuses an http BaseURL, DevRoutes, a missing or development Mailer,
	// and session keys that do not persist. Development paths answer 404.
	Production bool

	// DevRoutes serves development pages such as /dev/mail (the messages
	// kept by a DevMailer). Default off; refused in production.
	DevRoutes bool

	// SessionKeysPersistent says that browser-session signing keys survive
	// a restart and are shared by every replica (configured keys, or keys
	// kept in SQL under a persistent secrets keeper). Production refuses to
	// start without it: keys that change on restart sign everyone out, and
	// replicas with different keys reject each other's cookies.
	SessionKeysPersistent bool

	// TrustedProxies lists the networks of reverse proxies whose
	// X-Forwarded-For header is believed. The client address is the
	// right-most X-Forwarded-For entry that is not itself a trusted proxy.
	// Default none: the client is the TCP peer.
	TrustedProxies []netip.Prefix

	// ClientIP, when set, is the client-address rule to use instead of one
	// built from TrustedProxies: pass the one the OAuth server uses so both
	// agree on who the client is.
	ClientIP *ClientIP

	// Limiter, when set, is the SQL rate limiter to count with (shared with
	// other transports). Default: a new one on Store.
	Limiter *Limiter

	// CredentialLimit bounds requests to credential endpoints (login,
	// signup, password reset request and confirm, password change, OAuth
	// login, email verification, account deletion, second-factor codes,
	// passkey sign-in, authenticator set-up and removal) per client address; they
	// all share one bucket. Zero fields take DefaultCredentialRequests per
	// DefaultCredentialWindow (10 per minute).
	CredentialLimit Limit

	// Mail sends the platform's own mail (verification and reset links,
	// notices): a *mail.Transactional, which the caller builds, closes and
	// whose outbox handler it registers. When set, Mailer and Outbox play
	// no part in mail.
	Mail MailSender

	// Mailer sends verification and reset links when Mail is unset: New
	// builds a mail.Transactional from it and Outbox. Default in
	// development: a DevMailer (see DevMail), which keeps each message at
	// once. Any other mailer is fed by a background queue with retries, so
	// requests never wait on the mail server (call Close on shutdown).
	// Production requires a real one.
	Mailer Mailer

	// SiteName is the name of the service: in every page title and the
	// header, mail subjects and bodies, the start and connect pages, the
	// authenticator-app issuer (when this handler makes its own registry)
	// and the server's key in the connect page's setups. At most 64
	// characters, no control characters. Default DefaultSiteName
	// ("enclave").
	SiteName string

	// SiteDescription is the sentence the start page shows under the site
	// name: what this server is for. At most 500 characters. Default: a
	// generic sentence about agents acting through tools.
	SiteDescription string

	// LogoURL, when set, is an image shown before the site name in the
	// header: a path on this server, under the base URL's path
	// ("/brand/logo.svg"), served by the embedder (for instance by a Public
	// Page whose handler writes the file). The pages' policy loads images
	// from their own origin only, so another host's URL is refused.
	LogoURL string

	// AccentColor, when set, replaces the accent colour of links, buttons
	// and focus rings, in light and dark mode: "#rrggbb" or "#rgb", nothing
	// else (it is served as a small stylesheet of its own, the policy
	// allowing no inline style). Button text turns black or white,
	// whichever contrasts better. Default the shell's blue.
	AccentColor string

	// Logger receives errors and notable events. Default slog.Default().
	Logger *slog.Logger

	// Now is the clock of the rate limits (mail links expire on the
	// accounts clock). Default time.Now.
	Now func() time.Time
}

// DefaultBaseURL is the base URL used when Options.BaseURL is empty.
const DefaultBaseURL = "http://localhost:8080"

// Handler is the web shell: account pages, development pages, the
// stylesheet, and the middleware shared with other transports (rate limits,
// cross-origin protection). It implements http.Handler.
type Handler struct {
	// invokeSeen, when set (tests), is told of every capability a page is
	// about to run, before the cross-site backstop (invokeRefusedCrossSite).
	invokeSeen func(r *http.Request, name string)

	opts    Options
	log     *slog.Logger
	base    *url.URL
	https   bool
	prefix  string // base URL path, "" at the root
	limiter *Limiter
	ipOf    *ClientIP
	// mail sends the platform's own mail (Options.Mail, or ownMail).
	mail MailSender
	// ownMail is the sender New built when Options.Mail was unset; Close
	// stops it and MailHandler serves its outbox rows.
	ownMail *mail.Transactional
	// accountMail writes the account mail the pages send (and the
	// built-in registry's mailers) and sends it through mail.
	accountMail *mail.AccountMail
	devMail     *DevMailer
	csrf        *http.CrossOriginProtection
	guards      *Guards
	mux         http.Handler
	// builtinOnly is set when the registry is the one New made (Options
	// had none): it holds only the account, admin, secrets and grant
	// capabilities, so the pages of other capabilities are not mounted.
	builtinOnly bool
	// patterns lists every registered route, for tests that walk them all.
	patterns []string
	// serveMux is the router under the middleware, where Mount adds pages.
	serveMux *http.ServeMux
	// pagesMu guards patterns and navLinks once Mount may add to them.
	pagesMu  sync.RWMutex
	navLinks []navLink // embedders' links in the account navigation
	// theme is the stylesheet of Options.AccentColor (nil without one).
	theme        []byte
	themeVersion string
}

// New checks opts and builds the web shell.
func New(opts Options) (*Handler, error) {
	if opts.Store == nil {
		return nil, errors.New("web: Options.Store is required")
	}
	if opts.Accounts == nil {
		return nil, errors.New("web: Options.Accounts is required")
	}
	if opts.MinPasswordLength <= 0 {
		opts.MinPasswordLength = accounts.DefaultMinPasswordLength
	}
	if opts.BaseURL == "" {
		opts.BaseURL = DefaultBaseURL
	}
	opts.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	base, err := url.Parse(opts.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.RawQuery != "" || base.Fragment != "" || base.User != nil {
		return nil, fmt.Errorf("web: base URL %q: want http(s)://host[:port][/path]", opts.BaseURL)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := checkBranding(&opts); err != nil {
		return nil, err
	}
	opts.CredentialLimit = opts.CredentialLimit.WithDefaults()

	sender, own := opts.Mail, (*mail.Transactional)(nil)
	if sender == nil {
		tc := mail.TransactionalConfig{Mailer: opts.Mailer, Production: opts.Production, Logger: opts.Logger}
		if opts.Outbox != nil {
			tc.Outbox = opts.Outbox
		}
		own = mail.NewTransactional(tc)
		sender = own
		opts.Mailer = own.Mailer()
	}
	devMail := sender.DevMail()
	if opts.Production {
		if err := checkProduction(opts, base); err != nil {
			return nil, err
		}
	}

	h := &Handler{
		opts:        opts,
		log:         opts.Logger,
		base:        base,
		https:       base.Scheme == "https",
		prefix:      strings.TrimRight(base.Path, "/"),
		limiter:     opts.Limiter,
		ipOf:        opts.ClientIP,
		mail:        sender,
		accountMail: mail.NewAccountMail(sender, opts.Store.DB, opts.SiteName, opts.BaseURL),
		ownMail:     own,
		devMail:     devMail,
		theme:       themeCSS(opts.AccentColor),
	}
	h.themeVersion = assetVersion(h.theme)
	if h.limiter == nil {
		h.limiter = NewLimiter(opts.Store, opts.Now)
	}
	if h.ipOf == nil {
		h.ipOf = &ClientIP{TrustedProxies: opts.TrustedProxies}
	}
	h.csrf = http.NewCrossOriginProtection()
	origin := base.Scheme + "://" + base.Host
	if err := h.csrf.AddTrustedOrigin(origin); err != nil {
		return nil, fmt.Errorf("web: trust origin %s: %w", origin, err)
	}
	h.csrf.SetDenyHandler(http.HandlerFunc(h.crossOriginDenied))
	if h.opts.Registry == nil {
		if err := h.ownRegistry(); err != nil {
			return nil, err
		}
	}
	h.guards = NewGuards(opts.Accounts, GuardOptions{
		LoginPath: h.prefix + pathLogin,
		Forbidden: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.renderError(w, r, http.StatusForbidden, "You do not have access to this page.")
		}),
		Logger: opts.Logger,
	})
	h.mux = h.routes()
	return h, nil
}

// checkProduction refuses settings that are unsafe on a public server.
func checkProduction(opts Options, base *url.URL) error {
	var problems []string
	if base.Scheme != "https" {
		problems = append(problems, fmt.Sprintf("the base URL %q is not https", opts.BaseURL))
	}
	if opts.DevRoutes {
		problems = append(problems, "development routes are enabled")
	}
	switch {
	case opts.Mail != nil && opts.Mail.DevMail() != nil, opts.Mail == nil && isDevMailer(opts.Mailer):
		problems = append(problems, "the development mailer keeps mail instead of sending it")
	case opts.Mail == nil && opts.Mailer == nil, opts.Mail != nil && opts.Mail.Mailer() == nil:
		problems = append(problems, "no mailer is configured")
	}
	if !opts.SessionKeysPersistent {
		problems = append(problems, "session keys are not persistent")
	}
	if len(problems) > 0 {
		return fmt.Errorf("web: refusing to start in production: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Close stops the background mail sender New built (none with
// Options.Mail): it waits until queued mail is handed to the Mailer or ctx ends (then the rest is dropped and logged).
// Call it after the HTTP server has shut down. It is safe to call more than
// once.
func (h *Handler) Close(ctx context.Context) error {
	if h.ownMail == nil {
		return nil
	}
	if err := h.ownMail.Close(ctx); err != nil {
		return fmt.Errorf("web: %w", err)
	}
	return nil
}

// isDevMailer reports whether m keeps mail instead of sending it.
func isDevMailer(m Mailer) bool {
	_, ok := m.(*DevMailer)
	return ok
}

// ServeHTTP serves the web shell.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// ClientKey returns r's client address as the rate limits and the audit
// log record it: found under the trusted-proxy setting, IPv6 grouped by
// /64; "" when the address is unknown. Hash it with audit.Log.HashIP.
func (h *Handler) ClientKey(r *http.Request) string {
	a := h.ipOf.Addr(r)
	if !a.IsValid() {
		return ""
	}
	return clientBucket(a)
}

// DevMail returns the development mailer in use, or nil when mail is really
// sent.
func (h *Handler) DevMail() *DevMailer { return h.devMail }

// Mailer returns the mailer in use when New built the sender from
// Options.Mailer, else nil (the owner of Options.Mail knows its mailer).
//
// Deprecated: keep the mail.Transactional (or the mailer) you pass.
func (h *Handler) Mailer() Mailer {
	if h.ownMail == nil {
		return nil
	}
	return h.ownMail.Mailer()
}

// absURL returns the public URL of path (which starts with "/").
func (h *Handler) absURL(path string, query url.Values) string {
	u := *h.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = query.Encode()
	return u.String()
}

// ownRegistry gives the handler a registry of the built-in capabilities
// its pages run, for an embedder that passed none.
func (h *Handler) ownRegistry() error {
	acc := h.opts.Accounts
	reg := capabilities.NewRegistry(capabilities.Options{Logger: h.log, RoleGate: acc.SecondFactors.AdminSecondFactorGate})
	am := h.accountMail
	caps := acc.AccountCapabilities(accounts.AccountOptions{EmailChange: am, Verification: am.MailVerificationLink,
		UsernameChange: am, EmailRelease: am, Audit: h.auditAccount})
	caps = append(caps, acc.AdminCapabilities(accounts.AdminOptions{MailSetupLink: am.MailSetupLink})...)
	caps = append(caps, acc.FactorCapabilities(h.opts.SiteName, am)...)
	owners := lifecycle.Owners(acc)
	if h.opts.OAuth != nil {
		caps = append(caps, oauth.GrantCapabilities(h.opts.OAuth, owners)...)
	}
	if h.opts.Secrets != nil {
		caps = append(caps, h.opts.Secrets.Capabilities(owners)...)
	}
	if h.opts.Lifecycle != nil {
		caps = append(caps, h.opts.Lifecycle.Capabilities(owners)...)
		caps = append(caps, h.opts.Lifecycle.DeleteCapability())
	}
	if h.opts.Federation != nil {
		// The security page's linked identities (identityList,
		// identityUnlink), run like every other action.
		caps = append(caps, h.opts.Federation.Capabilities(owners)...)
	}
	if err := reg.Register(caps...); err != nil {
		return fmt.Errorf("web: register the built-in capabilities: %w", err)
	}
	h.opts.Registry, h.builtinOnly = reg, true
	return nil
}
