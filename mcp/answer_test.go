package mcp

import (
	"bytes"
	"encoding/json"
	"testing"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// marshalAnswer is the encoding appendToolAnswer must reproduce.
func marshalAnswer(t testing.TB, id json.RawMessage, res *mcpgo.CallToolResult) []byte {
	t.Helper()
	b, err := json.Marshal(rpcResponse{JSONRPC: mcpgo.JSONRPC_VERSION, ID: id, Result: res})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkToolAnswer: whenever appendToolAnswer writes an answer, it is
// json.Marshal's, byte for byte, after whatever dst held.
func checkToolAnswer(t testing.TB, id json.RawMessage, res *mcpgo.CallToolResult) bool {
	t.Helper()
	prefix := []byte("kept")
	got, ok := appendToolAnswer(bytes.Clone(prefix), id, res)
	if !ok {
		return false
	}
	want := append(prefix, marshalAnswer(t, id, res)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("id %s:\n got %s\nwant %s", id, got, want)
	}
	return true
}

func TestAppendToolAnswerMatchesMarshal(t *testing.T) {
	meta := &mcpgo.Meta{}
	meta.SetServerInfo(mcpgo.Implementation{Name: "enclave <&>", Version: "1"})
	texts := []string{"", "hello", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline", "\x00\x1f\x7f",
		"é ü 日本", "line\u2028sep\u2029", "bad \xff\xfe utf-8", "emoji 😀"}
	ids := []string{`7`, `-1`, `1e2`, `-0`, `0.5`, `"abc"`, `"a\"b"`, `"<id>"`, `"é"`, `"a b"`, `"\u003c"`}
	structured := []any{nil, map[string]any{"echo": "x<y", "n": 1.5, "list": []any{true, nil}}, struct {
		Echo string `json:"echo"`
	}{"hi"}, []int{1, 2}}
	written := 0
	for _, id := range ids {
		for _, text := range texts {
			for _, sc := range structured {
				for _, isErr := range []bool{false, true} {
					res := &mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewTextContent(text)}, StructuredContent: sc, IsError: isErr}
					if checkToolAnswer(t, json.RawMessage(id), res) {
						written++
					}
					modern := *res
					modern.Meta, modern.ResultType = meta, mcpgo.ResultTypeComplete
					checkToolAnswer(t, json.RawMessage(id), &modern)
				}
			}
		}
	}
	if written == 0 {
		t.Fatal("appendToolAnswer wrote no answer")
	}
	annotated := mcpgo.NewTextContent("annotated")
	annotated.Annotations = &mcpgo.Annotations{Priority: new(0.5)}
	for _, res := range []*mcpgo.CallToolResult{
		{Content: []mcpgo.Content{}},
		{},
		{Content: []mcpgo.Content{mcpgo.NewTextContent("a"), mcpgo.NewTextContent("b")}},
		{Content: []mcpgo.Content{annotated, mcpgo.NewImageContent("aGk=", "image/png"), mcpgo.NewResourceLink("file:///a", "a", "<d>", "text/plain")}},
		{Content: []mcpgo.Content{mcpgo.NewTextContent("raw")}, RawStructuredContent: json.RawMessage(`{ "a" : "<b>" }`)},
		{Content: []mcpgo.Content{mcpgo.NewTextContent("x")}, Result: mcpgo.Result{ResultType: mcpgo.ResultTypeInputRequired}},
	} {
		if !checkToolAnswer(t, json.RawMessage(`1`), res) {
			t.Errorf("appendToolAnswer left %+v to json.Marshal", res)
		}
	}
	// What it leaves to json.Marshal.
	for _, c := range []struct {
		id  string
		res *mcpgo.CallToolResult
	}{
		{`1`, nil},
		{``, &mcpgo.CallToolResult{}},
		{`"<"`, &mcpgo.CallToolResult{}},
		{`"é"`, &mcpgo.CallToolResult{}},
		{`1`, &mcpgo.CallToolResult{MultiRoundTripResult: mcpgo.MultiRoundTripResult{RequestState: "s"}}},
		{`1`, &mcpgo.CallToolResult{StructuredContent: func() {}}}, // does not encode
	} {
		if _, ok := appendToolAnswer(nil, json.RawMessage(c.id), c.res); ok {
			t.Errorf("appendToolAnswer wrote id %s %+v", c.id, c.res)
		}
	}
}

// FuzzAppendToolAnswer: any text and id, the answer is json.Marshal's.
func FuzzAppendToolAnswer(f *testing.F) {
	f.Add("hello", `7`, "", false)
	f.Add("<&>\u2028", `"id<"`, "echo", true)
	f.Add("\xff", `"\u00e9"`, "\x00", false)
	f.Fuzz(func(t *testing.T, text, id, sc string, isErr bool) {
		if !json.Valid([]byte(id)) || !plainID(json.RawMessage(id)) {
			return
		}
		res := &mcpgo.CallToolResult{Content: []mcpgo.Content{mcpgo.NewTextContent(text)}, IsError: isErr}
		if sc != "" {
			res.StructuredContent = map[string]any{"echo": sc}
		}
		checkToolAnswer(t, json.RawMessage(id), res)
	})
}
