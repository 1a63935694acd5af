package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The golden wire files under testdata/golden pin what a client sees of
// the endpoint: for every request of a file (sent in order, to one server
// per file), the status, the headers a client acts on, and every JSON-RPC
// message of the body, normalised. They are the behaviour a rewrite of the
// transport must keep. `go test ./mcp/ -run TestGoldenWire -update`
// rewrites the responses from what the server answers now (review the
// diff: it is a change of behaviour on the wire).
//
// A file is a txtar archive. Its comment holds directives, one a line:
//
//	fixture: plain | tasks
//
// (plain: newFixture; tasks: taskFixture, with a task store; both with
// the capabilities of goldenCaps). Then pairs of sections
//
//	-- request: <case> --
//	POST                       (the method)
//	Header: value              (sent as written)
//
//	body                       (sent byte for byte, without the final newline)
//	-- response: <case> --
//	200                        (the status)
//	Header: value              (goldenHeaders, those present)
//	Audited-Denial: tool adminOnly role   (one line per denial recorded)
//
//	message                    (one JSON-RPC message a line, normalised)
//
// In a request, {session} stands for the session the fixture opened for
// the request's bearer token (initialize, then notifications/initialized,
// at its first use in the file), {session:<token>} for the session of
// another token, and {state:<case>} for the requestState
// the server answered to an earlier case of the file.
var updateGolden = flag.Bool("update", false, "rewrite the golden wire files of testdata/golden from the server's answers")

// goldenHeaders are the response headers a golden file pins; the value of
// those in goldenPresent varies from run to run, and only their presence
// is pinned.
var (
	goldenHeaders = []string{"Content-Type", sessionHeader, "WWW-Authenticate", "Retry-After", "Allow", "X-Request-Id"}
	goldenPresent = map[string]bool{sessionHeader: true, "X-Request-Id": true}
)

// goldenCaps registers every capability a golden file calls, on top of
// those of newFixture.
func goldenCaps(t *testing.T, f *fixture) {
	directCaps(t, f.reg)
	modernCaps(t, f.reg)
	askTwice(f)
}

// txtarFile is one section of a txtar archive.
type txtarFile struct {
	Name string
	Data string
}

// parseTxtar reads a txtar archive: a comment, then sections each opened
// by a line "-- name --".
func parseTxtar(data string) (comment string, files []txtarFile) {
	var cur *txtarFile
	var buf strings.Builder
	flush := func() {
		if cur == nil {
			comment = buf.String()
		} else {
			cur.Data = buf.String()
			files = append(files, *cur)
		}
		buf.Reset()
	}
	for line := range strings.Lines(data) {
		trimmed := strings.TrimRight(line, "\r\n")
		if name, ok := strings.CutPrefix(trimmed, "-- "); ok && strings.HasSuffix(name, " --") {
			flush()
			cur = &txtarFile{Name: strings.TrimSpace(strings.TrimSuffix(name, " --"))}
			continue
		}
		buf.WriteString(line)
	}
	flush()
	return comment, files
}

// formatTxtar writes an archive parseTxtar reads back.
func formatTxtar(comment string, files []txtarFile) []byte {
	var b bytes.Buffer
	b.WriteString(comment)
	if comment != "" && !strings.HasSuffix(comment, "\n") {
		b.WriteString("\n")
	}
	for _, f := range files {
		fmt.Fprintf(&b, "-- %s --\n", f.Name)
		b.WriteString(f.Data)
		if f.Data != "" && !strings.HasSuffix(f.Data, "\n") {
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// goldenRequest is one request section, decoded.
type goldenRequest struct {
	Method  string
	Headers [][2]string
	Body    string
}

func parseGoldenRequest(data string) (goldenRequest, error) {
	head, body, ok := strings.Cut(data, "\n\n")
	if !ok {
		head, body = strings.TrimSuffix(data, "\n"), ""
	}
	body = strings.TrimSuffix(body, "\n")
	lines := strings.Split(head, "\n")
	r := goldenRequest{Method: strings.TrimSpace(lines[0]), Body: body}
	if r.Method == "" {
		return r, fmt.Errorf("no method on the first line")
	}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return r, fmt.Errorf("header line %q has no colon", l)
		}
		r.Headers = append(r.Headers, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return r, nil
}

func (r goldenRequest) format() string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	for _, h := range r.Headers {
		b.WriteString(h[0] + ": " + h[1] + "\n")
	}
	b.WriteString("\n")
	if r.Body != "" {
		b.WriteString(r.Body + "\n")
	}
	return b.String()
}

var (
	goldenState     = regexp.MustCompile(`\{state:([^}]*)\}`)
	goldenSession   = regexp.MustCompile(`\{session:([^}]*)\}`)
	goldenRequestID = regexp.MustCompile(`request id [0-9A-Za-z_-]+`)
)

// goldenVolatile are the members whose string values differ from run to
// run, and the placeholders a golden file holds instead.
var goldenVolatile = map[string]string{
	"requestState":  "<state>",
	"taskId":        "<task>",
	"createdAt":     "<time>",
	"lastUpdatedAt": "<time>",
	"requestId":     "<request>", // an error's data: the request id of the log
}

// normalise replaces the volatile values of a decoded message.
func normalise(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if p, ok := goldenVolatile[k]; ok {
				if _, isString := x.(string); isString {
					v[k] = p
					continue
				}
			}
			v[k] = normalise(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalise(x)
		}
	case string:
		return goldenRequestID.ReplaceAllString(v, "request id <request>")
	}
	return v
}

// goldenMessage is one message of a body as a golden file holds it: its
// JSON with sorted keys, numbers as written, volatile values replaced;
// text that is not JSON is kept as it came, marked.
func goldenMessage(s string) string {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return "text: " + goldenRequestID.ReplaceAllString(strings.TrimSpace(s), "request id <request>")
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(normalise(v)); err != nil {
		return "text: " + s
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// goldenRun replays the requests of one file against one server.
type goldenRun struct {
	t        *testing.T
	f        *fixture
	sessions map[string]string // bearer token → session
	states   map[string]string // case → requestState answered
}

// session returns the session opened for token, opening it at first use.
func (g *goldenRun) session(token string) string {
	if sid, ok := g.sessions[token]; ok {
		return sid
	}
	sid := g.f.initialize(token)
	g.sessions[token] = sid
	return sid
}

// send replays one request and returns the response section it gets.
func (g *goldenRun) send(name string, r goldenRequest) string {
	t := g.t
	t.Helper()
	body := goldenState.ReplaceAllStringFunc(r.Body, func(m string) string {
		c := goldenState.FindStringSubmatch(m)[1]
		st, ok := g.states[c]
		if !ok {
			t.Fatalf("%s: no requestState answered to case %q before", name, c)
		}
		return st
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, g.f.url, strings.NewReader(body))
	must(t, err)
	token := ""
	for _, h := range r.Headers {
		if tok, ok := strings.CutPrefix(h[1], "Bearer "); ok && strings.EqualFold(h[0], "Authorization") {
			token = tok
		}
	}
	for _, h := range r.Headers {
		v := h[1]
		if strings.Contains(v, "{session}") {
			v = strings.ReplaceAll(v, "{session}", g.session(token))
		}
		v = goldenSession.ReplaceAllStringFunc(v, func(m string) string {
			return g.session(goldenSession.FindStringSubmatch(m)[1])
		})
		req.Header[http.CanonicalHeaderKey(h[0])] = append(req.Header[http.CanonicalHeaderKey(h[0])], v)
	}
	before := len(g.f.audit.Denials())
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	rawBytes, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: reading the answer: %v (a golden request must be answered whole: no open streams)", name, err)
	}
	raw := string(rawBytes)

	var out strings.Builder
	fmt.Fprintf(&out, "%d\n", resp.StatusCode)
	for _, h := range goldenHeaders {
		vs := resp.Header.Values(h)
		if len(vs) == 0 {
			continue
		}
		v := strings.Join(vs, ", ")
		if goldenPresent[h] {
			v = "<present>"
		}
		fmt.Fprintf(&out, "%s: %s\n", h, v)
	}
	for _, d := range g.f.audit.Denials()[before:] {
		fmt.Fprintf(&out, "Audited-Denial: %s %s %s\n", d.Surface, d.Name, d.Reason)
	}
	out.WriteString("\n")
	for _, m := range bodyMessages(resp.Header.Get("Content-Type"), raw) {
		var probe struct {
			Result struct {
				RequestState string `json:"requestState"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(m), &probe) == nil && probe.Result.RequestState != "" {
			g.states[name] = probe.Result.RequestState
		}
		out.WriteString(goldenMessage(m) + "\n")
	}
	return out.String()
}

// bodyMessages splits a body into its messages: the data of each event of
// an event stream, or the body itself.
func bodyMessages(contentType, body string) []string {
	if strings.HasPrefix(contentType, "text/event-stream") {
		var msgs []string
		for line := range strings.Lines(body) {
			if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
				msgs = append(msgs, data)
			}
		}
		return msgs
	}
	if strings.TrimSpace(body) == "" {
		return nil
	}
	return []string{body}
}

// TestGoldenWire replays every golden wire file against a server of its
// own and compares what the client sees with the file (or, with -update,
// rewrites the file's responses).
func TestGoldenWire(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "golden", "*.txtar"))
	must(t, err)
	if len(paths) == 0 {
		t.Fatal("no golden wire files")
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			data, err := os.ReadFile(path)
			must(t, err)
			comment, files := parseTxtar(string(data))
			var f *fixture
			switch kind := goldenDirective(comment, "fixture"); kind {
			case "", "plain":
				f = newFixture(t)
			case "tasks":
				f = taskFixture(t)
			default:
				t.Fatalf("unknown fixture %q", kind)
			}
			goldenCaps(t, f)
			g := &goldenRun{t: t, f: f, sessions: map[string]string{}, states: map[string]string{}}
			var out []txtarFile
			changed := false
			for i := 0; i < len(files); i++ {
				name, ok := strings.CutPrefix(files[i].Name, "request: ")
				if !ok {
					t.Fatalf("section %q: want a request section", files[i].Name)
				}
				req, err := parseGoldenRequest(files[i].Data)
				if err != nil {
					t.Fatalf("request %q: %v", name, err)
				}
				got := g.send(name, req)
				out = append(out, txtarFile{Name: files[i].Name, Data: req.format()})
				want, have := "", false
				if i+1 < len(files) && files[i+1].Name == "response: "+name {
					want, have = files[i+1].Data, true
					i++
				}
				out = append(out, txtarFile{Name: "response: " + name, Data: got})
				switch {
				case *updateGolden:
					changed = changed || got != want
				case !have:
					t.Errorf("%s: no response section (run with -update to record one)", name)
				case got != want:
					t.Errorf("%s: the client sees\n%s\nthe golden file says\n%s", name, got, want)
				}
			}
			if *updateGolden && changed {
				must(t, os.WriteFile(path, formatTxtar(comment, out), 0o644))
				t.Logf("rewrote %s", path)
			}
		})
	}
}

// goldenDirective returns the value of the comment's line "key: value".
func goldenDirective(comment, key string) string {
	for line := range strings.Lines(comment) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// The txtar reader reads back what the writer wrote, and a request
// section round-trips.
func TestGoldenFormatRoundTrips(t *testing.T) {
	files := []txtarFile{
		{Name: "request: a b", Data: goldenRequest{Method: "POST", Headers: [][2]string{{"Content-Type", "application/json"}}, Body: `{"x":"-- y --"}`}.format()},
		{Name: "response: a b", Data: "200\n\n{}\n"},
	}
	comment, got := parseTxtar(string(formatTxtar("fixture: tasks\n", files)))
	if comment != "fixture: tasks\n" || !slices.Equal(got, files) {
		t.Fatalf("read back %q %+v", comment, got)
	}
	r, err := parseGoldenRequest(got[0].Data)
	if err != nil || r.Method != "POST" || r.Body != `{"x":"-- y --"}` || len(r.Headers) != 1 {
		t.Fatalf("request read back as %+v, %v", r, err)
	}
	if m := goldenMessage(`{"id":12345678901234567890,"result":{"taskId":"t-1","content":[{"text":"internal error (request id ab-9)"}]}}`); m !=
		`{"id":12345678901234567890,"result":{"content":[{"text":"internal error (request id <request>)"}],"taskId":"<task>"}}` {
		t.Fatalf("normalised to %s", m)
	}
}
