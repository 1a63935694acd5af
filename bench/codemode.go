package main

// Code mode rows: tools/call execute on (b) and (c), next to their plain
// echo and bare mcp-go's, and the server's RSS around a run of memory
// bombs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Load modes: what each client of the load generator calls.
const (
	modeEcho     = "echo"      // tools/call echo {text}, the echoed text checked
	modeExec     = "exec"      // tools/call execute {code: codeTrivial}, result 2 checked
	modeExecEcho = "exec-echo" // tools/call execute of a program calling echo once, its text checked
	modeBomb     = "bomb"      // tools/call execute of a memory bomb, a fixed number of times
)

// The programs.
const (
	codeTrivial = "return 1+1"
	// codeBomb exhausts the VM's memory: it ends with the memory limit.
	codeBomb = "const a=[]; for(;;) a.push(new Array(1e5).fill(1))"
)

// codeEcho is a program that calls the bench's echo capability once and
// returns what it received. echo answers with text and no structured
// result, so inside code the call resolves to that text (parsed as JSON
// when it is JSON, which "client N call M" is not): the program returns
// the string, not an object with a text field.
func codeEcho(text string) string {
	lit, _ := json.Marshal(text) // a JSON string is a JS string literal
	return "return await codemode.echo({text: " + string(lit) + "})"
}

// codeModeKeys are the servers of the code mode rows: the server kind
// ((b) or (c)) and the load mode.
var codeModeKeys = map[string]struct{ base, mode string }{
	"bx":  {"b", modeExec},
	"bxe": {"b", modeExecEcho},
	"cx":  {"c", modeExec},
	"cxe": {"c", modeExecEcho},
}

func init() {
	serverNames["bx"] = "(b-x) as (b), execute `" + codeTrivial + "`"
	serverNames["bxe"] = "(b-xe) as (b), execute calling echo once"
	serverNames["cx"] = "(c-x) as (c), execute `" + codeTrivial + "`"
	serverNames["cxe"] = "(c-xe) as (c), execute calling echo once"
}

// isCodeMode reports whether key is a code mode row.
func isCodeMode(key string) bool { _, ok := codeModeKeys[key]; return ok }

// loadMode is the load generator's mode for server key.
func loadMode(key string) string {
	if k, ok := codeModeKeys[key]; ok {
		return k.mode
	}
	if k, ok := storageKeys[key]; ok {
		return k.mode
	}
	return modeEcho
}

// withCodeMode adds, after (b) and (c), their code mode rows (unless
// listed already).
func withCodeMode(keys []string) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k)
		for _, x := range []string{k + "x", k + "xe"} {
			if (k == "b" || k == "c") && !slices.Contains(keys, x) {
				out = append(out, x)
			}
		}
	}
	return out
}

// request is one tools/call of the client's mode, with the check of its
// answer.
func (c *client) request(id int) ([]byte, func(json.RawMessage) error) {
	text := fmt.Sprintf("client %d call %d", c.n, id)
	switch c.mode {
	case modeExec:
		return executeBody(id, codeTrivial), func(raw json.RawMessage) error { return checkRun(raw, "2") }
	case modeExecEcho:
		want, _ := json.Marshal(text)
		return executeBody(id, codeEcho(text)), func(raw json.RawMessage) error { return checkRun(raw, string(want)) }
	case modeStorageGet, modeStorageSet:
		return c.storageRequest(id)
	case modeBomb:
		return executeBody(id, c.code), func(raw json.RawMessage) error {
			if o, _ := classifyBomb(raw); o != bombMemory {
				return fmt.Errorf("not the memory limit: %.300s", raw)
			}
			return nil
		}
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, id, text)
	return []byte(body), func(raw json.RawMessage) error { return checkEcho(raw, text) }
}

func executeBody(id int, code string) []byte {
	args, _ := json.Marshal(map[string]string{"code": code})
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"execute","arguments":%s}}`, id, args)
}

// toolAnswer is a JSON-RPC answer to tools/call.
type toolAnswer struct {
	Result *struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Structured json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// runOutput is execute's answer (codemode.Output).
type runOutput struct {
	Result     json.RawMessage `json:"result"`
	RunID      string          `json:"runId"`
	DurationMs int64           `json:"durationMs"`
	Error      *struct {
		Kind, Limit, Message string
	} `json:"error"`
}

func checkEcho(raw json.RawMessage, text string) error {
	var m toolAnswer
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	switch {
	case m.Result == nil:
		return fmt.Errorf("error: %s", raw)
	case m.Result.IsError || len(m.Result.Content) != 1 || m.Result.Content[0].Text != text:
		return fmt.Errorf("unexpected result: %s", raw)
	}
	return nil
}

// decodeRun reads execute's answer: its structured content, or else the
// JSON of its text.
func decodeRun(raw json.RawMessage) (toolAnswer, runOutput, error) {
	var m toolAnswer
	var o runOutput
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, o, err
	}
	if m.Result == nil {
		return m, o, nil
	}
	src := []byte(m.Result.Structured)
	if len(src) == 0 || string(src) == "null" {
		if len(m.Result.Content) == 0 {
			return m, o, fmt.Errorf("no content: %.300s", raw)
		}
		src = []byte(m.Result.Content[0].Text)
	}
	if err := json.Unmarshal(src, &o); err != nil {
		return m, o, fmt.Errorf("not a run output: %.300s", raw)
	}
	return m, o, nil
}

// checkRun checks that a run succeeded and returned want (JSON).
func checkRun(raw json.RawMessage, want string) error {
	m, o, err := decodeRun(raw)
	switch {
	case err != nil:
		return err
	case m.Result == nil:
		return fmt.Errorf("error: %.300s", raw)
	case m.Result.IsError || o.Error != nil:
		return fmt.Errorf("run failed: %.300s", raw)
	case o.RunID == "":
		return fmt.Errorf("no run id: %.300s", raw)
	case strings.TrimSpace(string(o.Result)) != want:
		return fmt.Errorf("result %s, want %s", o.Result, want)
	}
	return nil
}

// Outcomes of a memory bomb.
const (
	bombMemory = "memory" // the run ended with the memory limit: expected
	bombBusy   = "busy"   // code mode was busy (too many runs at once): retried
	bombOther  = "other"  // anything else: a failure
)

// mcpQuotaExceeded is enclave's JSON-RPC error of a refusal that says when
// to retry (mcp.CodeQuotaExceeded); code mode's "busy" is one.
const mcpQuotaExceeded = -32029

// classifyBomb says how a memory bomb ended, with a detail for failures.
func classifyBomb(raw json.RawMessage) (string, string) {
	m, o, err := decodeRun(raw)
	switch {
	case err != nil:
		return bombOther, err.Error()
	case m.Result == nil && m.Error != nil && m.Error.Code == mcpQuotaExceeded && strings.Contains(m.Error.Message, "busy"):
		return bombBusy, m.Error.Message
	case m.Result == nil:
		return bombOther, fmt.Sprintf("error: %.300s", raw)
	case m.Result.IsError && o.Error != nil && o.Error.Limit == "memory":
		return bombMemory, ""
	case o.Error != nil:
		return bombOther, fmt.Sprintf("failed with %s/%s: %.200s", o.Error.Kind, o.Error.Limit, o.Error.Message)
	}
	return bombOther, fmt.Sprintf("the bomb did not fail: %.300s", raw)
}

// BombLoad is what the load generator measured of the memory bombs.
type BombLoad struct {
	Clients     int      `json:"clients"`
	Wanted      int      `json:"wanted"`
	Bombs       int64    `json:"bombs"`        // answered (not counting busy refusals)
	MemoryLimit int64    `json:"memory_limit"` // ended with the memory limit, as they should
	Other       int64    `json:"other"`        // ended otherwise: failures
	Busy        int64    `json:"busy_retried"` // refused as busy, and sent again
	Seconds     float64  `json:"seconds"`
	P50ms       float64  `json:"p50_ms"`
	P99ms       float64  `json:"p99_ms"`
	MaxMs       float64  `json:"max_ms"`
	RunP50ms    float64  `json:"run_p50_ms"` // durationMs of the runs, as the server reports it
	ErrSample   []string `json:"error_sample,omitempty"`
	TimedOut    bool     `json:"timed_out,omitempty"`
}

// runBombs is the load generator's bomb mode. Each client first runs
// warm trivial executes; then, after settle, "BEFORE" is printed (the
// harness reads the server's RSS) and the clients send calls bombs in all,
// sending a refusal as busy again; "BOMBS k" is printed at every tenth,
// "BOMBS_DONE" at the end, "AFTER" after another settle, then the result.
func runBombs(ctx context.Context, cs []*client, calls, warm int, settle, bound time.Duration) error {
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Go(func() {
			for range warm {
				c.id++
				_, raw, err := c.post(ctx, executeBody(c.id, codeTrivial), c.id)
				if err == nil {
					err = checkRun(raw, "2")
				}
				if err != nil {
					errs[i] = fmt.Errorf("client %d warm-up: %w", c.n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := sleep(settle); err != nil {
		return err
	}
	fmt.Println("BEFORE")
	// The harness reads the server's RSS when it sees the line, before the
	// first bomb arrives.
	if err := sleep(300 * time.Millisecond); err != nil {
		return err
	}

	bctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var (
		next, done     atomic.Int64
		mu             sync.Mutex
		res            = BombLoad{Clients: len(cs), Wanted: calls}
		lat, durations []time.Duration
	)
	start := time.Now()
	for _, c := range cs {
		wg.Go(func() {
			for bctx.Err() == nil && next.Add(1) <= int64(calls) {
				for bctx.Err() == nil {
					c.id++
					t0 := time.Now()
					_, raw, err := c.post(bctx, executeBody(c.id, c.code), c.id)
					d := time.Since(t0)
					outcome, detail := bombOther, ""
					var runMs int64
					if err != nil {
						detail = err.Error()
						if bctx.Err() != nil {
							return // out of time: not an answer
						}
					} else {
						outcome, detail = classifyBomb(raw)
						_, o, _ := decodeRun(raw)
						runMs = o.DurationMs
					}
					mu.Lock()
					switch outcome {
					case bombBusy:
						res.Busy++
					case bombMemory:
						res.MemoryLimit++
					default:
						res.Other++
						if len(res.ErrSample) < 5 {
							res.ErrSample = append(res.ErrSample, detail)
						}
					}
					if outcome != bombBusy {
						res.Bombs++
						lat = append(lat, d)
						durations = append(durations, time.Duration(runMs)*time.Millisecond)
					}
					mu.Unlock()
					if outcome == bombBusy {
						_ = sleepCtx(bctx, 100*time.Millisecond)
						continue
					}
					if n, c := done.Add(1), int64(calls); n*10/c != (n-1)*10/c { // a tenth more
						fmt.Printf("BOMBS %d\n", n)
					}
					break
				}
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.TimedOut = bctx.Err() != nil && res.Bombs < int64(calls)
	fmt.Println("BOMBS_DONE")
	if err := sleep(settle); err != nil {
		return err
	}
	fmt.Println("AFTER")
	if err := sleep(300 * time.Millisecond); err != nil {
		return err
	}
	slices.Sort(lat)
	slices.Sort(durations)
	res.P50ms, res.P99ms = ms(pct(lat, 0.5)), ms(pct(lat, 0.99))
	if len(lat) > 0 {
		res.MaxMs = ms(lat[len(lat)-1])
	}
	res.RunP50ms = ms(pct(durations, 0.5))
	for _, c := range cs {
		c.close()
	}
	b, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", b)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BombResult is the memory-bomb run: the load's figures and the server's
// RSS before, during and after.
type BombResult struct {
	Load         BombLoad  `json:"load"`
	Code         string    `json:"code"`
	RSSBeforeMiB float64   `json:"server_rss_before_mib"`
	RSSAfterMiB  float64   `json:"server_rss_after_mib"`
	RSSDeltaMiB  float64   `json:"server_rss_delta_mib"`
	PeakRSSMiB   float64   `json:"server_peak_rss_mib"` // VmHWM during the bombs
	RSSAtMiB     []float64 `json:"server_rss_every_tenth_mib"`
	CPUSeconds   float64   `json:"server_cpu_seconds"`
	SettleSec    float64   `json:"settle_seconds"`
}

// measureBombs runs the memory bombs against a fresh (b) server.
func measureBombs(self, logDir string, serverCore, loadCore, clients, bombs int, code string, settle, bound time.Duration, quota, logLevel string) (*BombResult, error) {
	life := bound + 2*settle + 5*time.Minute
	tokens := filepath.Join(logDir, "tokens-bomb.txt")
	srv, err := startProc("server-bomb", serverCore, logDir, "", self, "serve", "-kind", "b", "-users", strconv.Itoa(clients),
		"-tokens-out", tokens, "-quota", quota, "-log-level", logLevel, "-max-lifetime", life.String())
	if err != nil {
		return nil, err
	}
	defer srv.stop(15 * time.Second)
	addr, err := srv.waitLine("READY ", 3*time.Minute)
	if err != nil {
		return nil, err
	}
	ld, err := startProc("load-bomb", loadCore, logDir, "", self, "load", "-url", "http://"+addr+"/mcp", "-tokens", tokens,
		"-clients", strconv.Itoa(clients), "-mode", modeBomb, "-calls", strconv.Itoa(bombs), "-code", code,
		"-settle", settle.String(), "-duration", bound.String())
	if err != nil {
		return nil, err
	}
	defer ld.stop(5 * time.Second)
	pid := strconv.Itoa(srv.pid())
	rss := func() float64 {
		kib, _ := statusKiB(pid, "VmRSS")
		return float64(kib) / 1024
	}
	r := &BombResult{Code: code, SettleSec: settle.Seconds()}
	if _, err := ld.waitLine("BEFORE", 3*time.Minute); err != nil {
		return nil, err
	}
	r.RSSBeforeMiB = rss()
	_ = os.WriteFile("/proc/"+pid+"/clear_refs", []byte("5"), 0) // VmHWM := VmRSS
	cpu0, err := cpuSeconds(srv.pid())
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(bound + time.Minute)
	for {
		l, err := ld.nextLine(time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(l, "BOMBS ") {
			r.RSSAtMiB = append(r.RSSAtMiB, rss())
		}
		if l == "BOMBS_DONE" {
			break
		}
	}
	cpu1, err := cpuSeconds(srv.pid())
	if err != nil {
		return nil, err
	}
	hwm, _ := statusKiB(pid, "VmHWM")
	if _, err := ld.waitLine("AFTER", settle+time.Minute); err != nil {
		return nil, err
	}
	r.RSSAfterMiB = rss()
	r.RSSDeltaMiB = r.RSSAfterMiB - r.RSSBeforeMiB
	r.PeakRSSMiB = float64(hwm) / 1024
	r.CPUSeconds = cpu1 - cpu0
	line, err := ld.waitLine("RESULT ", time.Minute)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(line), &r.Load); err != nil {
		return nil, err
	}
	fmt.Printf("  %d bombs in %.1f s (%d memory limit, %d other, %d busy refusals retried); server RSS %.1f → %.1f MiB (%+.1f), peak %.1f MiB\n",
		r.Load.Bombs, r.Load.Seconds, r.Load.MemoryLimit, r.Load.Other, r.Load.Busy, r.RSSBeforeMiB, r.RSSAfterMiB, r.RSSDeltaMiB, r.PeakRSSMiB)
	return r, nil
}

// nextLine returns the next stdout line of p.
func (p *proc) nextLine(timeout time.Duration) (string, error) {
	t := time.NewTimer(max(timeout, time.Millisecond))
	defer t.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			return "", fmt.Errorf("%s exited: %v; %s", p.name, p.err, p.tail())
		}
		return strings.TrimSpace(l), nil
	case <-t.C:
		return "", fmt.Errorf("%s: no line within %s; %s", p.name, timeout, p.tail())
	}
}

// Targets of the code mode issue.
const (
	targetExecP50ms   = 2.0  // trivial execute p50, ms
	targetExecVsEcho  = 0.25 // trivial execute throughput, × (b)'s echo
	targetBombRSSMiB  = 50.0 // server RSS after the bombs, within this of before
	targetBombsIssued = 1000 // the bombs the issue asks for
)

// printCodeMode prints the code mode rows of one concurrency level, their
// ratios to (a) and to their server's plain echo, and the targets.
func printCodeMode(w io.Writer, rep Report, clients int, servers []ServerResult, paced bool) {
	byKey := map[string]ServerResult{}
	var rows []ServerResult
	for _, s := range servers {
		if s.Skipped == "" {
			byKey[s.Key] = s
		}
		if isCodeMode(s.Key) {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Code mode: MCP tools/call execute, %d clients, %s measured per server and round\n\n", clients, rep.Flags["codemode_duration"])
	fmt.Fprintf(w, "programs: `%s`; `%s` (echo answers text, so the program gets the string)\n\n", codeTrivial, codeEcho("T"))
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| server\t req/s\t p50 ms\t p99 ms\t p99.9 ms\t errors\t server CPU-s/1k calls\t server core use\t peak RSS MiB\t loadgen core use\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, s := range rows {
		if s.Skipped != "" {
			fmt.Fprintf(tw, "| %s\t skipped: %s\t\t\t\t\t\t\t\t\t\n", s.Name, s.Skipped)
			continue
		}
		fmt.Fprintf(tw, "| %s\t %.0f\t %.2f\t %.2f\t %.2f\t %d\t %.3f\t %.0f%%\t %.1f\t %.0f%%\t\n", s.Name, s.Load.RPS, s.Load.P50ms, s.Load.P99ms,
			s.Load.P999ms, s.Load.Errors, s.CPUPer1k, 100*s.CPUUtil, s.PeakRSSMiB, 100*s.LoadCPUUtil)
	}
	tw.Flush()

	a, okA := byKey["a"]
	fmt.Fprintf(w, "\n### Code mode ratios, %d clients: to (a) bare mcp-go's echo and to the same server's plain echo ((b) or (c)), same run\n\n", clients)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| server\t throughput ×(a)\t p50 ×(a)\t p99 ×(a)\t CPU per call ×(a)\t throughput ×echo\t p50 ×echo\t p99 ×echo\t CPU per call ×echo\t throughput ×(f)\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	f, okF := floorOf(servers)
	ratio := func(ok bool, x, y float64) string {
		if !ok || y == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x/y)
	}
	for _, s := range rows {
		if s.Skipped != "" {
			continue
		}
		e, okE := byKey[codeModeKeys[s.Key].base]
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", s.Name,
			ratio(okA, s.Load.RPS, a.Load.RPS), ratio(okA, s.Load.P50ms, a.Load.P50ms), ratio(okA, s.Load.P99ms, a.Load.P99ms), ratio(okA, s.CPUPer1k, a.CPUPer1k),
			ratio(okE, s.Load.RPS, e.Load.RPS), ratio(okE, s.Load.P50ms, e.Load.P50ms), ratio(okE, s.Load.P99ms, e.Load.P99ms), ratio(okE, s.CPUPer1k, e.CPUPer1k),
			ratio(okF, s.Load.RPS, f.Load.RPS))
	}
	tw.Flush()
	if paced {
		return
	}
	fmt.Fprintf(w, "\n### Code mode targets, %d clients\n\n", clients)
	bx, okX := byKey["bx"]
	b, okB := byKey["b"]
	verdict := func(have, ok bool) string {
		if !have {
			return "not measured"
		}
		return map[bool]string{true: "REACHED", false: "NOT reached"}[ok]
	}
	fmt.Fprintf(w, "- (b-x) trivial execute p50 ≤ %.0f ms: %s (%.2f ms)\n", targetExecP50ms, verdict(okX, bx.Load.P50ms <= targetExecP50ms), bx.Load.P50ms)
	fmt.Fprintf(w, "- (b-x) trivial execute throughput ≥ %.2f× (b)'s echo: %s (%.2f×)\n", targetExecVsEcho,
		verdict(okX && okB, bx.Load.RPS >= targetExecVsEcho*b.Load.RPS), safeDiv(bx.Load.RPS, b.Load.RPS))
}

// printBombs prints the memory-bomb run and its target.
func printBombs(w io.Writer, r *BombResult) {
	if r == nil {
		return
	}
	l := r.Load
	fmt.Fprintf(w, "\n### Code mode: server RSS around %d memory bombs, (b), %d clients\n\n", l.Wanted, l.Clients)
	fmt.Fprintf(w, "program: `%s`\n\n", r.Code)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| bombs answered\t memory limit\t other\t busy, retried\t seconds\t p50 ms\t p99 ms\t run p50 ms\t server CPU-s\t RSS before MiB\t RSS after MiB\t difference MiB\t peak RSS MiB\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	fmt.Fprintf(tw, "| %d\t %d\t %d\t %d\t %.1f\t %.0f\t %.0f\t %.0f\t %.1f\t %.1f\t %.1f\t %+.1f\t %.1f\t\n", l.Bombs, l.MemoryLimit, l.Other, l.Busy, l.Seconds,
		l.P50ms, l.P99ms, l.RunP50ms, r.CPUSeconds, r.RSSBeforeMiB, r.RSSAfterMiB, r.RSSDeltaMiB, r.PeakRSSMiB)
	tw.Flush()
	if len(r.RSSAtMiB) > 0 {
		var at []string
		for _, v := range r.RSSAtMiB {
			at = append(at, fmt.Sprintf("%.1f", v))
		}
		fmt.Fprintf(w, "\nserver RSS at every tenth of the bombs, MiB: %s (settle %.0f s before and after)\n", strings.Join(at, ", "), r.SettleSec)
	}
	if len(l.ErrSample) > 0 {
		fmt.Fprintf(w, "\nnot the memory limit, e.g.: %s\n", strings.Join(l.ErrSample, "; "))
	}
	ok := l.Other == 0 && l.MemoryLimit == int64(l.Wanted) && r.RSSDeltaMiB <= targetBombRSSMiB
	v := map[bool]string{true: "REACHED", false: "NOT reached"}[ok]
	note := ""
	switch {
	case l.TimedOut:
		v, note = "not measured", fmt.Sprintf("; only %d of %d bombs within the time bound", l.Bombs, l.Wanted)
	case l.Wanted < targetBombsIssued:
		note = fmt.Sprintf("; %d bombs, the issue's count is %d (-codemode-bombs %d)", l.Wanted, targetBombsIssued, targetBombsIssued)
	}
	fmt.Fprintf(w, "\n- every bomb ends with the memory limit and the server's RSS stays within %.0f MiB of before: %s (%+.1f MiB, %d of %d memory limit%s)\n",
		targetBombRSSMiB, v, r.RSSDeltaMiB, l.MemoryLimit, l.Wanted, note)
}

// defaultBombs is -codemode-bombs' default: each bomb costs the server
// about 0.3 s of CPU (filling 64 MiB of arrays in the interpreter), so the
// issue's 1,000 take some 5 minutes on the one server core, too long for
// the default run; -codemode-bombs 1000 runs them.
const defaultBombs = 50
