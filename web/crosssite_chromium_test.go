package web

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/internal/chromiumtest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

// countingQuota admits every call and counts them: the quota a person
// spends.
type countingQuota struct{ calls atomic.Int64 }

func (q *countingQuota) Allow(context.Context, capabilities.Caller, string) error {
	q.calls.Add(1)
	return nil
}

// A page on another site links to /account/export.json. In a real
// browser, signed in by its SameSite=Lax cookie, following the link shows
// the continue page and spends nothing (no quota, no audit row); the
// continue link, on this origin, downloads the export.
func TestChromiumCrossSiteLinkToExport(t *testing.T) {
	bin := chromiumtest.Bin(t)

	s := storagetest.Open(t, storage.SQLite)
	acc := newAccounts(t, s, nil)
	lc := newLifecycle(t, s, acc)
	auditLog := audit.New(s, make([]byte, 32), quietLogger())
	quota := &countingQuota{}
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quietLogger(), Quota: quota, Auditor: auditLog})
	if err := reg.Register(append(acc.AccountCapabilities(accounts.AccountOptions{}), lc.Capabilities(lifecycle.Owners(acc))...)...); err != nil {
		t.Fatal(err)
	}

	// The server is 127.0.0.1; the other site is localhost (another site,
	// not only another origin).
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	h := newTestHandler(t, s, func(o *Options) {
		o.BaseURL, o.Accounts, o.Lifecycle, o.Registry, o.Audit = srv.URL, acc, lc, reg, auditLog
	})
	type served struct{ site, contentType string }
	var mu sync.Mutex
	var exports []served
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == pathExportJSON {
			mu.Lock()
			exports = append(exports, served{r.Header.Get("Sec-Fetch-Site"), w.Header().Get("Content-Type")})
			mu.Unlock()
		}
	})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	target := "http://127.0.0.1:" + port + pathExportJSON + "?from=elsewhere&x=%3Cy%3E"
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!DOCTYPE html><title>elsewhere</title><a id="lure" href="` + strings.ReplaceAll(target, "&", "&amp;") + `">free stuff</a>`))
	}))
	t.Cleanup(other.Close)
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())
	otherURL := "http://localhost:" + otherPort + "/"

	u, err := acc.Identity.Signup(t.Context(), accounts.SignupInput{Email: "pat@example.com", Username: "pat", Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if _, err := acc.Credentials.StartSession(rec, httptest.NewRequest("GET", srv.URL+"/", nil), u, false); err != nil {
		t.Fatal(err)
	}
	var session *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == accounts.SessionCookieName {
			session = c
		}
	}
	if session == nil {
		t.Fatal("no session cookie")
	}
	auditRows := func() int {
		t.Helper()
		p, err := auditLog.Query(t.Context(), audit.Filter{}, storage.PageRequest{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Items)
	}

	browserCtx, ctx := chromiumtest.Start(t, bin, 2*time.Minute)
	step := chromiumtest.Stepper(t, browserCtx, ctx, "cross-site-export")
	downloads := t.TempDir()
	yes := true
	step("sign in and allow downloads", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, network.SetCookie, network.SetCookieParams{Name: session.Name, Value: session.Value,
			URL: srv.URL + "/", HTTPOnly: &yes, SameSite: network.CookieSameSiteLax}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads, EventsEnabled: &yes})
		return err
	}))
	quotaBefore, auditBefore := quota.calls.Load(), auditRows()

	step("follow the other site's link",
		chromedp.Navigate(otherURL),
		chromedp.Click(chromedp.ID("lure")),
		chromedp.WaitVisible(chromedp.ID("cross-site-continue")),
	)
	if got := quota.calls.Load() - quotaBefore; got != 0 {
		t.Fatalf("the cross-site link spent %d calls of quota", got)
	}
	if got := auditRows() - auditBefore; got != 0 {
		t.Fatalf("the cross-site link wrote %d audit rows", got)
	}
	mu.Lock()
	if len(exports) != 1 || (exports[0].site != "cross-site") || !strings.HasPrefix(exports[0].contentType, "text/html") {
		t.Fatalf("export requests: %+v", exports)
	}
	mu.Unlock()
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("cross-site-continue"), "href"))
	if err != nil {
		t.Fatal(err)
	}
	if want := pathExportJSON + "?from=elsewhere&x=%3Cy%3E"; href.Value != want {
		t.Fatalf("continue link %q, want %q", href.Value, want)
	}

	step("continue", chromedp.Click(chromedp.ID("cross-site-continue")))
	file := filepath.Join(downloads, "enclave-export-manifest.json")
	deadline := time.Now().Add(20 * time.Second)
	var body []byte
	for {
		if body, err = os.ReadFile(file); err == nil && json.Valid(body) {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("no download in %s (export requests %+v)", downloads, exports)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var m struct {
		User struct {
			StableUserID string `json:"stableUserId"`
		} `json:"user"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.User.StableUserID != u.StableID {
		t.Fatalf("downloaded %.300s: %v", body, err)
	}
	if got := quota.calls.Load() - quotaBefore; got != 1 {
		t.Fatalf("the export spent %d calls of quota, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(exports) != 2 || exports[1].site != "same-origin" || !strings.HasPrefix(exports[1].contentType, "application/json") {
		t.Fatalf("export requests: %+v", exports)
	}
}
