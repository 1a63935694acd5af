package mcp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// A verifier that loaded the caller with the token hands it over, and the
// server does not load the account a second time.
func TestVerifierSuppliedCaller(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet})
	var loads atomic.Int32
	loader := capabilities.CallerLoaderFunc(func(context.Context, string) (capabilities.Caller, error) {
		loads.Add(1)
		return capabilities.Caller{}, capabilities.ErrUnknownUser
	})
	ts := httptest.NewUnstartedServer(nil)
	base := "http://" + ts.Listener.Addr().String()
	verifier := TokenVerifierFunc(func(_ context.Context, token string) (TokenInfo, error) {
		if token != "good" {
			return TokenInfo{}, ErrInvalidToken
		}
		return TokenInfo{UserID: "u-1", Audience: []string{base + Path}, Caller: &capabilities.Caller{
			UserID: "u-1", Username: "carol", Roles: []string{"user"}, State: capabilities.AccountActive,
		}}, nil
	})
	srv, err := New(Options{Registry: reg, Verifier: verifier, Loader: loader, BaseURL: base, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts.Config.Handler = srv
	ts.Start()
	defer ts.Close()

	post := func(session, body string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", ts.URL+Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer good")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("MCP-Protocol-Version", testProtocol)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+testProtocol+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || session == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	_, body = post(session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
	if !strings.Contains(body, "carol") {
		t.Fatalf("whoami does not show the verifier's caller: %s", body)
	}
	if n := loads.Load(); n != 0 {
		t.Fatalf("the loader ran %d times although the verifier supplied the caller", n)
	}
}
