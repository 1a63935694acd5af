package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/web"
)

// Config.SiteName and its companions reach every place the service names
// itself: page titles and the start page, mail (through the outbox), the
// authenticator-app issuer, the MCP server name; a bad accent colour
// refuses to start.
func TestConfigSiteName(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{
		SiteName: "Acme Agents", SiteDescription: "Agents for the Acme team.", AccentColor: "#0f766e",
	}})
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	home := get("/")
	for _, want := range []string{"<title>Welcome · Acme Agents</title>", "Agents for the Acme team.", s.URL + "/mcp", "/static/theme.css?v="} {
		if !strings.Contains(home, want) {
			t.Fatalf("start page lacks %q", want)
		}
	}
	if connect := get("/connect"); !strings.Contains(connect, "claude mcp add --transport http acme-agents "+s.URL+"/mcp") {
		t.Fatal("the connect page does not carry the server's URL under the site's key")
	}

	// Mail, delivered through the outbox relay.
	resp, err := http.PostForm(s.URL+"/signup", url.Values{"email": {"zoe@example.com"}, "username": {"zoe"}, "password": {"a long enough password"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	var subject string
	for subject == "" && time.Now().Before(deadline) {
		if m, ok := s.Web().DevMail().Last("zoe@example.com"); ok {
			subject = m.Subject
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if subject != "Verify your email address for Acme Agents" {
		t.Fatalf("mail subject %q", subject)
	}

	// The authenticator app files the account under the site's name.
	ann := s.CreateUser(t, "ann")
	caller := ann.Caller(t)
	caller.Session = true
	in, _ := json.Marshal(accounts.PasswordInput{Password: ann.Password})
	res, err := s.Registry().Invoke(t.Context(), caller, "accountTOTPBegin", in)
	if err != nil {
		t.Fatal(err)
	}
	var e accounts.TOTPEnrolment
	b, _ := json.Marshal(res.Structured)
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(e.URL)
	if err != nil || u.Query().Get("issuer") != "Acme Agents" || !strings.HasPrefix(u.Path, "/Acme Agents:") {
		t.Fatalf("otpauth URL %q", e.URL)
	}

	// MCP clients see the site's name as the server's.
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+enclavetest.ProtocolVersion+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+ann.Token(t))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(body), `"serverInfo":{"name":"Acme Agents"`) {
		t.Fatalf("initialize: %d %s", mresp.StatusCode, body)
	}
}

// A site name or accent colour that could break a page, a header or the
// policy stops New with an error naming it.
func TestConfigBrandingRefused(t *testing.T) {
	for _, cfg := range []enclave.Config{
		{AccentColor: "red"},
		{LogoURL: "https://cdn.example/logo.png"},
		{SiteName: "Acme\nBcc: x@example.com"},
	} {
		err := newServerError(t, storage.SQLite, func(c *enclave.Config) {
			c.AccentColor, c.LogoURL, c.SiteName = cfg.AccentColor, cfg.LogoURL, cfg.SiteName
		})
		if !strings.Contains(err.Error(), "web: ") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if web.DefaultSiteName != "enclave" {
		t.Fatal("the default site name changed")
	}
}
