package mcp

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// unmarshalEnvelope is what decodeEnvelope must reproduce.
func unmarshalEnvelope(body []byte) envelope {
	var msg envelope
	msg.decoded = json.Unmarshal(body, &msg) == nil
	if msg.Method == string(mcpgo.MethodToolsCall) && !oneParams(body) {
		msg.decoded = false
	}
	return msg
}

// checkEnvelope fails t when decodeEnvelope reads body otherwise than
// json.Unmarshal; it reports whether the one-pass reading took it.
func checkEnvelope(t testing.TB, body []byte) bool {
	t.Helper()
	var got envelope
	decodeEnvelope(body, &got)
	if want := unmarshalEnvelope(body); !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q:\n got %+v\nwant %+v", truncate(body), got, want)
	}
	var fast envelope
	return fastEnvelope(body, &fast)
}

// TestDecodeEnvelopeMatchesUnmarshal: over generated bodies (members
// missing, repeated, respelled, of the wrong type, escaped, nested, cut
// short), the envelope is json.Unmarshal's; and the requests agents send
// are read in one pass.
func TestDecodeEnvelopeMatchesUnmarshal(t *testing.T) {
	meta := `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{},"progressToken":3}`
	common := []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"client 3 call 7"}}}`,
		`{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"é \u00e9 <&>","n":[1,2.5e3,{"x":null}]},"_meta":` + meta + `}}`,
		` { "jsonrpc" : "2.0" , "method" : "tools/list" , "id" : -1 } `,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	for _, body := range common {
		if !checkEnvelope(t, []byte(body)) {
			t.Errorf("not read in one pass: %s", body)
		}
	}
	keys := []string{`"jsonrpc"`, `"method"`, `"id"`, `"params"`, `"result"`, `"error"`, `"Method"`, `"p\u0061rams"`, `"x"`}
	values := map[string][]string{
		`"jsonrpc"`: {`"2.0"`, `"1.0"`, `2`, `null`, `"2.\u0030"`},
		`"method"`:  {`"tools/call"`, `"tools/list"`, `"ping"`, `1`, `null`, `"tools\/call"`, `"tööls"`},
		`"id"`:      {`1`, `-0`, `1e2`, `1.5E-3`, `"x"`, `"\u0041"`, `null`, `{}`, `[1]`, `true`, `01`, `1.`, `-`},
	}
	params := []string{
		`{}`, `null`, `[]`, `"p"`,
		`{"name":"echo"}`, `{"name":"echo","arguments":{}}`, `{"name":"echo","arguments":null}`, `{"name":"echo","arguments":[1,"a",{"b":[]}]}`,
		`{"name":"echo","arguments":{"text":"a\"b\\c\n","deep":{"a":{"b":{"c":[[[]]]}}}}}`,
		`{"name":1,"arguments":{}}`, `{"name":"e\u0063ho"}`, `{"name":"echo","name":"other"}`, `{"Name":"echo"}`,
		`{"name":"echo","arguments":{"a":1},"arguments":{"b":2}}`, `{"name":"echo","task":{"ttl":1}}`,
		`{"name":"echo","_meta":` + meta + `}`, `{"name":"echo","_meta":null}`, `{"name":"echo","_meta":{"progressToken":"t"}}`,
		`{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":3}}`, `{"name":"echo","_meta":[]}`,
		`{"name":"echo","requestId":5}`, `{"name":"echo","requestState":"s"}`, `{"name":"echo","inputResponses":{}}`,
		`{"name":"echo","arguments":{"text":"` + "\x01" + `"}}`, `{"name":"echo","arguments":{"text":"\x"}}`, `{"name":"echo","arguments":{"t":tru}}`,
		`{"name":"echo","arguments":` + strings.Repeat(`[`, 300) + strings.Repeat(`]`, 300) + `}`,
	}
	values[`"params"`] = params
	values[`"Method"`] = values[`"method"`]
	values[`"p\u0061rams"`] = params
	values[`"result"`] = []string{`{}`, `null`}
	values[`"error"`] = []string{`{"code":1}`}
	values[`"x"`] = []string{`1`, `{"a":[]}`}
	spaces := []string{"", " ", "\n", "\t\r"}
	rng := rand.New(rand.NewPCG(5, 6))
	sp := func() string { return spaces[rng.IntN(len(spaces))] }
	fast := 0
	for range 30000 {
		var b strings.Builder
		b.WriteString(sp() + "{")
		for i := range 1 + rng.IntN(5) {
			if i > 0 {
				b.WriteString(",")
			}
			k := keys[rng.IntN(4)] // mostly the envelope's own
			if rng.IntN(5) == 0 {
				k = keys[rng.IntN(len(keys))]
			}
			vs := values[k]
			b.WriteString(sp() + k + sp() + ":" + sp() + vs[rng.IntN(len(vs))] + sp())
		}
		b.WriteString("}" + sp())
		body := b.String()
		switch rng.IntN(15) {
		case 0:
			body = body[:rng.IntN(len(body)+1)]
		case 1:
			body += "x"
		case 2:
			body = "[" + body + "]"
		}
		if checkEnvelope(t, []byte(body)) {
			fast++
		}
	}
	if fast < 1000 {
		t.Errorf("only %d generated bodies were read in one pass", fast)
	}
}

// FuzzDecodeEnvelope: whatever the body, the envelope is json.Unmarshal's.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"_meta":{"progressToken":1},"name":"echo","arguments":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"params":{"arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":null,"result":{}}`, `[]`, `null`, `{`, "\xff",
	} {
		f.Add([]byte(s))
	}
	addReviewSeeds(f) // the review's odd envelopes (review_perf_test.go)
	f.Fuzz(func(t *testing.T, body []byte) { checkEnvelope(t, body) })
}
