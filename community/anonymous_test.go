package community_test

import (
	"context"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// A visitor who is not signed in (capabilities.Anonymous) browses the
// catalogue: communitySearch and communityGet answer public fields only
// (no sources, never "mine"), a delisted listing stays hidden, and every
// other community capability refuses the visitor as unknown.
func TestCommunityAnonymousBrowsing(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, ada := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		ac, bc, dc := alice.Caller(t), bob.Caller(t), ada.Caller(t)
		anon := capabilities.Anonymous()
		save(t, s, ac, greeter("greeter"))
		readme := "# Greeter\n\nSays hello."
		pub := must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "greeter", "readme": readme})
		must[community.RateResult](t, s, bc, "communityRate", map[string]any{"listing": pub.ID, "score": 4, "note": "bob's private note"})

		found := must[community.SearchResult](t, s, anon, "communitySearch", map[string]any{"query": "greetings"})
		if len(found.Listings) != 1 || found.Listings[0].ID != pub.ID || found.Listings[0].Mine || found.Listings[0].Author != "alice" {
			t.Fatalf("anonymous search: %s", mustJSON(found))
		}
		if found.Listings[0].Rating.Count != 1 {
			t.Fatalf("anonymous search has no rating summary: %s", mustJSON(found))
		}
		got := must[community.Listing](t, s, anon, "communityGet", map[string]any{"listing": pub.ID})
		if got.Readme != readme || got.Mine || got.Files != nil || got.Rating.Count != 1 {
			t.Fatalf("anonymous get: %s", mustJSON(got))
		}
		if raw := string(mustJSON(got)); strings.Contains(raw, "private note") || strings.Contains(raw, "main.js") || strings.Contains(raw, alice.Email) {
			t.Fatalf("anonymous get shows more than the public listing: %s", raw)
		}
		// Signed in, the same listing has its sources.
		if l := must[community.Listing](t, s, bc, "communityGet", map[string]any{"listing": pub.ID}); l.Files["main.js"] == "" {
			t.Fatalf("bob's get has no sources: %s", mustJSON(l))
		}

		for name, in := range map[string]map[string]any{
			"communityPublish":           {"package": "greeter"},
			"communityUnpublish":         {"listing": pub.ID},
			"communityFork":              {"listing": pub.ID},
			"communityRate":              {"listing": pub.ID, "score": 5},
			"communityReport":            {"listing": pub.ID, "reason": "spam"},
			"communityListOwn":           {},
			"adminCommunityReportList":   {},
			"adminCommunityActivityList": {},
			"adminCommunityDelist":       {"listing": pub.ID, "delisted": true},
		} {
			if _, err := s.Registry().Invoke(context.Background(), anon, name, mustJSON(in)); code(err) != capabilities.CodeNotFound {
				t.Fatalf("anonymous %s: %v, want not found", name, err)
			}
		}

		must[community.Listing](t, s, dc, "adminCommunityDelist", map[string]any{"listing": pub.ID, "delisted": true})
		if res := must[community.SearchResult](t, s, anon, "communitySearch", map[string]any{"query": ""}); len(res.Listings) != 0 {
			t.Fatalf("anonymous search finds a delisted listing: %s", mustJSON(res))
		}
		if _, err := call[community.Listing](t, s, anon, "communityGet", map[string]any{"listing": pub.ID}); code(err) != capabilities.CodeNotFound {
			t.Fatalf("anonymous get of a delisted listing: %v", err)
		}
	})
}
