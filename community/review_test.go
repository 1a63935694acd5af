package community_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/community"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// Concurrent reports by one person stay within the bounds: at most one
// open report per person and listing, at most MaxOpenReports open in all
// (a check-then-act in a READ COMMITTED transaction lets parallel calls
// each see room).
func TestReviewConcurrentReportsStayBounded(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, root := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", "admin")
		ac, bc, dc := alice.Caller(t), bob.Caller(t), root.Caller(t)
		const listings = community.MaxOpenReports + 6
		ids := make([]string, listings)
		for i := range ids {
			name := fmt.Sprintf("greeter-%d", i)
			pkg := greeter(name)
			delete(pkg["manifest"].(map[string]any), "jobs")
			save(t, s, ac, pkg)
			ids[i] = must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": name}).ID
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3*listings)
		for i := range 3 * listings {
			wg.Go(func() {
				_, err := call[community.ReportResult](t, s, bc, "communityReport", map[string]any{"listing": ids[i%listings], "reason": "spam"})
				if err != nil && code(err) != capabilities.CodeQuotaExceeded && code(err) != capabilities.CodeConflict {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("communityReport: %v", err)
		}
		page := must[community.ReportPage](t, s, dc, "adminCommunityReportList", map[string]any{"status": "open", "limit": 100})
		seen := map[string]bool{}
		for _, r := range page.Reports {
			if seen[r.Listing] {
				t.Errorf("two open reports by bob of listing %s", r.Listing)
			}
			seen[r.Listing] = true
		}
		if len(page.Reports) > community.MaxOpenReports {
			t.Fatalf("bob holds %d open reports: at most %d", len(page.Reports), community.MaxOpenReports)
		}
	})
}

// Search words are literal: LIKE's wildcards and SQL quoting match only
// themselves, and nothing outside the public fields (sources, the
// author's e-mail, unlisted listings) is searched.
func TestReviewSearchIsLiteralAndPublicOnly(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		ac, bc := alice.Caller(t), bob.Caller(t)
		save(t, s, ac, greeter("greeter"))
		save(t, s, ac, greeter("hidden"))
		must[community.Listing](t, s, ac, "communityPublish", map[string]any{"package": "greeter", "readme": "Says hello."})
		if n := len(must[community.SearchResult](t, s, bc, "communitySearch", map[string]any{"query": "greet"}).Listings); n != 1 {
			t.Fatalf("greet finds %d listings", n)
		}
		for _, q := range []string{"%", "_", "%%", `\`, "g_eeter", "gr%ter", "' OR 1=1 --", `") OR ("1"="1`, "whoami", "runBy", "hidden", "@"} {
			res, err := call[community.SearchResult](t, s, bc, "communitySearch", map[string]any{"query": q})
			if err != nil {
				t.Fatalf("search %q: %v", q, err)
			}
			if len(res.Listings) != 0 {
				t.Errorf("search %q finds %d listings", q, len(res.Listings))
			}
		}
	})
}

// adminUserPlanSet is audited with the account as a keyed hash, as every
// identifier in the audit log, never by its username (the row outlives the
// account).
func TestReviewPlanSetAuditHashesTheAccount(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		s.CreateUser(t, "bobby")
		dc := s.CreateUser(t, "ada", "admin").Caller(t)
		must[map[string]any](t, s, dc, "adminPlanSave", map[string]any{"name": "small", "execute": map[string]any{"daily": 3}})
		must[map[string]any](t, s, dc, "adminUserPlanSet", map[string]any{"username": "bobby", "plan": "small"})
		out := must[struct {
			Events []struct{ Action, Result, Reason, UserHash string }
		}](t, s, dc, "adminAuditLogQuery", map[string]any{"action": "admin_user_plan_set"})
		if len(out.Events) != 1 || out.Events[0].Result != "success" || out.Events[0].UserHash == "" {
			t.Fatalf("audit %+v", out.Events)
		}
		if r := out.Events[0].Reason; strings.Contains(r, "bobby") || !strings.HasSuffix(r, " plan small") || len(r) < len("user  plan small")+32 {
			t.Fatalf("the audit reason %q names the account", r)
		}
	})
}
