package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests check the harness's arithmetic and guards; they start no
// server and time nothing.

func TestPercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.50, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.999, 999 * time.Millisecond}, {1, time.Second}} {
		if got := pct(lat, c.p); got != c.want {
			t.Errorf("pct(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct of nothing = %v", got)
	}
}

func TestLoadRefusesNonLoopback(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080/mcp", "http://192.168.1.2/mcp", "https://example.com/mcp"} {
		err := loadMain([]string{"-url", u, "-clients", "1", "-duration", "1ms", "-warmup", "0s"})
		if err == nil || !strings.Contains(err.Error(), "loopback only") {
			t.Errorf("load %s: %v, want a loopback-only refusal", u, err)
		}
	}
}

func TestProcReadings(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cpu, err := cpuSeconds(os.Getpid())
	if err != nil || cpu < 0 {
		t.Fatalf("cpuSeconds: %v, %v", cpu, err)
	}
	hwm, err := statusKiB(strconv.Itoa(os.Getpid()), "VmHWM")
	if err != nil || hwm <= 0 {
		t.Fatalf("VmHWM: %v, %v", hwm, err)
	}
}

// fakeMCP answers like enclave with code mode on, without a sandbox:
// sessions, tools/list, echo, and execute of the bench's programs (the
// first memory bomb refused as busy, then every bomb ends with the memory
// limit).
func fakeMCP(t *testing.T) *httptest.Server {
	var busy atomic.Bool
	var mu sync.Mutex
	stored := map[string]json.RawMessage{} // storageSet's keys (one fake user)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string                     `json:"name"`
				Arguments map[string]json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer := func(result any) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
		}
		run := func(result any, fail map[string]string) {
			out := map[string]any{"result": result, "logs": []any{}, "runId": "run_0123", "durationMs": 1}
			if fail != nil {
				out["error"] = fail
			}
			text, _ := json.Marshal(out)
			answer(map[string]any{"content": []any{map[string]any{"type": "text", "text": string(text)}}, "structuredContent": out, "isError": fail != nil})
		}
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "s1")
			answer(map[string]any{"protocolVersion": protocolVersion})
		case "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
		case "tools/list":
			answer(map[string]any{"tools": []any{map[string]any{"name": "echo"}, map[string]any{"name": "execute"},
				map[string]any{"name": "storageGet"}, map[string]any{"name": "storageSet"}}})
		case "tools/call":
			arg := func(k string) string {
				var v string
				_ = json.Unmarshal(req.Params.Arguments[k], &v)
				return v
			}
			code := arg("code")
			structured := func(out any) {
				text, _ := json.Marshal(out)
				answer(map[string]any{"content": []any{map[string]any{"type": "text", "text": string(text)}}, "structuredContent": out})
			}
			switch {
			case req.Params.Name == "echo":
				answer(map[string]any{"content": []any{map[string]any{"type": "text", "text": arg("text")}}})
			case req.Params.Name == "storageSet":
				mu.Lock()
				stored[arg("storageId")+"/"+arg("key")] = req.Params.Arguments["value"]
				n := len(stored)
				mu.Unlock()
				structured(map[string]any{"revision": n})
			case req.Params.Name == "storageGet":
				mu.Lock()
				v, ok := stored[arg("storageId")+"/"+arg("key")]
				mu.Unlock()
				structured(map[string]any{"found": ok, "value": v})
			case code == codeTrivial:
				run(2, nil)
			case strings.HasPrefix(code, "return await codemode.echo({text: "):
				var text string
				_ = json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(code, "return await codemode.echo({text: "), "})")), &text)
				run(text, nil)
			case code == codeBomb && busy.CompareAndSwap(false, true):
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{
					"code": mcpQuotaExceeded, "message": "code mode is busy (too many runs at once): retry in 1s"}})
			case code == codeBomb:
				run(nil, map[string]string{"kind": "limit", "limit": "memory", "message": "out of memory"})
			default:
				run(nil, map[string]string{"kind": "exception", "message": "unexpected program"})
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// captureStdout runs f with stdout going to a pipe and returns what it printed.
func captureStdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	err = f()
	os.Stdout = old
	w.Close()
	return string(<-done), err
}

func resultLine(t *testing.T, out string, v any) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if j, ok := strings.CutPrefix(l, "RESULT "); ok {
			if err := json.Unmarshal([]byte(j), v); err != nil {
				t.Fatalf("RESULT: %v", err)
			}
			return
		}
	}
	t.Fatalf("no RESULT in %q", out)
}

// TestLoadModes runs the load generator's modes for a moment against the
// fake server: each call is checked, none may fail.
func TestLoadModes(t *testing.T) {
	srv := fakeMCP(t)
	for _, mode := range []string{modeEcho, modeExec, modeExecEcho, modeStorageGet, modeStorageSet} {
		out, err := captureStdout(t, func() error {
			return loadMain([]string{"-url", srv.URL + "/mcp", "-clients", "2", "-warmup", "0s", "-duration", "150ms", "-mode", mode})
		})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var res LoadResult
		resultLine(t, out, &res)
		if res.Requests == 0 || res.Errors != 0 {
			t.Errorf("%s: %+v", mode, res)
		}
	}
	if err := loadMain([]string{"-url", srv.URL + "/mcp", "-mode", "nope"}); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

// TestLoadBombs runs the bomb mode: a busy refusal is sent again, every
// bomb counted once, with the lines the harness reads in order.
func TestLoadBombs(t *testing.T) {
	srv := fakeMCP(t)
	out, err := captureStdout(t, func() error {
		return loadMain([]string{"-url", srv.URL + "/mcp", "-clients", "3", "-mode", modeBomb, "-calls", "20", "-warm", "1", "-settle", "0s", "-duration", "30s"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var res BombLoad
	resultLine(t, out, &res)
	if res.Bombs != 20 || res.MemoryLimit != 20 || res.Other != 0 || res.Busy != 1 || res.TimedOut {
		t.Errorf("bombs: %+v", res)
	}
	last := -1
	for _, marker := range []string{"BEFORE", "BOMBS 2\n", "BOMBS 20\n", "BOMBS_DONE", "AFTER", "RESULT "} {
		i := strings.Index(out, marker)
		if i <= last {
			t.Fatalf("%q out of order in %q", marker, out)
		}
		last = i
	}
}

func TestCodeModeChecks(t *testing.T) {
	ok := `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{"result":2,"logs":[],"runId":"run_1","durationMs":0}}}`
	if err := checkRun(json.RawMessage(ok), "2"); err != nil {
		t.Errorf("a good run: %v", err)
	}
	// No structured content: the text is the output's JSON.
	text := `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"{\"result\":\"a \\\"b\\\"\",\"runId\":\"run_1\"}"}]}}`
	if err := checkRun(json.RawMessage(text), `"a \"b\""`); err != nil {
		t.Errorf("a run answered as text: %v", err)
	}
	for _, bad := range []string{
		`{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"result":3,"runId":"run_1"}}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"result":2}}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"isError":true,"structuredContent":{"result":null,"runId":"run_1","error":{"kind":"exception","message":"x"}}}}`,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"x"}}`,
	} {
		if err := checkRun(json.RawMessage(bad), "2"); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	for raw, want := range map[string]string{
		`{"jsonrpc":"2.0","id":3,"result":{"isError":true,"structuredContent":{"result":null,"runId":"run_1","error":{"kind":"limit","limit":"memory","message":"out of memory"}}}}`: bombMemory,
		`{"jsonrpc":"2.0","id":3,"result":{"isError":true,"structuredContent":{"result":null,"runId":"run_1","error":{"kind":"limit","limit":"timeout","message":"x"}}}}`:            bombOther,
		`{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"result":1,"runId":"run_1"}}}`:                                                                                       bombOther,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32029,"message":"code mode is busy (too many runs at once): retry in 1s"}}`:                                                        bombBusy,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32029,"message":"daily limit reached"}}`:                                                                                           bombOther,
	} {
		if got, _ := classifyBomb(json.RawMessage(raw)); got != want {
			t.Errorf("classifyBomb(%s) = %s, want %s", raw, got, want)
		}
	}
	// The echo program carries any text as a JS string literal.
	if got := codeEcho(`a "b" \ c`); got != `return await codemode.echo({text: "a \"b\" \\ c"})` {
		t.Errorf("codeEcho: %s", got)
	}
	if got := strings.Join(withCodeMode([]string{"a", "b", "c", "d"}), ","); got != "a,b,bx,bxe,c,cx,cxe,d" {
		t.Errorf("withCodeMode: %s", got)
	}
	if got := strings.Join(withCodeMode([]string{"b", "bx"}), ","); got != "b,bxe,bx" {
		t.Errorf("withCodeMode, bx listed: %s", got)
	}
}

// TestCodeModeReport prints a made-up report: the code mode rows have a
// table of their own with both ratios and the targets, not the main one.
func TestCodeModeReport(t *testing.T) {
	row := func(key string, rps, p50, p99, cpu float64) ServerResult {
		return ServerResult{Key: key, Name: serverNames[key], Clients: 16, Mode: loadMode(key),
			Load: LoadResult{RPS: rps, P50ms: p50, P99ms: p99}, CPUPer1k: cpu}
	}
	rep := Report{Flags: map[string]any{"duration": "10s", "codemode_duration": "5s", "rounds": 2, "rate": 0.0}, Servers: []ServerResult{
		row("a", 10000, 1, 4, 0.1), row("b", 5000, 2, 8, 0.2), row("bx", 1500, 1.5, 20, 1), row("bxe", 1000, 10, 30, 1.5),
		{Key: "cx", Name: serverNames["cx"], Clients: 16, Skipped: "ENCLAVE_TEST_POSTGRES not set"},
	}, CodeModeBombs: &BombResult{Code: codeBomb, RSSBeforeMiB: 60, RSSAfterMiB: 70, RSSDeltaMiB: 10, RSSAtMiB: []float64{90, 95},
		Load: BombLoad{Clients: 16, Wanted: 100, Bombs: 100, MemoryLimit: 100}}}
	var b strings.Builder
	printReport(&b, rep)
	out := b.String()
	main, cm, ok := strings.Cut(out, "## Code mode")
	if !ok {
		t.Fatalf("no code mode section:\n%s", out)
	}
	if strings.Contains(main, "(b-x)") || !strings.Contains(cm, "(b-x)") || !strings.Contains(cm, "(b-xe)") || !strings.Contains(cm, "skipped: ENCLAVE_TEST_POSTGRES") {
		t.Errorf("rows in the wrong table:\n%s", out)
	}
	for _, want := range []string{
		"| 0.15            | 1.50     | 5.00     | 10.00             | 0.30             | 0.75      | 2.50      | 5.00               |", // bx: ×(a), ×(b)
		"trivial execute p50 ≤ 2 ms: REACHED (1.50 ms)",
		"throughput ≥ 0.25× (b)'s echo: REACHED (0.30×)",
		"within 50 MiB of before: REACHED (+10.0 MiB, 100 of 100 memory limit; 100 bombs, the issue's count is 1000",
		"every tenth of the bombs, MiB: 90.0, 95.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	rep.CodeModeBombs.RSSDeltaMiB, rep.CodeModeBombs.Load.Wanted, rep.CodeModeBombs.Load.MemoryLimit = 80, 1000, 1000
	b.Reset()
	printBombs(&b, rep.CodeModeBombs)
	if !strings.Contains(b.String(), "NOT reached (+80.0 MiB") {
		t.Errorf("a grown RSS passed:\n%s", b.String())
	}
}

// TestStorageRows: the storage rows follow (b) and (c), their answers are
// checked, and they get a table of their own with ratios to the same
// server's echo.
func TestStorageRows(t *testing.T) {
	if got := strings.Join(withCodeMode(withStorage([]string{"a", "b", "c", "d"})), ","); got != "a,b,bx,bxe,bsg,bss,c,cx,cxe,csg,css,d" {
		t.Errorf("withStorage: %s", got)
	}
	if got := strings.Join(withStorage([]string{"b", "bss"}), ","); got != "b,bsg,bss" {
		t.Errorf("withStorage, bss listed: %s", got)
	}
	want := storageValue(3, 0)
	for raw, ok := range map[string]bool{
		`{"result":{"structuredContent":{"found":true,"value":` + want + `}}}`:                     true,
		`{"result":{"structuredContent":{"found":true,"value":{"client":3,"call":1,"text":"x"}}}}`: false,
		`{"result":{"structuredContent":{"found":false}}}`:                                         false,
		`{"result":{"isError":true,"structuredContent":{"found":true,"value":` + want + `}}}`:      false,
		`{"error":{"code":-32600,"message":"no"}}`:                                                 false,
	} {
		if err := checkRead(json.RawMessage(raw), want); (err == nil) != ok {
			t.Errorf("checkRead(%s) = %v", raw, err)
		}
	}
	if checkStored(json.RawMessage(`{"result":{"structuredContent":{"revision":0}}}`)) == nil {
		t.Error("revision 0 passed as stored")
	}
	row := func(key string, rps, p50, p99, cpu float64) ServerResult {
		return ServerResult{Key: key, Name: serverNames[key], Clients: 16, Mode: loadMode(key),
			Load: LoadResult{RPS: rps, P50ms: p50, P99ms: p99}, CPUPer1k: cpu}
	}
	rep := Report{Flags: map[string]any{"duration": "10s", "storage_duration": "5s", "rounds": 2, "rate": 0.0}, Servers: []ServerResult{
		row("a", 10000, 1, 4, 0.1), row("b", 5000, 2, 8, 0.2), row("bsg", 2500, 4, 16, 0.4), row("bss", 1000, 8, 40, 1),
	}}
	var b strings.Builder
	printReport(&b, rep)
	out := b.String()
	main, st, ok := strings.Cut(out, "## Storage buckets")
	if !ok || strings.Contains(main, "(b-sg)") || !strings.Contains(st, "(b-ss)") {
		t.Fatalf("storage rows in the wrong table:\n%s", out)
	}
	if !strings.Contains(st, "| 0.50             | 2.00      | 2.00      | 2.00               |") {
		t.Errorf("no ratios to (b)'s echo:\n%s", st)
	}
}

// TestAgentStateParts runs the memorySearch and bucket export parts at a
// small size, and prints their tables with the targets.
func TestAgentStateParts(t *testing.T) {
	out, err := captureStdout(t, func() error {
		return memorySearchMain([]string{"-total", "3000", "-mine", "500,1000", "-queries", "30"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var ms MemorySearchResult
	resultLine(t, out, &ms)
	if ms.Total != 3000 || len(ms.Users) != 2 || ms.Users[1].Memories != 1000 || ms.Users[1].Queries != 30 || ms.Users[1].PerQuery == 0 {
		t.Fatalf("memory search: %+v", ms)
	}
	out, err = captureStdout(t, func() error { return bucketExportMain([]string{"-keys", "1200"}) })
	if err != nil {
		t.Fatal(err)
	}
	var be BucketExportResult
	resultLine(t, out, &be)
	if be.Exported != 1200 || be.ExportPeakHeap <= 0 || be.ExportMiB <= 0 {
		t.Fatalf("bucket export: %+v", be)
	}
	var b strings.Builder
	ms.Users[1].Memories, ms.Users[1].P50ms, ms.Users[1].P99ms = targetSearchMine, 8, 60
	printMemorySearch(&b, []MemorySearchResult{ms})
	big := be
	big.Keys, big.ExportPeakHeap = 1_000_000, 1.5*be.ExportPeakHeap
	printBucketExport(&b, []BucketExportResult{be, big})
	for _, want := range []string{"p99 ≤ 50 ms: NOT reached (p50 8.00 ms, p99 60.00 ms)", "within 2× that of 1200 keys: REACHED", "| sqlite | 1000000"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
