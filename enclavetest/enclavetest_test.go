package enclavetest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/mcp"
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

// Over MCP, a quota refusal is the JSON-RPC error mcp.CodeQuotaExceeded
// (HTTP 200) that says when to retry, in its message and in
// data.retryAfter.
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
	var rpcErr *enclavetest.RPCError
	if !errors.As(err, &rpcErr) {
		t.Fatalf("third call: want a JSON-RPC error, got %+v, %v", res, err)
	}
	var data struct {
		Code       string `json:"code"`
		RetryAfter string `json:"retryAfter"`
	}
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil {
		t.Fatalf("error data %s: %v", rpcErr.Data, err)
	}
	when, perr := time.Parse(time.RFC3339, data.RetryAfter)
	if rpcErr.Code != mcp.CodeQuotaExceeded || rpcErr.Status != http.StatusOK || data.Code != "quota_exceeded" ||
		perr != nil || !when.After(time.Now()) || !strings.Contains(rpcErr.Message, data.RetryAfter) {
		t.Fatalf("third call: %+v (data %s)", rpcErr, rpcErr.Data)
	}
}
