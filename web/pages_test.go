package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a-h/templ"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

type echoOut struct {
	Echo string `json:"echo"`
	By   string `json:"by"`
}

// echoCapability answers with the text and the caller's username; it
// refuses an empty text as invalid input.
var echoCapability = capabilities.Define(capabilities.Spec[echoIn, echoOut]{
	Name: "testEcho", Domain: "test", Title: "Echo", Description: "Echoes a text as the caller.",
	Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
	Handler: func(_ context.Context, call *capabilities.Call, in echoIn) (echoOut, error) {
		if in.Text == "" {
			return echoOut{}, capabilities.Errorf(capabilities.CodeInvalidInput, "Write something to echo.")
		}
		return echoOut{Echo: in.Text, By: call.Caller.Username}, nil
	},
})

// text is a component writing escaped text, as an embedder's would.
func text(format string, args ...any) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, templ.EscapeString(fmt.Sprintf(format, args...)))
		return err
	})
}

// An embedder's page runs in the shell: the layout and its site name, the
// navigation link, the signed-in person and Registry.Invoke as them,
// cross-origin protection before the handler, the sign-in redirect, roles.
func TestMountPages(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		h := newTestHandler(t, s, func(o *Options) { o.SiteName = "Acme"; o.CredentialLimit = Limit{Requests: 1000} })
		if err := h.opts.Registry.Register(echoCapability); err != nil {
			t.Fatal(err)
		}
		var posts atomic.Int64
		err := h.Mount(
			Page{Pattern: "GET /echo", Nav: "Echo", Handler: func(c *PageContext) {
				u, _ := c.User()
				c.Render(http.StatusOK, "Echo", text("form for %s", u.Username))
			}},
			Page{Pattern: "POST /echo", Handler: func(c *PageContext) {
				posts.Add(1)
				form, ok := c.Form()
				if !ok {
					return
				}
				var out echoOut
				if err := c.Invoke("testEcho", echoIn{Text: form.Get("text")}, &out); err != nil {
					c.Fail(err)
					return
				}
				c.SetNotice("Echoed.")
				c.Render(http.StatusOK, "Echoed", text("%s said <%s>", out.By, out.Echo))
			}},
			Page{Pattern: "GET /about-acme", Public: true, Handler: func(c *PageContext) {
				_, signedIn := c.User()
				_, hasCaller := c.Caller()
				c.Render(http.StatusOK, "About", text("public page, signed in %v %v, link %s", signedIn, hasCaller, c.URL("/echo")))
			}},
			Page{Pattern: "GET /ops/{id}", Role: "admin", Handler: func(c *PageContext) {
				c.Render(http.StatusOK, "Ops", text("ops %s", c.Request.PathValue("id")))
			}},
			Page{Pattern: "GET /go", Handler: func(c *PageContext) { c.Redirect("//evil.example/") }},
		)
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, h)

		anon := newBrowser(t, srv)
		if a := anon.get("/echo"); a.Status != http.StatusSeeOther || a.Location != "/login?redirectTo=%2Fecho" {
			t.Fatalf("signed out: %d %q", a.Status, a.Location)
		}
		a := anon.get("/about-acme")
		expect(t, "public page", a, http.StatusOK, "<title>About · Acme</title>", "public page, signed in false false, link /echo")
		checkSecurityHeaders(t, "public page", a.Header, false)

		ann := newBrowser(t, srv)
		signedIn(t, h, ann, "ann@example.com", "ann", false)
		a = ann.get("/echo")
		expect(t, "page", a, http.StatusOK, "<title>Echo · Acme</title>", "form for ann", `action="/logout"`)
		checkSecurityHeaders(t, "page", a.Header, false)
		// The page's navigation link is on the account pages.
		expect(t, "account nav", ann.get("/account"), http.StatusOK, `<a href="/echo">Echo</a>`)

		a = ann.post("/echo", url.Values{"text": {"hi"}})
		expect(t, "post", a, http.StatusOK, "ann said &lt;hi&gt;", `<p class="notice" role="status">Echoed.</p>`)
		a = ann.post("/echo", url.Values{"text": {""}})
		expect(t, "invalid", a, http.StatusBadRequest, "Write something to echo.")
		expect(t, "NUL", ann.post("/echo", url.Values{"text": {"a\x00b"}}), http.StatusBadRequest, "not allowed")

		// A form posted from another site never reaches the handler.
		before := posts.Load()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/echo", strings.NewReader("text=x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Origin", "https://evil.example")
		expect(t, "cross-site", ann.do(req), http.StatusForbidden)
		if posts.Load() != before {
			t.Fatal("the cross-site post ran the handler")
		}

		expect(t, "role page, plain user", ann.get("/ops/7"), http.StatusForbidden)
		root := newBrowser(t, srv)
		signedIn(t, h, root, "root@example.com", "operator-jo", true)
		expect(t, "role page, admin", root.get("/ops/7"), http.StatusOK, "ops 7")

		if a := ann.get("/go"); a.Status != http.StatusSeeOther || a.Location != "/" {
			t.Fatalf("redirect elsewhere: %d %q", a.Status, a.Location)
		}

		// Mounting while serving works too.
		if err := h.Mount(Page{Pattern: "GET /later", Handler: func(c *PageContext) { c.Error(http.StatusTeapot, "Later.") }}); err != nil {
			t.Fatal(err)
		}
		expect(t, "later", ann.get("/later"), http.StatusTeapot, "Later.", "· Acme</title>")
	})
}

// Mount refuses what it cannot serve as asked, changing nothing.
func TestMountRefuses(t *testing.T) {
	h := newTestHandler(t, storagetest.Open(t, storage.SQLite), nil)
	ok := func(*PageContext) {}
	for _, pg := range []Page{
		{Pattern: "GET /x"},
		{Pattern: "/x", Handler: ok},
		{Pattern: "DELETE /x", Handler: ok},
		{Pattern: "GET x", Handler: ok},
		{Pattern: "GET example.com/x", Handler: ok},
		{Pattern: "GET /mcp", Handler: ok},
		{Pattern: "GET /oauth/authorize", Handler: ok},
		{Pattern: "GET /.well-known/x", Handler: ok},
		{Pattern: "GET /static/x.js", Handler: ok},
		{Pattern: "GET /dev/x", Handler: ok},
		{Pattern: "GET /healthz", Handler: ok},
		{Pattern: "GET /account", Handler: ok},           // the shell's own page
		{Pattern: "POST /x/{id}", Nav: "X", Handler: ok}, // a link needs a GET without wildcards
		{Pattern: "GET /x/{id", Handler: ok},
	} {
		if err := h.Mount(pg); err == nil {
			t.Errorf("Mount(%q) accepted", pg.Pattern)
		}
	}
	// A batch with one bad page mounts none of them.
	if err := h.Mount(Page{Pattern: "GET /y", Handler: ok}, Page{Pattern: "GET /y", Handler: ok}); err == nil {
		t.Fatal("a batch with the same page twice was accepted")
	}
	if err := h.Mount(Page{Pattern: "GET /y", Handler: ok}); err != nil {
		t.Fatalf("the refused batch mounted part of itself: %v", err)
	}
	if err := h.Mount(Page{Pattern: "GET /x", Handler: ok}); err != nil {
		t.Fatal(err)
	}
	if err := h.Mount(Page{Pattern: "GET /x", Handler: ok}); err == nil {
		t.Fatal("the same page mounted twice")
	}
}
