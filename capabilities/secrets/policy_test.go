package secrets_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func TestNormalizeHost(t *testing.T) {
	good := map[string]string{
		"api.example.com":       "api.example.com",
		" API.Example.COM. ":    "api.example.com",
		"*.example.com":         "*.example.com",
		"*.Sub.Example.com":     "*.sub.example.com",
		"bücher.example":        "xn--bcher-kva.example",
		"*.bücher.example":      "*.xn--bcher-kva.example",
		"xn--bcher-kva.example": "xn--bcher-kva.example",
		"localhost":             "localhost",
		"203.0.113.7":           "203.0.113.7",
		"api.example.com:443":   "api.example.com",
		"api.example.com:8443":  "api.example.com:8443",
		"*.example.com:8443":    "*.example.com:8443",
		"203.0.113.7:8080":      "203.0.113.7:8080",
	}
	for in, want := range good {
		if got, err := secrets.NormalizeHost(in); err != nil || got != want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "https://api.example.com", "api.example.com:0", "api.example.com:65536", "api.example.com:08443", "api.example.com:", "api.example.com:https", "api.example.com/v1", "user@api.example.com",
		"*", "*.com", "a.*.example.com", "*example.com", "api*.example.com", "**.example.com",
		"-bad.example.com", "bad-.example.com", "under_score.example.com", "a..b", "[::1]", "::1",
		"*.203.0.113.7", "*.0.113.7", "*.example.123", "*.co.uk", "*.github.io", "*.herokuapp.com", "*.s3.amazonaws.com", "space here.com", strings.Repeat("a", 64) + ".com",
	} {
		if got, err := secrets.NormalizeHost(bad); !errors.Is(err, secrets.ErrInvalid) {
			t.Errorf("NormalizeHost(%q) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
	if _, err := secrets.NormalizeHosts(make([]string, 0)); err != nil {
		t.Fatal(err)
	}
	many := make([]string, secrets.MaxAllowedHosts+1)
	for i := range many {
		many[i] = "h" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".example.com"
	}
	if _, err := secrets.NormalizeHosts(many); !errors.Is(err, secrets.ErrInvalid) {
		t.Fatalf("%d hosts accepted", len(many))
	}
}

// TestHostAllowedPort: a pattern without a port approves 443 only (a
// request to another port of an approved name could reach another
// service on that host); a pattern with a port approves that port only.
func TestHostAllowedPort(t *testing.T) {
	pats, err := secrets.NormalizeHosts([]string{"api.example.com", "*.example.org:8443", "203.0.113.7:8080"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, port string
		want       bool
	}{
		{"api.example.com", "", true}, {"api.example.com", "443", true}, {"api.example.com", "8443", false}, {"api.example.com", "80", false},
		{"a.example.org", "8443", true}, {"a.example.org", "", false}, {"a.example.org", "443", false},
		{"203.0.113.7", "8080", true}, {"203.0.113.7", "", false},
	} {
		if got := secrets.HostAllowed(pats, c.host, c.port); got != c.want {
			t.Errorf("HostAllowed(%q, port %q) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	pats := []string{"api.example.com", "*.corp.example"}
	for host, want := range map[string]bool{
		"api.example.com":      true,
		"example.com":          false,
		"x.api.example.com":    false,
		"evilapi.example.com":  false,
		"a.corp.example":       true,
		"a.b.corp.example":     true,
		"corp.example":         false,
		"evilcorp.example":     false,
		"api.example.com.evil": false,
	} {
		if got := secrets.HostAllowed(pats, host, ""); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	if secrets.HostAllowed(nil, "api.example.com", "") {
		t.Error("an empty allowlist approves a host")
	}
	if h, err := secrets.CanonicalRequestHost("API.Bücher.Example."); err != nil || h != "api.xn--bcher-kva.example" {
		t.Errorf("CanonicalRequestHost = %q %v", h, err)
	}
}

// The host a request is checked as must be the host it is sent to. U+0130
// (İ) lowercases to a plain "i" in Go, but IDNA (what net/http resolves)
// maps it to "i" plus a combining dot: another, registrable, domain.
func TestCanonicalRequestHostIsTheDialledHost(t *testing.T) {
	pats := []string{"github.com", "api.example.com"}
	for _, host := range []string{"gİthub.com", "APİ.example.com", "İapi.example.com"} {
		h, err := secrets.CanonicalRequestHost(host)
		if err != nil {
			continue // refused: fine
		}
		if secrets.HostAllowed(pats, h, "") {
			t.Errorf("CanonicalRequestHost(%q) = %q: approved, but net/http sends it to another domain", host, h)
		}
	}
	// Mappings IDNA and the dialler agree on still compare as the name.
	for host, want := range map[string]string{"ａｐｉ.example.com": "api.example.com", "api。example。com": "api.example.com", "API.EXAMPLE.COM.": "api.example.com"} {
		if h, err := secrets.CanonicalRequestHost(host); err != nil || h != want {
			t.Errorf("CanonicalRequestHost(%q) = %q %v, want %q", host, h, err, want)
		}
	}
	// A subdomain form never matches an address.
	if secrets.HostAllowed([]string{"*.0.113.7"}, "203.0.113.7", "") {
		t.Error("a subdomain form matched an IP address")
	}
}

// A subdomain form is refused over a public suffix, and never reaches
// across one: names under s3.amazonaws.com or herokuapp.com are sites of
// other owners.
func TestHostAllowedStopsAtPublicSuffixes(t *testing.T) {
	// A subdomain form never reaches across a public suffix into sites
	// that belong to someone else.
	for host, want := range map[string]bool{
		"sts.amazonaws.com":         true,
		"iam.amazonaws.com":         true,
		"attacker.s3.amazonaws.com": false, // s3.amazonaws.com is a public suffix
		"evil.herokuapp.com":        false,
		"a.b.example.co.uk":         true,
	} {
		if got := secrets.HostAllowed([]string{"*.amazonaws.com", "*.herokuapp.com", "*.example.co.uk"}, host, ""); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestSecretPolicy(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		svc, err := secrets.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		// A new secret has no policy: it goes nowhere.
		meta, _, err := svc.Set(ctx, alice, "gh", "", []byte("ghp_alice"))
		if err != nil || len(meta.AllowedHosts) != 0 || meta.ExpiresAt != nil {
			t.Fatalf("new secret = %+v %v", meta, err)
		}
		exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		meta, err = svc.SetPolicy(ctx, alice, "gh", secrets.Policy{AllowedHosts: []string{"API.github.com", "*.github.com", "api.github.com"}, ExpiresAt: &exp})
		if err != nil || !slices.Equal(meta.AllowedHosts, []string{"api.github.com", "*.github.com"}) || meta.ExpiresAt == nil || !meta.ExpiresAt.Equal(exp) {
			t.Fatalf("SetPolicy = %+v %v", meta, err)
		}
		// Replacing the value keeps the policy.
		if meta, _, err = svc.Set(ctx, alice, "gh", "", []byte("ghp_alice2")); err != nil || len(meta.AllowedHosts) != 2 {
			t.Fatalf("replace = %+v %v", meta, err)
		}
		page, err := svc.List(ctx, alice, storage.PageRequest{})
		if err != nil || len(page.Items) != 1 || len(page.Items[0].AllowedHosts) != 2 || page.Items[0].ExpiresAt == nil || !page.Items[0].ExpiresAt.Equal(exp) {
			t.Fatalf("list = %+v %v", page.Items, err)
		}
		u, err := svc.Use(ctx, alice, "gh", time.Now())
		if err != nil || string(u.Value) != "ghp_alice2" || len(u.AllowedHosts) != 2 {
			t.Fatalf("use = %+v %v", u, err)
		}
		// Expired: never opened.
		if u, err := svc.Use(ctx, alice, "gh", exp); !errors.Is(err, secrets.ErrExpired) || u.Value != nil {
			t.Fatalf("use at expiry = %+v %v", u, err)
		}
		// Put with a policy replaces it; bad hosts are refused and change nothing.
		if _, _, err := svc.Put(ctx, alice, "gh", "", []byte("v"), &secrets.Policy{AllowedHosts: []string{"https://x.com"}}); !errors.Is(err, secrets.ErrInvalid) {
			t.Fatalf("bad host: %v", err)
		}
		if meta, _, err = svc.Put(ctx, alice, "gh", "", []byte("v3"), &secrets.Policy{AllowedHosts: []string{"x.example"}}); err != nil || !slices.Equal(meta.AllowedHosts, []string{"x.example"}) || meta.ExpiresAt != nil {
			t.Fatalf("put = %+v %v", meta, err)
		}
		// Cross-user: bob can neither use nor re-approve alice's secret.
		if _, err := svc.Use(ctx, bob, "gh", time.Now()); !errors.Is(err, secrets.ErrNotFound) {
			t.Fatalf("bob uses alice's secret: %v", err)
		}
		if _, err := svc.SetPolicy(ctx, bob, "gh", secrets.Policy{AllowedHosts: []string{"evil.example"}}); !errors.Is(err, secrets.ErrNotFound) {
			t.Fatalf("bob sets alice's policy: %v", err)
		}
		if u, err := svc.Use(ctx, alice, "gh", time.Now()); err != nil || !slices.Equal(u.AllowedHosts, []string{"x.example"}) {
			t.Fatalf("alice's policy after bob: %+v %v", u, err)
		}
	})
}

func TestSecretPolicyCapabilities(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		alice, bob := users(t, s)
		svc, err := secrets.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]storage.Owner{alice.StableID: alice, bob.StableID: bob}
		reg := capabilities.NewRegistry(capabilities.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := reg.Register(svc.Capabilities(func(_ context.Context, c capabilities.Caller) (capabilities.Owner, error) {
			return owners[c.UserID], nil
		})...); err != nil {
			t.Fatal(err)
		}
		v, _ := capabilities.NewVocabulary()
		agent := capabilities.Caller{UserID: alice.StableID, Roles: []string{"user"}, Permissions: v.RolePermissions(capabilities.RoleUser),
			State: capabilities.AccountActive, AllScopes: true, Interactive: true}
		web := agent
		web.Session = true
		bobWeb := web
		bobWeb.UserID = bob.StableID

		// An agent may store a secret but not approve hosts or set expiry:
		// secretSet's schema has no such arguments, and the capability that
		// has them is the web session's alone.
		for _, c := range reg.Visible(ctx, agent) {
			if c.Name == "secretSet" && (strings.Contains(string(c.InputSchema), "allowedHosts") || strings.Contains(string(c.InputSchema), "expiresAt")) {
				t.Fatalf("secretSet advertises the policy to agents: %s", c.InputSchema)
			}
		}
		for _, args := range []string{
			`{"name":"k","value":"v","allowedHosts":["evil.example"]}`,
			`{"name":"k","value":"v","allowedHosts":[]}`,
			`{"name":"k","value":"v","expiresAt":"2099-01-01T00:00:00Z"}`,
		} {
			for _, name := range []string{"secretSet", "secretSetWithPolicy"} {
				_, err := reg.Invoke(ctx, agent, name, json.RawMessage(args))
				if code := capabilities.CodeOf(err); !(name == "secretSet" && code == capabilities.CodeInvalidInput && strings.Contains(err.Error(), "unknown argument")) &&
					!(name == "secretSetWithPolicy" && code == capabilities.CodeNotFound) {
					t.Fatalf("agent %s %s: %v", name, args, err)
				}
			}
		}
		if _, err := svc.Use(ctx, alice, "k", time.Now()); !errors.Is(err, secrets.ErrNotFound) {
			t.Fatalf("a refused secretSet stored the secret: %v", err)
		}
		if _, err := reg.Invoke(ctx, agent, "secretPolicySet", json.RawMessage(`{"name":"k","allowedHosts":["evil.example"]}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("agent secretPolicySet: %v", err)
		}
		if names := reg.VisibleNames(ctx, agent); slices.Contains(names, "secretPolicySet") || slices.Contains(names, "secretSetWithPolicy") {
			t.Fatalf("an agent sees the policy capabilities: %v", names)
		}
		// The owner's session sets value and policy together.
		res, err := reg.Invoke(ctx, web, "secretSetWithPolicy", json.RawMessage(`{"name":"k","value":"v","allowedHosts":["Api.Example.com"],"expiresAt":"2099-01-01T00:00"}`))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := json.Marshal(res.Structured)
		if !strings.Contains(string(out), `"allowedHosts":["api.example.com"]`) || !strings.Contains(string(out), `"expiresAt":"2099-01-01T00:00:00Z"`) {
			t.Fatalf("session secretSet = %s", out)
		}
		// The owner's session replacing the value keeps the policy.
		if _, err := reg.Invoke(ctx, web, "secretSet", json.RawMessage(`{"name":"k","value":"v1"}`)); err != nil {
			t.Fatal(err)
		}
		if u, err := svc.Use(ctx, alice, "k", time.Now()); err != nil || !slices.Equal(u.AllowedHosts, []string{"api.example.com"}) {
			t.Fatalf("policy after the owner's replace: %+v %v", u, err)
		}
		// An agent replacing the value clears it: the approval was for a
		// value the owner knew, not for whatever the agent wrote (a
		// swapped-in credential of the attacker's own).
		if _, err := reg.Invoke(ctx, agent, "secretSet", json.RawMessage(`{"name":"k","value":"v2"}`)); err != nil {
			t.Fatal(err)
		}
		if u, err := svc.Use(ctx, alice, "k", time.Now()); err != nil || len(u.AllowedHosts) != 0 || u.ExpiresAt != nil {
			t.Fatalf("policy after agent replace: %+v %v", u, err)
		}
		// Bad input: clear invalid_input.
		for _, args := range []string{
			`{"name":"k","allowedHosts":["*"]}`,
			`{"name":"k","allowedHosts":["a.example"],"expiresAt":"tomorrow"}`,
		} {
			if _, err := reg.Invoke(ctx, web, "secretPolicySet", json.RawMessage(args)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
				t.Fatalf("secretPolicySet %s: %v", args, err)
			}
		}
		// Cross-user: bob's session cannot approve hosts for alice's secret.
		if _, err := reg.Invoke(ctx, bobWeb, "secretPolicySet", json.RawMessage(`{"name":"k","allowedHosts":["evil.example"]}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("bob sets alice's policy: %v", err)
		}
		res, err = reg.Invoke(ctx, web, "secretPolicySet", json.RawMessage(`{"name":"k","allowedHosts":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := json.Marshal(res.Structured); !strings.Contains(string(out), `"allowedHosts":[]`) || strings.Contains(string(out), "expiresAt") {
			t.Fatalf("cleared policy = %s", out)
		}
	})
}
