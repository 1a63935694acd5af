package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/a-h/templ"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/integrations/remotemcp"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// xsiteEnv is a handler with most of its pages on, an embedder's GET page
// that invokes, an admin signed in, and a count of the capabilities the
// pages are about to run.
type xsiteEnv struct {
	h       *Handler
	u       accounts.User
	session *http.Cookie

	mu   sync.Mutex
	seen []string // capability names, in order
}

const xsiteMountedPage = "GET /xsite/embedded"

func newXsiteEnv(t *testing.T, stubs bool) *xsiteEnv {
	t.Helper()
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	lc := newLifecycle(t, s, acc)
	h := newTestHandler(t, s, func(o *Options) {
		o.CredentialLimit = Limit{Requests: 1000}
		o.Accounts = acc
		o.OAuth = &fakeApps{}
		o.Lifecycle = lc
		o.Audit = audit.New(s, make([]byte, 32), quietLogger())
		if stubs {
			o.Registry, o.Memory = xsiteRegistry(t, acc, lc), true
		}
	})
	e := &xsiteEnv{h: h}
	h.invokeSeen = func(_ *http.Request, name string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.seen = append(e.seen, name)
	}
	if err := h.Mount(Page{Pattern: xsiteMountedPage, Handler: func(c *PageContext) {
		if err := c.Invoke("accountFactors", struct{}{}, nil); err != nil {
			c.Fail(err)
			return
		}
		c.Render(http.StatusOK, "Embedded", templ.NopComponent)
	}}); err != nil {
		t.Fatal(err)
	}
	u, err := acc.Identity.Signup(t.Context(), accounts.SignupInput{Email: "admin@example.com", Username: "boss", Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acc.Roles.GrantAdminAsOperator(t.Context(), u.ID); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	if _, err := acc.Credentials.StartSession(w, httptest.NewRequest("GET", "http://enclave.test/", nil), u, false); err != nil {
		t.Fatal(err)
	}
	e.u, e.session = u, w.Result().Cookies()[0]
	return e
}

// get requests path signed in, with Sec-Fetch-Site site ("" sends none),
// and returns the answer and the capabilities it was about to run.
func (e *xsiteEnv) get(method, path, site string, extra ...*http.Cookie) (*httptest.ResponseRecorder, []string) {
	r := httptest.NewRequest(method, "http://enclave.test"+path, nil)
	r.RemoteAddr = "127.0.0.1:5555"
	if site != "" {
		r.Header.Set("Sec-Fetch-Site", site)
		r.Header.Set("Sec-Fetch-Mode", "navigate")
	}
	r.AddCookie(e.session)
	for _, c := range extra {
		r.AddCookie(c)
	}
	e.mu.Lock()
	before := len(e.seen)
	e.mu.Unlock()
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	e.mu.Lock()
	defer e.mu.Unlock()
	return w, slices.Clone(e.seen[before:])
}

// concreteXsitePath is pattern's path with its wildcards filled in for
// the signed-in admin.
func (e *xsiteEnv) concretePath(pattern string) string {
	_, path := concretePath(pattern)
	if strings.HasPrefix(path, "/admin/users/1") {
		path = strings.Replace(path, "/1", "/"+e.u.StableID, 1)
	}
	return strings.ReplaceAll(path, "/1", "/"+strconv.FormatInt(e.u.ID, 10))
}

// isInterstitial reports whether w is the cross-site page offering to
// continue to target.
func isInterstitial(w *httptest.ResponseRecorder, target string) error {
	body := w.Body.String()
	switch {
	case w.Code != http.StatusOK:
		return fmt.Errorf("status %d", w.Code)
	case w.Header().Get("Cache-Control") != "no-store":
		return fmt.Errorf("Cache-Control %q", w.Header().Get("Cache-Control"))
	case !strings.Contains(body, `id="cross-site-continue" href="`+target+`"`):
		return fmt.Errorf("no continue link to %q in %.400s", target, body)
	case strings.Contains(body, "<script"):
		return fmt.Errorf("the page has a script")
	}
	return nil
}

// Walk every GET route, signed in as an admin: a route whose handler runs
// a capability for a same-origin read must be covered (invokingReads, or
// a mounted page), and a cross-site or same-site read of any route runs
// none. A covered route answers that read with the continue page.
func TestCrossSiteReadsRunNoCapability(t *testing.T) {
	for _, stubs := range []bool{false, true} {
		t.Run(fmt.Sprintf("stubs=%v", stubs), func(t *testing.T) {
			e := newXsiteEnv(t, stubs)
			invoking := 0
			for _, p := range e.h.patterns {
				method, _, _ := strings.Cut(p, " ")
				if method != http.MethodGet {
					continue
				}
				path := e.concretePath(p)
				flowCookie, callback := invokingCallbacks[p]
				covered := invokingReads[p] || callback || p == xsiteMountedPage
				w, ran := e.get(http.MethodGet, path, "same-origin")
				if len(ran) > 0 {
					invoking++
					t.Logf("GET %s runs %v", p, ran)
					if !covered {
						t.Errorf("GET %s (%s) runs %v but is not in invokingReads", path, p, ran)
					}
				}
				if callback {
					// The provider's redirect back, in the person's own
					// flow (its cookie set when it started here), is served.
					for _, site := range []string{"cross-site", "same-site"} {
						w, ran := e.get(http.MethodGet, path+"?state=s&code=c", site, &http.Cookie{Name: flowCookie, Value: "binding"})
						if len(ran) == 0 || strings.Contains(w.Body.String(), "opened from another site") {
							t.Errorf("GET %s from %s in a flow: ran %v, refused: %v", path, site, ran, strings.Contains(w.Body.String(), "opened from another site"))
						}
						// Done, it moves on to its page from this origin (a
						// redirect would keep the chain cross-site).
						if stubs && (w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<meta http-equiv="refresh" content="0;url=/account/`)) {
							t.Errorf("GET %s from %s in a flow: %d %.300s", path, site, w.Code, w.Body.String())
						}
					}
				}
				for _, site := range []string{"cross-site", "same-site"} {
					for _, m := range []string{http.MethodGet, http.MethodHead} {
						w, ran = e.get(m, path, site)
						if len(ran) > 0 {
							t.Errorf("%s %s (%s) from %s: ran %v", m, path, p, site, ran)
						}
						if covered && m == http.MethodGet {
							if err := isInterstitial(w, path); err != nil {
								t.Errorf("%s %s from %s: %v", m, path, site, err)
							}
						}
						if covered && m == http.MethodHead && (w.Code != http.StatusOK || w.Body.Len() != 0) {
							t.Errorf("HEAD %s from %s: %d with %d bytes", path, site, w.Code, w.Body.Len())
						}
					}
				}
			}
			// The walk met the pages that invoke in this configuration (the
			// export, the admin pages, the security page, the embedded page).
			if want := map[bool]int{false: 6, true: 30}[stubs]; invoking < want {
				t.Fatalf("only %d GET routes invoked a capability: the walk did not reach the pages", invoking)
			}
		})
	}
}

// xsiteRegistry holds the built-in capabilities and a stub of each
// capability whose presence adds pages (usage, feedback, webhooks,
// community, workspaces, connections, remote servers, mail, memory, the
// admin pages of a full registry). A stub's arguments may be refused: the
// walk counts the calls the pages are about to make, not their answers.
func xsiteRegistry(t *testing.T, acc *accounts.Service, lc *lifecycle.Service) *capabilities.Registry {
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
	caps := append(acc.AccountCapabilities(accounts.AccountOptions{}), acc.AdminCapabilities(accounts.AdminOptions{})...)
	caps = append(caps, acc.FactorCapabilities("Enclave", nil)...)
	caps = append(caps, lc.Capabilities(lifecycle.Owners(acc))...)
	for _, name := range []string{"usageGet", "feedbackSubmit", "feedbackListOwn", "adminFeedbackList", "adminFeedbackGet", "adminWebhookList",
		"communitySearch", "communityGet", "communityListOwn", "adminCommunityReportList", "adminCommunityActivityList",
		"workspaceList", "workspaceGet", "connectionList", "connectionAppList", "mcpServerList", "mailList", "mailRuleList",
		"mailThread", "mailRead", "mailAttachmentGet", "memoryList", "adminOverview", "adminOAuthClientList", "adminInviteList"} {
		caps = append(caps, capabilities.Define(capabilities.Spec[struct{}, struct{}]{
			Name: name, Domain: "stub", Description: "Stub.", Annotations: &capabilities.Annotations{ReadOnly: true},
			Handler: func(context.Context, *capabilities.Call, struct{}) (struct{}, error) { return struct{}{}, nil },
		}))
	}
	caps = append(caps, capabilities.Define(capabilities.Spec[integrations.FinishInput, struct{}]{
		Name: "connectionConnectFinish", Domain: "stub", Description: "Stub.", Annotations: &capabilities.Annotations{},
		Handler: func(context.Context, *capabilities.Call, integrations.FinishInput) (struct{}, error) {
			return struct{}{}, nil
		},
	}), capabilities.Define(capabilities.Spec[remotemcp.ConsentFinishInput, struct{}]{
		Name: "mcpServerConsentFinish", Domain: "stub", Description: "Stub.", Annotations: &capabilities.Annotations{},
		Handler: func(context.Context, *capabilities.Call, remotemcp.ConsentFinishInput) (struct{}, error) {
			return struct{}{}, nil
		},
	}))
	if err := reg.Register(caps...); err != nil {
		t.Fatal(err)
	}
	return reg
}

// The continue page is for cross-site and same-site reads only; a
// same-origin read, a typed address (none) and a client without Fetch
// Metadata get the page itself. Its link keeps the query, escaped, and
// stays on this origin.
func TestCrossSiteReadContinuePage(t *testing.T) {
	e := newXsiteEnv(t, false)
	for _, tc := range []struct {
		site         string
		interstitial bool
	}{
		{"cross-site", true},
		{"same-site", true},
		{"same-origin", false},
		{"none", false},
		{"", false},
	} {
		t.Run("site="+tc.site, func(t *testing.T) {
			w, ran := e.get(http.MethodGet, pathExportJSON, tc.site)
			if tc.interstitial {
				if err := isInterstitial(w, pathExportJSON); err != nil {
					t.Fatal(err)
				}
				if len(ran) != 0 {
					t.Fatalf("ran %v", ran)
				}
				if !strings.Contains(w.Body.String(), "from another site") {
					t.Errorf("the page does not say where the link came from")
				}
				return
			}
			if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") ||
				!slices.Equal(ran, []string{"accountExportManifest"}) {
				t.Fatalf("%d %q ran %v", w.Code, w.Header().Get("Content-Type"), ran)
			}
		})
	}

	t.Run("query kept and escaped", func(t *testing.T) {
		w, ran := e.get(http.MethodGet, "/admin/users?q=%3Cb%3E%22x&role=admin", "cross-site")
		if len(ran) != 0 {
			t.Fatalf("ran %v", ran)
		}
		if err := isInterstitial(w, "/admin/users?q=%3Cb%3E%22x&amp;role=admin"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("signed out too", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "http://enclave.test/admin/users", nil)
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if err := isInterstitial(w, "/admin/users"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a page outside the list is served", func(t *testing.T) {
		if w, _ := e.get(http.MethodGet, pathAccount, "cross-site"); w.Code != http.StatusOK || strings.Contains(w.Body.String(), "cross-site-continue") {
			t.Fatalf("%d", w.Code)
		}
	})
}

// The backstop: a cross-site read that reaches Invoke through a route
// missing from invokingReads runs nothing.
func TestInvokeRefusesACrossSiteRead(t *testing.T) {
	e := newXsiteEnv(t, false)
	r := httptest.NewRequest(http.MethodGet, "http://enclave.test/anything", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	r = r.WithContext(t.Context())
	if _, err := e.h.invokeAs(r, e.u, "accountFactors", struct{}{}); err != errCrossSiteRead {
		t.Fatalf("err %v", err)
	}
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if _, err := e.h.invokeAs(r, e.u, "accountFactors", struct{}{}); err != nil {
		t.Fatalf("same-origin: %v", err)
	}
	post := httptest.NewRequest(http.MethodPost, "http://enclave.test/anything", nil)
	post.Header.Set("Sec-Fetch-Site", "cross-site")
	if crossSiteRead(post) {
		t.Fatal("a post is not a read (the cross-origin protection answers it)")
	}
}
