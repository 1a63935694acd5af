package enclavetest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/quota"
)

// The kit's whole path: a server, two users, real tokens, MCP calls that
// see each caller as themselves; an admin-only capability is hidden from a
// plain user.
func TestKit(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ann := s.CreateUser(t, "ann")
		ada := s.CreateUser(t, "ada", capabilities.RoleAdmin)
		for _, u := range []*enclavetest.User{ann, ada} {
			res, err := u.MCP(t).Call("whoami", nil)
			if err != nil || res.IsError || !strings.Contains(res.Text+string(res.Structured), u.StableID) {
				t.Fatalf("whoami as %s: %+v, %v", u.Username, res, err)
			}
		}
		annTools, err := ann.MCP(t).Tools()
		if err != nil {
			t.Fatal(err)
		}
		adaTools, err := ada.MCP(t).Tools()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(annTools, "adminFeatureSet") || !slices.Contains(adaTools, "adminFeatureSet") {
			t.Fatalf("admin capability visibility: ann %v, ada %v", annTools, adaTools)
		}
		res, err := ann.MCP(t).Call("adminFeatureSet", map[string]any{"name": "x", "enabled": true})
		if err == nil && !res.IsError {
			t.Fatal("a plain user set a feature flag over MCP")
		}
	})
}

// Over MCP, a quota refusal is an error result that says when to retry, in
// its text and in _meta.retryAfter.
func TestQuotaOverMCP(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{
		QuotaLimits: quota.Limits{Daily: map[string]int64{quota.DefaultClass: 2}},
	}})
	c := s.CreateUser(t, "ann").MCP(t)
	for i := range 2 {
		if res, err := c.Call("whoami", nil); err != nil || res.IsError {
			t.Fatalf("call %d: %+v %v", i+1, res, err)
		}
	}
	res, err := c.Call("whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	at, _ := res.Meta["retryAfter"].(string)
	when, perr := time.Parse(time.RFC3339, at)
	if !res.IsError || res.Meta["code"] != "quota_exceeded" || perr != nil || !when.After(time.Now()) || !strings.Contains(res.Text, at) {
		t.Fatalf("third call: %+v", res)
	}
}
