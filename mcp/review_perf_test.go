package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/capabilities"
)

// The review of the one-pass readers (#27): the envelope read in one pass
// is json.Unmarshal's for every odd spelling, and the pooled answer
// buffers never carry one request's bytes into another's answer.

// reviewOddBodies are the envelopes the review asked about: members
// duplicated, in another case, escaped, missing, of every type; ids of
// every kind and spelling; params not an object; batches; trailing data;
// arguments of every kind, nested deep, with escapes, U+0000 and invalid
// UTF-8.
func reviewOddBodies() []string {
	call := func(id, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}`
	}
	echo := `{"name":"echo","arguments":{"text":"hi"}}`
	bodies := []string{
		call(`1`, echo),
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","METHOD":"tools/list","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"\u006dethod":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call\u0000","params":` + echo + `}`,
		`{"id":1,"method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"1.0","id":1,"method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":2.0,"id":1,"method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":null,"id":1,"method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":` + echo + `}`,
		`{"JSONRPC":"2.0","id":1,"method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"id":"two","method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","ID":1,"method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[` + echo + `]}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"echo"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":1}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + echo + `,"params":{"name":"echo","arguments":{"text":"two"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","PARAMS":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","p\u0061rams":` + echo + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + echo + `,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + echo + `,"error":{"code":1}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"x"}}`,
		`[` + call(`1`, echo) + `]`, `[]`, `null`, `"s"`, `1`, `{}`, ``, ` `, `{`, `}`, "\ufeff" + call(`1`, echo),
		call(`1`, echo) + ` x`, call(`1`, echo) + call(`2`, echo), call(`1`, echo) + " \n\t\r",
		" \t\r\n{ \"jsonrpc\" : \"2.0\" ,\n\"id\" : 1 , \"method\" : \"tools/call\" , \"params\" : { \"name\" : \"echo\" , \"arguments\" : { \"text\" : \"hi\" } } }\n ",
		"{\"jsonrpc\":\"2.0\",\f\"id\":1,\"method\":\"tools/call\",\"params\":" + echo + "}",
		"{\"jsonrpc\":\"2.0\",\u00a0\"id\":1,\"method\":\"tools/call\",\"params\":" + echo + "}",
	}
	for _, id := range []string{`null`, `{}`, `{"a":1}`, `[]`, `[1]`, `true`, `false`, `-0`, `0`, `-1`, `1e2`, `1E+2`, `1.5`, `-1.5e-3`,
		`123456789012345678901234567890`, `1e400`, `01`, `+1`, `.5`, `1.`, `-`, `0x1`, `"x"`, `""`, `"\u0041\ud83d\ude00"`, `"\ud800"`,
		`"é"`, "\"\xff\"", `"<a&b>"`, `"a b"`, `"\u0000"`, `"` + strings.Repeat("i", 5000) + `"`, ` 7 `, `"unterminated`} {
		bodies = append(bodies, call(id, echo))
	}
	for _, params := range []string{
		`{}`, `{"name":"echo"}`, `{"arguments":{"text":"hi"}}`, `{"name":"\u0065cho","arguments":{"text":"hi"}}`, `{"name":"fail","name":"echo"}`,
		`{"NAME":"echo"}`, `{"name":null}`, `{"name":1}`, `{"name":"é"}`, `{"name":"echo\u0000"}`,
		`{"name":"echo","arguments":{"text":"one"},"arguments":{"text":"two"}}`, `{"name":"echo","Arguments":{"text":"two"}}`,
		`{"name":"echo","arguments":null}`, `{"name":"echo","arguments":[]}`, `{"name":"echo","arguments":"hi"}`, `{"name":"echo","arguments":1}`,
		`{"name":"echo","arguments":true}`, `{"name":"echo","arguments":{"text":"one","text":"two","TEXT":"three"}}`,
		`{"name":"echo","arguments":{"te\u0078t":"hi","text":"\ud83d\ude00\ud800 \u0000 \"\\"}}`, "{\"name\":\"echo\",\"arguments\":{\"text\":\"\xff\xfe\xed\xa0\x80\"}}",
		`{"name":"echo","arguments":{"n":1e2,"m":-0,"k":1.0,"h":1e400,"z":01}}`, `{"name":"echo","arguments":{"n":+1}}`,
		`{"name":"echo","arguments":{"a":` + strings.Repeat("[", 199) + strings.Repeat("]", 199) + `}}`,
		`{"name":"echo","arguments":{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`,
		`{"name":"echo","arguments":{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}}`,
		`{"name":"echo","arguments":{"text":"` + strings.Repeat("long ", 20000) + `"}}`,
		`{"name":"echo","_meta":{"progressToken":1},"_meta":{"progressToken":2}}`, `{"name":"echo","_meta":null}`, `{"name":"echo","_meta":[]}`,
		`{"name":"echo","_META":{"progressToken":1}}`, `{"name":"echo","_meta":{"progressToken":1e400}}`,
		`{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`,
		`{"name":"echo","task":{}}`, `{"name":"echo","requestState":"s"}`, `{"name":"echo","inputResponses":{}}`, `{"name":"echo","requestId":1}`,
	} {
		bodies = append(bodies, call(`1`, params))
	}
	return bodies
}

// TestReviewOddEnvelopesDecodeAsUnmarshal: every odd envelope is read as
// json.Unmarshal reads it (checkEnvelope), and the plain ones among them
// do take the one pass.
func TestReviewOddEnvelopesDecodeAsUnmarshal(t *testing.T) {
	fast := 0
	for _, body := range reviewOddBodies() {
		if checkEnvelope(t, []byte(body)) {
			fast++
		}
	}
	if fast < 20 {
		t.Errorf("only %d odd bodies took the one pass: the comparison misses the reader", fast)
	}
}

// addReviewSeeds adds the odd bodies (but the longest) to
// FuzzDecodeEnvelope's seeds.
func addReviewSeeds(f *testing.F) {
	for _, body := range reviewOddBodies() {
		if len(body) < 4096 {
			f.Add([]byte(body))
		}
	}
}

// TestReviewDirectAnswersConcurrently: many clients call at once over
// HTTP, on the direct path, with answers of every size (some outgrow the
// pooled buffer, some are too large to go back into the pool, some need
// escapes json.Marshal writes in place); every answer is its own request's,
// whole. Run it with -race.
func TestReviewDirectAnswersConcurrently(t *testing.T) {
	f := newFixture(t)
	must(t, f.reg.Register(capabilities.Define(capabilities.Spec[echoIn, capabilities.Result]{
		Name: "reviewEcho", Domain: "test", Description: "Echoes its text.", Annotations: readOnly,
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (capabilities.Result, error) {
			return capabilities.TextResult(in.Text), nil
		},
	})))
	const token = "alice-token"
	sid := f.initialize(token)
	readAll(f.request(http.MethodPost, token, sid, rpc(2, "tools/list", nil))) // mirrors reviewEcho
	const clients, calls = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, clients*calls)
	for c := range clients {
		wg.Go(func() {
			for i := range calls {
				n := c*calls + i
				text := fmt.Sprintf("client %d call %d ", c, i) + strings.Repeat(string(rune('a'+n%26)), (n*997)%(80<<10))
				if n%5 == 0 {
					text += ` <&> "quoted" é`
				}
				id := fmt.Sprintf(`"c%d-%d"`, c, i)
				if n%2 == 0 {
					id = fmt.Sprint(n + 1000)
				}
				body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"reviewEcho","arguments":` +
					string(must1(json.Marshal(echoIn{Text: text}))) + `}}`
				if err := reviewCall(f, token, sid, body, id, text); err != nil {
					errs <- fmt.Errorf("client %d call %d: %w", c, i, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// reviewCall sends one tools/call and checks that its answer is the
// request's own, byte for byte as json.Marshal writes it.
func reviewCall(f *fixture, token, sid, body, id, text string) error {
	req, err := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(sessionHeader, sid)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(versionHeader, testProtocol)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		return fmt.Errorf("answer %d %s: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	want, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: json.RawMessage(id),
		Result: &mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewTextContent(text)}}})
	if err != nil {
		return err
	}
	if !bytes.Equal(got, append(want, '\n')) {
		return fmt.Errorf("answer is not the request's own:\n got %.300s\nwant %.300s", got, want)
	}
	return nil
}

func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// retainingWriter is a ResponseWriter whose Write fails and keeps the
// bytes it was handed without copying them, as net/http's HTTP/2 server
// does when the stream is reset or the connection goes while a frame is
// queued or being written (writeDataFromHandler returns errStreamClosed
// or errClientDisconnected before the frame writer has read the data).
type retainingWriter struct {
	h        http.Header
	retained []byte
}

func (w *retainingWriter) Header() http.Header { return w.h }
func (w *retainingWriter) WriteHeader(int)     {}
func (w *retainingWriter) Write(p []byte) (int, error) {
	w.retained = p
	return 0, errors.New("http2: stream closed")
}

// TestReviewFailedAnswerWriteKeepsItsBuffer: an answer whose write failed
// may still be read by the server's frame writer, so its buffer does not
// go back to the pool: the answers served after it (another user's, say)
// never land in the bytes that writer still holds.
func TestReviewFailedAnswerWriteKeepsItsBuffer(t *testing.T) {
	f := newFixture(t)
	const token = "alice-token"
	sid := f.initialize(token)
	readAll(f.request(http.MethodPost, token, sid, rpc(2, "tools/list", nil))) // mirrors echo into mcp-go
	serve := func(w http.ResponseWriter, id int, text string) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, id, text)
		req := httptest.NewRequest(http.MethodPost, "http://mcp.test"+Path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(sessionHeader, sid)
		req.Header.Set(versionHeader, testProtocol)
		f.srv.ServeHTTP(w, req)
	}
	failed := &retainingWriter{h: http.Header{}}
	serve(failed, 1, "the answer whose write failed")
	if !bytes.Contains(failed.retained, []byte("the answer whose write failed")) {
		t.Fatalf("the failed write was handed %q, not the answer", failed.retained)
	}
	want := bytes.Clone(failed.retained)
	for i := range 20 {
		rec := httptest.NewRecorder()
		serve(rec, 100+i, fmt.Sprintf("a later answer %d", i))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), fmt.Sprintf("a later answer %d", i)) {
			t.Fatalf("later call %d: %d %s", i, rec.Code, rec.Body.String())
		}
		if !bytes.Equal(failed.retained, want) {
			t.Fatalf("after later call %d, the bytes of the failed write read %q", i, failed.retained)
		}
	}
}
