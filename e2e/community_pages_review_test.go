package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// Review of the community pages (#32).

// TestCommunityPagesReviewForwardedForSpoof: a visitor who has used up
// the public reads of their network cannot buy a fresh bucket by sending
// X-Forwarded-For (the server trusts no proxy here), in any form: one
// address, a list, IPv6, IPv4-mapped IPv6.
func TestCommunityPagesReviewForwardedForSpoof(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		anon := pageClient(t, s, nil)
		limited := false
		for i := 0; i < 200 && !limited; i++ {
			resp, err := anon.Get(s.URL + "/community")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			limited = resp.StatusCode == http.StatusTooManyRequests
		}
		if !limited {
			t.Fatal("the visitor was never limited")
		}
		for _, xff := range []string{"203.0.113.7", "198.51.100.1, 203.0.113.9", "2001:db8::1", "::ffff:192.0.2.44", "unknown"} {
			req, _ := http.NewRequest("GET", s.URL+"/community/lst_whatever", nil)
			req.Header.Set("X-Forwarded-For", xff)
			req.Header.Set("X-Real-IP", "192.0.2.1")
			req.Header.Set("Forwarded", "for=192.0.2.2")
			resp, err := anon.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("X-Forwarded-For %q escaped the visitor's limit: %d", xff, resp.StatusCode)
			}
		}
	})
}

// TestCommunityPagesReviewPublishLongReadme: the author's publish form
// takes every readme communityPublish takes (up to MaxReadmeBytes). The
// shell's 64 KiB body cap refused a form-encoded readme well under that
// limit (non-ASCII text and punctuation triple in size when encoded) with
// "The form could not be read".
func TestCommunityPagesReviewPublishLongReadme(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice := s.CreateUser(t, "alice")
		if res, err := s.Registry().Invoke(t.Context(), alice.Caller(t), "packageSave", mustMarshal(t, map[string]any{
			"name": "greeter", "files": map[string]string{"main.js": "export async function greet() { return 'hi'; }"},
			"manifest": map[string]any{"description": "Friendly greetings", "exports": map[string]any{"greet": map[string]any{"description": "Greets.", "readOnly": true}}},
		})); err != nil || res.IsError {
			t.Fatalf("packageSave: %v %+v", err, res)
		}
		// 60 KiB of readme: accented prose and Markdown punctuation.
		line := "- Grüße, café: *naïve* [docs](https://example.com/a?b=c&d=e) — ok!\n"
		readme := strings.Repeat(line, (community.MaxReadmeBytes-4096)/len(line))
		if len(readme) > community.MaxReadmeBytes {
			t.Fatal("the test's readme is over the limit")
		}
		ac := pageClient(t, s, alice)
		st, body := fetchPage(t, ac, "POST", s.URL+"/account/community/publish", url.Values{"package": {"greeter"}, "readme": {readme}})
		if st != http.StatusSeeOther {
			t.Fatalf("publishing a %d-byte readme from the page: %d %s", len(readme), st, pageText(body))
		}
		own := invokeAs[community.OwnOutput](t, s, alice.Caller(t), "communityListOwn", map[string]any{})
		if len(own.Listings) != 1 {
			t.Fatalf("alice's listings: %+v", own.Listings)
		}
		l := invokeAs[community.Listing](t, s, alice.Caller(t), "communityGet", map[string]any{"listing": own.Listings[0].ID})
		if l.Readme != strings.TrimSpace(readme) {
			t.Fatalf("the published readme is %d bytes, want %d", len(l.Readme), len(strings.TrimSpace(readme)))
		}
		// Over the capability's limit the page still answers with the
		// capability's sentence, not a 500.
		big := strings.Repeat("a", community.MaxReadmeBytes+1)
		if st, _ := fetchPage(t, ac, "POST", s.URL+"/account/community/publish", url.Values{"package": {"greeter"}, "readme": {big}}); st != http.StatusBadRequest {
			t.Fatalf("an oversized readme: %d, want 400", st)
		}
	})
}

// pageText is a short excerpt of a page for a failure message.
func pageText(body string) string {
	if i := strings.Index(body, "<main"); i >= 0 {
		body = body[i:]
	}
	if len(body) > 600 {
		body = body[:600]
	}
	return body
}
