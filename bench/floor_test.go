package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFloorAnswersTheLoadGenerator runs the load generator's echo clients
// (initialize, tools/list, checked tools/call echo, DELETE) against the
// floor's handler: every call must pass the same check as the other rows'.
func TestFloorAnswersTheLoadGenerator(t *testing.T) {
	srv := httptest.NewServer(floorHandler())
	t.Cleanup(srv.Close)
	out, err := captureStdout(t, func() error {
		return loadMain([]string{"-url", srv.URL, "-clients", "2", "-warmup", "0s", "-duration", "150ms"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var res LoadResult
	resultLine(t, out, &res)
	if res.Requests == 0 || res.Errors != 0 {
		t.Errorf("floor: %+v", res)
	}
}

// TestFloorRefusals: what is not one JSON-RPC request, an unknown method
// or tool, and other HTTP methods get errors, not an echo.
func TestFloorRefusals(t *testing.T) {
	srv := httptest.NewServer(floorHandler())
	t.Cleanup(srv.Close)
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for body, code := range map[string]int{
		`not json`: -32700,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`:                                               -32700,
		`{"jsonrpc":"2.0","id":1,"method":"resources/list"}`:                                     -32601,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope","arguments":{}}}`: -32602,
	} {
		_, got := post(body)
		var m struct {
			Error *floorError `json:"error"`
		}
		if err := json.Unmarshal([]byte(got), &m); err != nil || m.Error == nil || m.Error.Code != code {
			t.Errorf("%s: %s, want error %d", body, got, code)
		}
	}
	if status, _ := post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != http.StatusAccepted {
		t.Errorf("notification: status %d", status)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d", resp.StatusCode)
	}
}

// TestFloorReport: every row of the main table carries its ratio to the
// floor, and the issue 27 targets are judged against (f) and (a).
func TestFloorReport(t *testing.T) {
	row := func(key string, rps, p50, p99, cpu float64) ServerResult {
		return ServerResult{Key: key, Name: serverNames[key], Clients: 16, Mode: loadMode(key),
			Load: LoadResult{RPS: rps, P50ms: p50, P99ms: p99}, CPUPer1k: cpu}
	}
	rep := Report{Flags: map[string]any{"duration": "10s", "rounds": 2, "rate": 0.0}, Servers: []ServerResult{
		row("f", 40000, 0.4, 2, 0.025), row("a", 20000, 0.8, 4, 0.05), row("b", 27000, 0.6, 3, 0.037), row("c", 20000, 0.8, 5, 0.045),
	}}
	var b strings.Builder
	printReport(&b, rep)
	out := b.String()
	for _, want := range []string{
		"| (f) floor: net/http JSON-RPC echo, no MCP library, no auth | 40000 | 1.00",
		"| (a) mcp-go bare, no auth                                   | 20000 | 0.50",
		"| 27000 | 0.68",
		"(b) throughput ≥ 0.65× (f) the floor: REACHED (0.68×)",
		"(b) throughput ≥ 1.25× (a) bare mcp-go: REACHED (1.35×)",
		"(c) throughput ≥ 0.6× (f) the floor: NOT reached (0.50×)",
		"(b) server CPU per call ≤ 0.8× (a)'s: REACHED (0.74×)",
		"(c) server CPU per call ≤ 0.8× (a)'s (the database's CPU not counted): NOT reached (0.90×)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// 200 clients: (b)'s p99 against (a)'s.
	for i := range rep.Servers {
		rep.Servers[i].Clients = 200
	}
	b.Reset()
	printReport(&b, rep)
	if !strings.Contains(b.String(), "(b) p99 ≤ (a)'s at 200 clients: REACHED (0.75×)") {
		t.Errorf("200 clients:\n%s", b.String())
	}
	// Without the floor the ratios say so instead of dividing by zero.
	rep.Servers = rep.Servers[1:]
	for i := range rep.Servers {
		rep.Servers[i].Clients = 16
	}
	b.Reset()
	printReport(&b, rep)
	if !strings.Contains(b.String(), "(b) throughput ≥ 0.65× (f) the floor: not measured") {
		t.Errorf("no floor:\n%s", b.String())
	}
}
