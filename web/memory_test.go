package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// memEnv is a web shell whose registry holds the memory capabilities; it
// reuses pkgEnv's users, requests and invocations.
func newMemEnv(t *testing.T, edit func(*Options)) *pkgEnv {
	t.Helper()
	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger()})
	svc, err := memory.New(memory.Config{Store: s, Registry: reg, Owners: lifecycle.Owners(acc), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(append(acc.AccountCapabilities(accounts.AccountOptions{}), svc.Capabilities()...)...); err != nil {
		t.Fatal(err)
	}
	h := newTestHandler(t, s, func(o *Options) {
		o.Accounts, o.Registry, o.Memory = acc, reg, true
		if edit != nil {
			edit(o)
		}
	})
	return &pkgEnv{t: t, h: h, acc: acc, reg: reg}
}

func (e *pkgEnv) remember(u *pkgUser, text string, tags ...string) memory.Memory {
	e.t.Helper()
	res, err := e.invoke(u, "memorySave", map[string]any{"text": text, "tags": tags})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Structured.(memory.Memory)
}

func (e *pkgEnv) memoryOf(u *pkgUser, id string) (memory.Memory, error) {
	e.t.Helper()
	res, err := e.invoke(u, "memoryGet", map[string]any{"id": id})
	if err != nil {
		return memory.Memory{}, err
	}
	return res.Structured.(memory.Memory), nil
}

func TestMemoryPage(t *testing.T) {
	e := newMemEnv(t, nil)
	ann, bob := e.user("ann"), e.user("bob")
	teal := e.remember(ann, "Ann's favourite colour is teal", "preferences")
	e.remember(ann, "Ann plays the cello")
	bobs := e.remember(bob, "Bob's favourite colour is <b>teal</b> too")

	t.Run("signed out goes to sign in", func(t *testing.T) {
		for _, tc := range []struct{ method, path string }{{"GET", "/account/memory"}, {"POST", "/account/memory/delete"}, {"POST", "/account/memory/update"}, {"POST", "/account/memory/save"}} {
			w := e.do(nil, tc.method, tc.path, url.Values{"id": {teal.ID}, "text": {"x"}})
			if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login") {
				t.Fatalf("%s %s: %d %q", tc.method, tc.path, w.Code, w.Header().Get("Location"))
			}
		}
	})

	t.Run("lists and searches the person's own memories only", func(t *testing.T) {
		w := e.do(ann, "GET", "/account/memory", nil)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		checkSecurityHeaders(t, "memory page", w.Header(), false)
		if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q", cc)
		}
		body := w.Body.String()
		for _, want := range []string{"Ann&#39;s favourite colour is teal", "Ann plays the cello", "preferences", `id="memory-` + teal.ID + `"`, `href="/account/memory"`} {
			if !strings.Contains(body, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if strings.Contains(body, "Bob") || strings.Contains(body, bobs.ID) {
			t.Error("ann's page shows bob's memory")
		}
		if strings.Contains(body, "<script") || strings.Contains(body, " style=") {
			t.Error("inline script or style")
		}
		body = e.do(ann, "GET", "/account/memory?q="+url.QueryEscape(`teal" OR user_id:*`), nil).Body.String()
		if !strings.Contains(body, "favourite colour is teal") || strings.Contains(body, "cello") || strings.Contains(body, "Bob") {
			t.Errorf("search shows the wrong memories: %s", body)
		}
		if strings.Contains(e.do(bob, "GET", "/account/memory", nil).Body.String(), "<b>teal</b>") {
			t.Error("a memory's text is not escaped")
		}
	})

	t.Run("editing or deleting another person's memory changes nothing of theirs", func(t *testing.T) {
		w := e.do(ann, "POST", "/account/memory/update", url.Values{"id": {bobs.ID}, "text": {"Ann wrote this"}, "status": {"archived"}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/memory?notice=memory-missing" {
			t.Fatalf("update: %d %q", w.Code, w.Header().Get("Location"))
		}
		w = e.do(ann, "POST", "/account/memory/delete", url.Values{"id": {bobs.ID}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/memory?notice=memory-missing" {
			t.Fatalf("delete: %d %q", w.Code, w.Header().Get("Location"))
		}
		if m, err := e.memoryOf(bob, bobs.ID); err != nil || m.Text != bobs.Text || m.Status != memory.StatusActive {
			t.Fatalf("bob's memory: %+v %v", m, err)
		}
	})

	t.Run("save, edit and delete", func(t *testing.T) {
		w := e.do(ann, "POST", "/account/memory/save", url.Values{"text": {"Ann's dentist is on Tuesday"}, "tags": {"health, Calendar"}, "source": {"email"}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/memory?notice=memory-saved" {
			t.Fatalf("save: %d %q %s", w.Code, w.Header().Get("Location"), w.Body)
		}
		res, _ := e.invoke(ann, "memorySearch", map[string]any{"query": "dentist"})
		found := res.Structured.(memory.SearchOutput).Memories
		if len(found) != 1 || found[0].Writer != "web" || strings.Join(found[0].Tags, ",") != "health,calendar" || found[0].Source != "email" {
			t.Fatalf("saved %+v", found)
		}
		w = e.do(ann, "POST", "/account/memory/update", url.Values{"id": {teal.ID}, "text": {"Ann's favourite colour was teal"}, "tags": {""}, "status": {"archived"}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/memory?notice=memory-updated" {
			t.Fatalf("update: %d %q", w.Code, w.Header().Get("Location"))
		}
		if m, _ := e.memoryOf(ann, teal.ID); m.Text != "Ann's favourite colour was teal" || len(m.Tags) != 0 || m.Status != memory.StatusArchived {
			t.Fatalf("updated %+v", m)
		}
		w = e.do(ann, "POST", "/account/memory/delete", url.Values{"id": {teal.ID}})
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/account/memory?notice=memory-deleted" {
			t.Fatalf("delete: %d %q", w.Code, w.Header().Get("Location"))
		}
		if _, err := e.memoryOf(ann, teal.ID); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("still there: %v", err)
		}
	})

	t.Run("refused input is a sentence on the page and writes nothing", func(t *testing.T) {
		count := func() int {
			res, err := e.invoke(ann, "memoryList", map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			return len(res.Structured.(memory.ListOutput).Memories)
		}
		before := count()
		w := e.do(ann, "POST", "/account/memory/save", url.Values{"text": {"   "}, "tags": {"no spaces allowed"}})
		if w.Code != http.StatusUnprocessableEntity || shownMessage(w.Body.String()) != "Text is empty." {
			t.Fatalf("save: %d %q", w.Code, shownMessage(w.Body.String()))
		}
		if n := count(); n != before {
			t.Fatalf("a refused save wrote a memory: %d, then %d", before, n)
		}
		m := e.remember(ann, "keep me")
		w = e.do(ann, "POST", "/account/memory/update", url.Values{"id": {m.ID}, "text": {""}, "status": {"active"}})
		if w.Code != http.StatusUnprocessableEntity || shownMessage(w.Body.String()) != "Text is empty." {
			t.Fatalf("update: %d %q", w.Code, shownMessage(w.Body.String()))
		}
		if got, _ := e.memoryOf(ann, m.ID); got.Text != "keep me" {
			t.Fatalf("changed: %+v", got)
		}
		if w := e.do(ann, "GET", "/account/memory?after=forged", nil); w.Code != http.StatusBadRequest {
			t.Fatalf("bad cursor: %d", w.Code)
		}
	})

	t.Run("a cross-site delete is refused", func(t *testing.T) {
		m := e.remember(ann, "not to be deleted from elsewhere")
		r := httptest.NewRequest("POST", "http://enclave.test/account/memory/delete", strings.NewReader("id="+m.ID))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		r.Header.Set("Origin", "https://evil.example")
		r.AddCookie(ann.cookie)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code != http.StatusForbidden {
			t.Fatalf("status %d", w.Code)
		}
		if _, err := e.memoryOf(ann, m.ID); err != nil {
			t.Fatal("the cross-site post deleted the memory")
		}
	})

	t.Run("the account pages link to it", func(t *testing.T) {
		if body := e.do(ann, "GET", "/account", nil).Body.String(); !strings.Contains(body, `href="/account/memory"`) {
			t.Error("no link on the account page")
		}
	})
}

func TestMemoryPageNeedsItsOption(t *testing.T) {
	for name, edit := range map[string]func(*Options){
		"off":         func(o *Options) { o.Memory = false },
		"no registry": func(o *Options) { o.Registry = nil },
	} {
		t.Run(name, func(t *testing.T) {
			e := newMemEnv(t, edit)
			u := e.user("ann")
			if w := e.do(u, "GET", "/account/memory", nil); w.Code != http.StatusNotFound {
				t.Fatalf("status %d", w.Code)
			}
			if strings.Contains(e.do(u, "GET", "/account", nil).Body.String(), `href="/account/memory"`) {
				t.Error("a link to a page that does not exist")
			}
		})
	}
}
