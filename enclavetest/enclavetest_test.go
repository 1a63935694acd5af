package enclavetest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
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

// Dial opens a session on a server by its URL alone, the way a client does,
// and hands over the session id for requests sent by hand; the session is
// deleted when the test ends, and a refused token fails the test.
func TestDial(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{})
	ann := s.CreateUser(t, "ann")
	token := ann.Token(t)
	whoami := func(session string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", strings.NewReader(
			`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", enclavetest.ProtocolVersion)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Session-Id", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	version := func(c *enclavetest.Client) string {
		var res struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(c.InitializeResult(), &res)
		return res.ProtocolVersion
	}

	var session string
	t.Run("open", func(t *testing.T) {
		c := enclavetest.Dial(t, s.URL+"/", token)
		session = c.SessionID()
		if v := version(c); session == "" || v != enclavetest.ProtocolVersion {
			t.Fatalf("session %q, protocol version %q", session, v)
		}
		if code, body := whoami(session); code != http.StatusOK || !strings.Contains(body, ann.StableID) {
			t.Fatalf("whoami in the session: %d %s", code, body)
		}
		if res, err := c.Call("whoami", nil); err != nil || res.IsError {
			t.Fatalf("whoami through the client: %+v %v", res, err)
		}
		newer := enclavetest.Dial(t, s.URL, token, enclavetest.WithProtocolVersion("2025-11-25"))
		if v := version(newer); v != "2025-11-25" || newer.SessionID() == session {
			t.Fatalf("with 2025-11-25: protocol version %q, session %q", v, newer.SessionID())
		}
	})
	if code, body := whoami(session); code == http.StatusOK {
		t.Fatalf("the session still answers once its test ended: %d %s", code, body)
	}

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		enclavetest.Dial(f, s.URL, "not-a-token")
		f.msg = "" // not reached when Dial fails f
	}()
	<-done
	if !strings.Contains(f.msg, "initialize") {
		t.Fatalf("Dial with a refused token: %q, want a failure naming initialize", f.msg)
	}
}

// fatalTB records the failure that ends a test (on the goroutine that
// failed) instead of failing the real one.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
