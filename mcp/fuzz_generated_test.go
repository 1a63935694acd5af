package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/fuzzseed"
)

// The fuzz targets of this file drive the request generators with the
// fuzzer's bytes and hold every answer of our server to the transport's
// invariants:
//
//   - exactly one answer per request: a 202 with an empty body, or a body
//     whose last message, and only that one, answers the request;
//   - a hidden tool is answered like an unknown one (the same request
//     naming a tool that does not exist gets the same answer, the same
//     number of denials audited);
//   - every denial is audited: a "tool not found" answer comes with one
//     denial of that name, and a request that recorded a denial was not
//     answered with a success;
//   - nothing is written after the answer: a handler's goroutine that
//     sends progress, a log message and a question once the call was
//     answered leaves the response as it was.
//
// Seeds live under testdata/fuzz/<Target>/ (ENCLAVE_FUZZ_WRITE_SEEDS=1
// rewrites them); .ci/fuzz.sh runs each target for a bounded time.

// unknownTwin is the tool name the twin of a request naming hiddenTool
// carries: no capability has it.
const unknownTwin = "zzNoSuchTool"

// lateWriter is a capability ("lingering") whose handler reports progress,
// answers, and leaves a goroutine behind that tries to write once
// released.
type lateWriter struct {
	mu      sync.Mutex
	pending []lateRun
}

type lateRun struct {
	release chan struct{}
	errs    chan error
}

func (lw *lateWriter) register(t testing.TB, reg *capabilities.Registry) {
	must(t, reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "lingering", Domain: "test", Description: "Leaves a goroutine behind that writes late.", Annotations: readOnly,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			if err := call.Progress(ctx, 1, 2, "first"); err != nil {
				return capabilities.Result{}, err
			}
			run := lateRun{release: make(chan struct{}), errs: make(chan error, 3)}
			lw.mu.Lock()
			lw.pending = append(lw.pending, run)
			lw.mu.Unlock()
			go func() {
				<-run.release
				run.errs <- call.Progress(ctx, 2, 2, "late")
				run.errs <- call.Log(ctx, capabilities.LogInfo, "test", "late")
				_, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: "late?", Schema: json.RawMessage(`{"type":"object"}`)})
				run.errs <- err
			}()
			return capabilities.TextResult("done"), nil
		},
	})))
}

// releaseAll lets every goroutine left behind write, and waits until each
// has tried.
func (lw *lateWriter) releaseAll(t *testing.T) {
	lw.mu.Lock()
	runs := lw.pending
	lw.pending = nil
	lw.mu.Unlock()
	for _, run := range runs {
		close(run.release)
		for range 3 {
			select {
			case <-run.errs:
			case <-time.After(10 * time.Second):
				t.Fatal("a late write of a handler's goroutine hangs")
			}
		}
	}
}

// wireAnswer is what a client saw of one request.
type wireAnswer struct {
	status      int
	contentType string
	body        string
	denials     []capabilities.Denial
}

// serve sends one POST to the server in process and checks that nothing is
// written to the response once ServeHTTP returned, late writers included.
func fuzzServe(t *testing.T, fx *fixture, lw *lateWriter, headers map[string]string, body string) wireAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "https://mcp.test"+Path, strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:1234"
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	before := len(fx.audit.Denials())
	rec := httptest.NewRecorder()
	fx.srv.ServeHTTP(rec, req)
	if ctx.Err() != nil {
		t.Fatalf("no answer within 10 s to %s %v", body, headers)
	}
	a := wireAnswer{status: rec.Code, contentType: rec.Header().Get("Content-Type"), body: rec.Body.String(),
		denials: fx.audit.Denials()[before:]}
	lw.releaseAll(t)
	if after := rec.Body.String(); after != a.body || rec.Code != a.status {
		t.Fatalf("written after the answer to %s:\n%q\nthen\n%q", body, a.body, after[len(a.body):])
	}
	return a
}

var toolNotFound = regexp.MustCompile(`^tool '(.*)' not found`)

// checkInvariants holds one answer to the invariants that need no twin.
func checkInvariants(t *testing.T, req string, a wireAnswer) {
	t.Helper()
	if a.status >= 500 {
		t.Fatalf("%d to %s: %s", a.status, req, a.body)
	}
	if a.status == http.StatusAccepted {
		if strings.TrimSpace(a.body) != "" {
			t.Fatalf("202 with a body to %s: %s", req, a.body)
		}
		if len(a.denials) > 0 {
			t.Fatalf("202 to %s, yet denials were audited: %+v", req, a.denials)
		}
		return
	}
	msgs := bodyMessages(a.contentType, a.body)
	if len(msgs) == 0 {
		t.Fatalf("%d without an answer to %s", a.status, req)
	}
	type message struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Result *struct {
			IsError bool `json:"isError"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	var answer message
	for i, raw := range msgs {
		var m message
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			// a refusal in plain text is an answer, the only message
			if len(msgs) != 1 || a.status < 400 {
				t.Fatalf("%d to %s: message %d is not JSON: %q", a.status, req, i, raw)
			}
			answer.Error = &struct {
				Message string `json:"message"`
			}{raw}
			break
		}
		isAnswer := m.Method == nil && (m.Result != nil || m.Error != nil)
		if isAnswer != (i == len(msgs)-1) {
			t.Fatalf("to %s, message %d of %d is an answer: %v (exactly one answer, the last): %s", req, i+1, len(msgs), isAnswer, a.body)
		}
		if isAnswer {
			answer = m
		}
	}
	if len(a.denials) > 1 {
		t.Fatalf("%d denials audited for one request %s: %+v", len(a.denials), req, a.denials)
	}
	failed := a.status >= 400 || answer.Error != nil || (answer.Result != nil && answer.Result.IsError)
	if len(a.denials) == 1 && !failed {
		t.Fatalf("a denial (%+v) was audited, yet %s was answered with a success: %s", a.denials[0], req, a.body)
	}
	if answer.Error != nil {
		if m := toolNotFound.FindStringSubmatch(answer.Error.Message); m != nil {
			if len(a.denials) != 1 || a.denials[0].Name != m[1] {
				t.Fatalf("%q refused %s; audited %+v", answer.Error.Message, req, a.denials)
			}
		}
	}
}

// seen normalises an answer for comparison with its twin's: the twin's
// tool name (and its base64 form) reads as the hidden tool's.
func (a wireAnswer) seen(twin bool) string {
	var b strings.Builder
	b.WriteString(http.StatusText(a.status) + " " + a.contentType + "\n")
	for _, m := range bodyMessages(a.contentType, a.body) {
		b.WriteString(goldenMessage(m) + "\n")
	}
	s := b.String()
	if twin {
		s = strings.ReplaceAll(s, unknownTwin, hiddenTool)
		s = strings.ReplaceAll(s, base64.StdEncoding.EncodeToString([]byte(unknownTwin)), base64.StdEncoding.EncodeToString([]byte(hiddenTool)))
	}
	return s
}

// checkTwin compares the answer to a request naming hiddenTool with the
// answer to its twin naming an unknown tool: byte for byte, the id's
// spelling included (a hidden tool once echoed 1e2 where mcp-go answers
// an unknown one with 100; testdata/fuzz/FuzzGenerated2026Calls/939922bb51b50ee7).
func checkTwin(t *testing.T, req string, a, twin wireAnswer) {
	t.Helper()
	if got, want := a.seen(false), twin.seen(true); got != want {
		t.Fatalf("a hidden tool is answered unlike an unknown one; to %s:\nhidden  %s\nunknown %s", req, a.seen(false), twin.seen(true))
	}
	if len(a.denials) != len(twin.denials) {
		t.Fatalf("%d denials audited for the hidden tool, %d for an unknown one: %s", len(a.denials), len(twin.denials), req)
	}
}

// fuzzChoiceSeeds are the seed inputs of a generator target: choice
// streams of several lengths (the generator completes a short stream with
// choices of its own, seeded by the stream), among them, picked by reach,
// some whose request names the hidden tool and some that call
// "lingering".
func fuzzChoiceSeeds(reach func(choices []byte) (twin, late bool)) [][]any {
	var seeds [][]any
	twins, lates := 0, 0
	r := rand.New(rand.NewPCG(27, 2))
	for i := 0; len(seeds) < 24 && i < 5000; i++ {
		b := make([]byte, r.IntN(48))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		twin, late := reach(b)
		switch {
		case twin && twins < 6:
			twins++
		case late && lates < 6:
			lates++
		case !twin && !late && len(seeds)-twins-lates < 12:
		default:
			continue
		}
		seeds = append(seeds, []any{b})
	}
	return seeds
}

// FuzzGeneratedSessionCalls sends generated tools/call bodies (and content
// types) within a session of protocol 2025-11-25.
func FuzzGeneratedSessionCalls(f *testing.F) {
	fx := newFixture(f)
	directCaps(f, fx.reg)
	lw := &lateWriter{}
	lw.register(f, fx.reg)
	const token = "alice-notes-token" // not an admin: hiddenTool is hidden
	sid := fx.initialize(token)
	fuzzseed.Add(f, fuzzChoiceSeeds(func(b []byte) (bool, bool) {
		_, body := genSessionCall(newByteChooser(b), hiddenTool, `"lingering"`)
		return strings.Contains(body, strconvQuote(hiddenTool)), strings.Contains(body, `"lingering"`)
	})...)
	f.Fuzz(func(t *testing.T, choices []byte) {
		send := func(hidden string) (string, wireAnswer) {
			ct, body := genSessionCall(newByteChooser(choices), hidden, `"lingering"`)
			h := map[string]string{"Authorization": "Bearer " + token, "Content-Type": ct, sessionHeader: sid, versionHeader: testProtocol}
			return body, fuzzServe(t, fx, lw, h, body)
		}
		body, a := send(hiddenTool)
		checkInvariants(t, body, a)
		if strings.Contains(body, strconvQuote(hiddenTool)) {
			_, twin := send(unknownTwin)
			checkTwin(t, body, a, twin)
		}
	})
}

// FuzzGenerated2026Calls sends generated protocol 2026-07-28 tools/call
// requests (no session) of several users, to a server with a task store.
func FuzzGenerated2026Calls(f *testing.F) {
	// Each task created is cancelled right after its answer (endTasks), so
	// the twins of one input meet the same count of running tasks; the cap
	// is far out of reach besides, as a cancelled task's slot is released
	// once its handler has returned.
	fx := taskFixture(f, func(o *Options) { o.MaxTasksPerUser = 1 << 20 })
	directCaps(f, fx.reg)
	modernCaps(f, fx.reg)
	lw := &lateWriter{}
	lw.register(f, fx.reg)
	fuzzseed.Add(f, fuzzChoiceSeeds(func(b []byte) (bool, bool) {
		c := gen2026Call(newByteChooser(b), hiddenTool, "lingering")
		return c.token != "admin-token" && strings.Contains(c.body, hiddenTool), strings.Contains(c.body, `"lingering"`)
	})...)
	f.Fuzz(func(t *testing.T, choices []byte) {
		send := func(hidden string) (request2026, wireAnswer) {
			c := gen2026Call(newByteChooser(choices), hidden, "lingering")
			h := map[string]string{"Authorization": "Bearer " + c.token, "Content-Type": "application/json"}
			for k, v := range c.headers {
				h[k] = v
			}
			a := fuzzServe(t, fx, lw, h, c.body)
			endTasks(t, fx, lw, c.token, a)
			return c, a
		}
		c, a := send(hiddenTool)
		desc := c.body + " " + strings.Join(headerList(c.headers), " ")
		checkInvariants(t, desc, a)
		if c.token != "admin-token" && strings.Contains(desc, hiddenTool) {
			_, twin := send(unknownTwin)
			checkTwin(t, desc, a, twin)
		}
	})
}

var createdTask = regexp.MustCompile(`"resultType":"task"[^}]*?"taskId":"([^"]+)"|"taskId":"([^"]+)"[^}]*?"resultType":"task"`)

// endTasks cancels the task an answer created, if any: a generated call
// that created one would otherwise leave it running (waiting for its
// question's answer) and change what the next input meets.
func endTasks(t *testing.T, fx *fixture, lw *lateWriter, token string, a wireAnswer) {
	t.Helper()
	m := createdTask.FindStringSubmatch(a.body)
	if m == nil {
		return
	}
	id := m[1] + m[2]
	body := rpc(8, "tasks/cancel", map[string]any{"taskId": id, "_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "fuzz", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": taskCaps,
	}})
	h := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json",
		versionHeader: "2026-07-28", "Mcp-Method": "tasks/cancel", "Mcp-Name": id}
	if c := fuzzServe(t, fx, lw, h, body); c.status != http.StatusOK || strings.Contains(c.body, `"error"`) {
		t.Fatalf("cancelling task %s of %s: %d %s", id, a.body, c.status, c.body)
	}
}

func headerList(h map[string]string) []string {
	var out []string
	for k, v := range h {
		out = append(out, k+": "+v)
	}
	return out
}
