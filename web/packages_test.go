package web

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// pkgEnv is a web shell whose registry holds code mode's capabilities.
type pkgEnv struct {
	t   *testing.T
	h   *Handler
	acc *accounts.Service
	reg *capabilities.Registry
	svc *codemode.Service
}

// pkgUser is a signed-in person of a pkgEnv.
type pkgUser struct {
	u      accounts.User
	cookie *http.Cookie
}

func newPkgEnv(t *testing.T, edit func(*Options)) *pkgEnv {
	t.Helper()
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
	svc, err := codemode.New(codemode.Config{Store: s, Registry: reg, Owners: lifecycle.Owners(acc), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.AddProvider(codemode.ExportPrefix, svc.Provider()); err != nil {
		t.Fatal(err)
	}
	caps := acc.AccountCapabilities(accounts.AccountOptions{})
	if err := reg.Register(append(caps, svc.Capabilities()...)...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) {
		o.Accounts, o.Registry, o.CodeMode = acc, reg, svc
		if edit != nil {
			edit(o)
		}
	})
	return &pkgEnv{t: t, h: h, acc: acc, reg: reg, svc: svc}
}

func (e *pkgEnv) user(name string) *pkgUser {
	e.t.Helper()
	u, _, err := e.acc.Identity.CreateUser(e.t.Context(), accounts.CreateUserInput{Email: name + "@example.com", Username: name, Password: "a long password for " + name, Verified: true})
	if err != nil {
		e.t.Fatal(err)
	}
	w := httptest.NewRecorder()
	if _, err := e.acc.Credentials.StartSession(w, httptest.NewRequest("GET", "http://enclave.test/", nil), u, false); err != nil {
		e.t.Fatal(err)
	}
	return &pkgUser{u: u, cookie: w.Result().Cookies()[0]}
}

// invoke runs a capability as u through the registry, as an agent would.
func (e *pkgEnv) invoke(u *pkgUser, name string, in any) (capabilities.Result, error) {
	e.t.Helper()
	c := accounts.CallerFor(u.u, e.acc.Roles.FreshGrants(e.t.Context(), u.u.ID))
	c.AllScopes = true
	raw, err := json.Marshal(in)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.reg.Invoke(e.t.Context(), c, name, raw)
}

// save saves a package with one export, and a job unless description
// is empty.
func (e *pkgEnv) save(u *pkgUser, name, description string) {
	e.t.Helper()
	manifest := map[string]any{
		"description": description,
		"exports":     map[string]any{"hello": map[string]any{"description": "Says hello to " + name + "."}},
	}
	if description != "" {
		manifest["jobs"] = map[string]any{"daily": map[string]any{"schedule": "0 7 * * *", "export": "hello"}}
	}
	_, err := e.invoke(u, "packageSave", map[string]any{
		"name":     name,
		"files":    map[string]string{"main.js": `export async function hello(args) { return "hi " + (args.who ?? "you"); }`},
		"manifest": manifest,
	})
	if err != nil {
		e.t.Fatalf("save %s: %v", name, err)
	}
}

func (e *pkgEnv) packages(u *pkgUser) []string {
	e.t.Helper()
	res, err := e.invoke(u, "packageList", map[string]any{})
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, p := range res.Structured.(codemode.PackageListOutput).Packages {
		names = append(names, p.Name+":"+p.Description)
	}
	return names
}

// do sends a request as u (nil: signed out).
func (e *pkgEnv) do(u *pkgUser, method, path string, form url.Values) *httptest.ResponseRecorder {
	e.t.Helper()
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, "http://enclave.test"+path, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, "http://enclave.test"+path, nil)
	}
	if u != nil {
		r.AddCookie(u.cookie)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func TestPackagesPage(t *testing.T) {
	e := newPkgEnv(t, nil)
	ann, bob := e.user("ann"), e.user("bob")
	e.save(ann, "weather", "Ann's weather tools")
	e.save(ann, "weather", "Ann's weather tools, second version")
	e.save(bob, "weather", "Bob's private weather")
	e.save(bob, "bobonly", "Bob's secret package")

	t.Run("signed out goes to sign in", func(t *testing.T) {
		w := e.do(nil, "GET", "/account/packages", nil)
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
			t.Fatalf("got %d %q", w.Code, w.Header().Get("Location"))
		}
		w = e.do(nil, "POST", "/account/packages/delete", url.Values{"name": {"weather"}})
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
			t.Fatalf("delete signed out: %d %q", w.Code, w.Header().Get("Location"))
		}
		if got := e.packages(ann); len(got) != 1 {
			t.Fatalf("ann's packages %v", got)
		}
	})

	t.Run("lists the person's own packages only", func(t *testing.T) {
		w := e.do(ann, "GET", "/account/packages", nil)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		checkSecurityHeaders(t, "packages page", w.Header(), false)
		if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q", cc)
		}
		body := w.Body.String()
		for _, want := range []string{"Ann&#39;s weather tools, second version", "pkg_weather_hello", "0 7 * * *", "Version 2", "Earlier versions (1)",
			"next run", "not run yet", `action="/account/packages/delete"`, `href="/account/packages"`} {
			if !strings.Contains(body, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		for _, leak := range []string{"Bob", "bobonly"} {
			if strings.Contains(body, leak) {
				t.Errorf("ann's page shows %q", leak)
			}
		}
		if strings.Contains(body, "<script") || strings.Contains(body, " style=") {
			t.Error("inline script or style")
		}
	})

	t.Run("deleting another person's package name deletes nothing of theirs", func(t *testing.T) {
		w := e.do(ann, "POST", "/account/packages/delete", url.Values{"name": {"bobonly"}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/packages?notice=package-missing" {
			t.Fatalf("got %d %q", w.Code, w.Header().Get("Location"))
		}
		if got := strings.Join(e.packages(bob), ","); got != "bobonly:Bob's secret package,weather:Bob's private weather" {
			t.Fatalf("bob's packages after ann's delete: %s", got)
		}
		w = e.do(ann, "GET", "/account/packages?notice=package-missing", nil)
		if !strings.Contains(w.Body.String(), "There was no such package to delete.") {
			t.Fatal("no notice")
		}
	})

	t.Run("a cross-site delete is refused", func(t *testing.T) {
		r := httptest.NewRequest("POST", "http://enclave.test/account/packages/delete", strings.NewReader("name=weather"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		r.Header.Set("Origin", "https://evil.example")
		r.AddCookie(ann.cookie)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if len(e.packages(ann)) != 1 {
			t.Fatal("the cross-site post deleted the package")
		}
	})

	t.Run("a bad name or cursor is a sentence, not a crash", func(t *testing.T) {
		w := e.do(ann, "POST", "/account/packages/delete", url.Values{"name": {"../Bad Name"}})
		if w.Code != http.StatusSeeOther {
			t.Fatalf("bad name: %d", w.Code)
		}
		w = e.do(ann, "GET", "/account/packages?after=not-a-cursor", nil)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("bad cursor: %d %s", w.Code, w.Body)
		}
		w = e.do(ann, "GET", "/account/packages?runs=not-a-cursor", nil)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("bad runs cursor: %d", w.Code)
		}
	})

	t.Run("delete removes the person's package and leaves the other's", func(t *testing.T) {
		w := e.do(ann, "POST", "/account/packages/delete", url.Values{"name": {"weather"}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/packages?notice=package-deleted" {
			t.Fatalf("got %d %q", w.Code, w.Header().Get("Location"))
		}
		if got := e.packages(ann); len(got) != 0 {
			t.Fatalf("ann still has %v", got)
		}
		if got := strings.Join(e.packages(bob), ","); got != "bobonly:Bob's secret package,weather:Bob's private weather" {
			t.Fatalf("bob's packages after ann deleted her weather: %s", got)
		}
		if jobs, err := e.svc.ListJobs(t.Context(), ownerOf(bob.u)); err != nil || len(jobs) != 2 {
			t.Fatalf("bob's jobs %v %v", jobs, err)
		}
		body := e.do(ann, "GET", "/account/packages?notice=package-deleted", nil).Body.String()
		for _, want := range []string{"The package is deleted", `id="no-packages"`, "packageSave", "execute"} {
			if !strings.Contains(body, want) {
				t.Errorf("empty page lacks %q", want)
			}
		}
	})

	t.Run("the account pages link to it", func(t *testing.T) {
		if body := e.do(ann, "GET", "/account", nil).Body.String(); !strings.Contains(body, `href="/account/packages"`) {
			t.Error("no link on the account page")
		}
	})
}

// Runs are listed newest first with their status and error, the person's
// own only, a page at a time; packages too.
func TestPackagesPagePaging(t *testing.T) {
	e := newPkgEnv(t, nil)
	ann, bob := e.user("ann"), e.user("bob")
	run := func(u *pkgUser, code string) {
		t.Helper()
		if _, err := e.invoke(u, "execute", map[string]any{"code": code}); err != nil {
			t.Fatal(err)
		}
	}
	run(ann, `throw new Error("the oldest boom")`)
	for range runsPerPage {
		run(ann, `return 1`)
	}
	run(ann, `throw new Error("the newest boom")`)
	run(bob, `throw new Error("bob's boom")`)
	for i := range packagesPerPage + 1 {
		e.save(ann, fmt.Sprintf("pkg-%02d", i), "")
	}

	body := e.do(ann, "GET", "/account/packages", nil).Body.String()
	if !strings.Contains(body, "the newest boom") || strings.Contains(body, "the oldest boom") || strings.Contains(body, "bob") {
		t.Fatalf("first page of runs:\n%s", body)
	}
	if strings.Index(body, "the newest boom") > strings.Index(body, "succeeded") {
		t.Fatal("runs are not newest first")
	}
	if !strings.Contains(body, "pkg-00") || strings.Contains(body, "pkg-25") {
		t.Fatal("first page of packages")
	}
	more := regexp.MustCompile(`href="(/account/packages\?[^"]+)" id="more-(packages|runs)"`).FindAllStringSubmatch(body, -1)
	if len(more) != 2 {
		t.Fatalf("more links %v", more)
	}
	for _, m := range more {
		link, _, _ := strings.Cut(html.UnescapeString(m[1]), "#") // a browser keeps the fragment
		page := e.do(ann, "GET", link, nil)
		if page.Code != http.StatusOK {
			t.Fatalf("GET %s: %d", link, page.Code)
		}
		b := page.Body.String()
		switch m[2] {
		case "runs":
			if !strings.Contains(b, "the oldest boom") || strings.Contains(b, "the newest boom") || strings.Contains(b, `id="more-runs"`) {
				t.Fatalf("second page of runs (%s):\n%s", link, b)
			}
		case "packages":
			if !strings.Contains(b, "pkg-25") || strings.Contains(b, "pkg-00") || !strings.Contains(b, "the newest boom") {
				t.Fatalf("second page of packages (%s):\n%s", link, b)
			}
		}
	}
}

// With code mode off, there is no page and no link.
func TestPackagesPageOff(t *testing.T) {
	for name, edit := range map[string]func(*Options){
		"no service":                   func(o *Options) { o.CodeMode = nil },
		"a nil service":                func(o *Options) { o.CodeMode = (*codemode.Service)(nil) },
		"no code mode in the registry": func(o *Options) { o.Registry = nil },
	} {
		t.Run(name, func(t *testing.T) {
			e := newPkgEnv(t, edit)
			ann := e.user("ann")
			for _, m := range []string{"GET", "POST"} {
				path := "/account/packages"
				if m == "POST" {
					path += "/delete"
				}
				if w := e.do(ann, m, path, url.Values{"name": {"x"}}); w.Code != http.StatusNotFound {
					t.Errorf("%s %s: %d", m, path, w.Code)
				}
			}
			if body := e.do(ann, "GET", "/account", nil).Body.String(); strings.Contains(body, "/account/packages") {
				t.Error("the account page links to the packages page")
			}
		})
	}
}
