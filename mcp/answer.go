package mcp

import (
	"encoding/json"
	"sync"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// The direct path's answer, written without reflection: the fixed
// envelope and the common result (text content, perhaps structured
// content, _meta, resultType, isError) are appended to a pooled buffer
// byte for byte as json.Marshal writes rpcResponse (mcp-go's
// CallToolResult.MarshalJSON puts its members in a map, so they come in
// key order). Anything else in a result (another kind of content,
// annotations, strings needing escapes) is encoded by json.Marshal in
// place, which writes a nested value exactly as it writes it alone; a
// result carrying input requests or a request state, and every error
// answer, is left to json.Marshal whole. answer_test.go compares the two
// encodings.

// answerBufs holds the buffers answers are written into.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledAnswer is the largest buffer put back: one large answer must
// not keep its memory in the pool.
const maxPooledAnswer = 64 << 10

func getAnswerBuf() *[]byte { return answerBufs.Get().(*[]byte) }

func putAnswerBuf(b *[]byte) {
	if cap(*b) > maxPooledAnswer {
		return
	}
	*b = (*b)[:0]
	answerBufs.Put(b)
}

// appendToolAnswer appends to dst the JSON-RPC answer carrying res under
// id, as json.Marshal(rpcResponse{JSONRPC: "2.0", ID: id, Result: res})
// writes it. ok is false when it does not (res has members it leaves to
// json.Marshal, id needs rewriting, or a value fails to encode); dst is
// then to be discarded.
func appendToolAnswer(dst []byte, id json.RawMessage, res *mcpgo.CallToolResult) (_ []byte, ok bool) {
	if res == nil || len(res.InputRequests) > 0 || res.RequestState != "" || !plainJSON(id) {
		return dst, false
	}
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":{`...)
	if res.Meta != nil {
		dst = append(dst, `"_meta":`...)
		if dst, ok = appendMarshalled(dst, res.Meta); !ok {
			return dst, false
		}
		dst = append(dst, ',')
	}
	dst = append(dst, `"content":[`...)
	for i, c := range res.Content {
		if i > 0 {
			dst = append(dst, ',')
		}
		if t, isText := c.(mcpgo.TextContent); isText && t.Annotations == nil && t.Meta == nil {
			dst = append(dst, `{"type":`...)
			dst = appendString(dst, t.Type)
			dst = append(dst, `,"text":`...)
			dst = appendString(dst, t.Text)
			dst = append(dst, '}')
			continue
		}
		if dst, ok = appendMarshalled(dst, c); !ok {
			return dst, false
		}
	}
	dst = append(dst, ']')
	if res.IsError {
		dst = append(dst, `,"isError":true`...)
	}
	if res.ResultType != "" {
		dst = append(dst, `,"resultType":`...)
		dst = appendString(dst, string(res.ResultType))
	}
	switch {
	case len(res.RawStructuredContent) > 0:
		dst = append(dst, `,"structuredContent":`...)
		if dst, ok = appendMarshalled(dst, res.RawStructuredContent); !ok {
			return dst, false
		}
	case res.StructuredContent != nil:
		dst = append(dst, `,"structuredContent":`...)
		if dst, ok = appendMarshalled(dst, res.StructuredContent); !ok {
			return dst, false
		}
	}
	return append(dst, "}}"...), true
}

// appendMarshalled appends json.Marshal's encoding of v.
func appendMarshalled(dst []byte, v any) ([]byte, bool) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, false
	}
	return append(dst, b...), true
}

// appendString appends s as a JSON string the way json.Marshal writes
// it: a string of printable ASCII needing no escape is copied between
// quotes; any other goes through json.Marshal (its escapes for HTML
// characters, control characters, U+2028 and U+2029, and invalid UTF-8).
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) || s[i] == '"' || s[i] == '\\' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// plainJSON reports whether raw, a JSON value the decoder handed over (no
// surrounding space), is written by json.Marshal as it is: printable
// ASCII with no character it escapes for HTML (a json.RawMessage is
// compacted, which leaves a scalar unchanged, and its HTML characters are
// escaped).
func plainJSON(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if !plainByte(c) || c == ' ' {
			return false
		}
	}
	return true
}

// plainByte reports whether json.Marshal writes c, inside a string, as
// it is: printable ASCII other than the HTML characters it escapes ('"'
// and '\\' aside, which a caller handles).
func plainByte(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '<' && c != '>' && c != '&'
}
