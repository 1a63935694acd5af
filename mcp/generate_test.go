package mcp

import (
	"encoding/base64"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
)

// The request generators of this file write tools/call requests that
// probe the transport's reading of the wire: members of every type,
// repeated, in other cases, escaped; content types; for protocol
// 2026-07-28, _meta of every shape and the standard headers right, wrong,
// encoded or missing. The fuzz targets of fuzz_generated_test.go drive
// them with the fuzzer's bytes and check invariants of the answers; the
// differential tests drive them with a seeded generator.

// chooser makes a generator's choices: *rand.Rand, or the fuzzer's bytes.
type chooser interface {
	IntN(n int) int
}

// byteChooser takes its choices from a fuzz input, one byte each, and,
// once they are spent, from a generator seeded with the input.
type byteChooser struct {
	b    []byte
	rest *rand.Rand
}

func newByteChooser(b []byte) *byteChooser {
	h := fnv.New64a()
	h.Write(b)
	return &byteChooser{b: b, rest: rand.New(rand.NewPCG(h.Sum64(), uint64(len(b))))}
}

func (c *byteChooser) IntN(n int) int {
	if n <= 1 {
		return 0
	}
	if len(c.b) > 0 {
		v := int(c.b[0])
		c.b = c.b[1:]
		return v % n
	}
	return c.rest.IntN(n)
}

func pickOf(c chooser, xs ...string) string { return xs[c.IntN(len(xs))] }

func shuffle(c chooser, xs []string) {
	for i := len(xs) - 1; i > 0; i-- {
		j := c.IntN(i + 1)
		xs[i], xs[j] = xs[j], xs[i]
	}
}

// hiddenTool is the capability that users other than admins neither see
// nor may call; a generator names it by the name it is given (the fuzz
// targets give an unknown one to compare the two answers).
const hiddenTool = "adminOnly"

// genSessionCall writes a tools/call body for a session of protocol
// 2025-11-25, and its content type. hidden is the name written for
// hiddenTool; extra are further tool names to pick from.
func genSessionCall(r chooser, hidden string, extra ...string) (contentType, body string) {
	pick := func(xs ...string) string { return pickOf(r, xs...) }
	names := append([]string{`"echo"`, `"rawArgs"`, strconvQuote(hidden), `"nope"`, `"progress"`, `""`, `5`, `null`, `"saysError"`, `"streamThenLimit"`, `"scoped"`}, extra...)
	var parts []string
	n := 2 + r.IntN(5)
	for range n {
		switch r.IntN(7) {
		case 5:
			parts = append(parts, pick(`"result"`, `"Result"`, `"error"`)+`:`+pick(`{}`, `null`, `5`, `[]`, `{"code":1,"message":"x"}`))
		case 0:
			parts = append(parts, `"jsonrpc":`+pick(`"2.0"`, `"1.0"`, `2`, `null`, `"2.0 "`))
		case 1:
			parts = append(parts, pick(`"id"`, `"ID"`, `"Id"`, `"\u0069d"`)+`:`+pick(`12345678901234567890`, ` 7 `, `"1"`, `1`, `"a"`, `null`, `1.5`, `-0`, `1e3`, `[]`, `{}`, `true`, `"\u00e9"`))
		case 2:
			parts = append(parts, pick(`"method"`, `"Method"`)+`:`+pick(`"tools/call"`, `"tools/list"`, `"TOOLS/CALL"`, `5`))
		default:
			var ps []string
			m := r.IntN(5)
			for range m {
				switch r.IntN(5) {
				case 0:
					ps = append(ps, pick(`"name"`, `"Name"`, `"\u006eame"`, `"NAME"`, `"name "`)+`:`+pick(names...))
				case 1:
					ps = append(ps, pick(`"arguments"`, `"Arguments"`)+`:`+pick(`{}`, `null`, `[]`, `"x"`, `{"text":"a"}`, `{"tag":"t"}`, `{"text":5}`, `1`, `{"text":"a","text":"b"}`, `{"tag":"\u0000"}`))
				case 2:
					ps = append(ps, `"_meta":`+pick(`{}`, `null`, `{"progressToken":"p"}`, `{"progressToken":3}`, `[]`, `{"enclave/idempotencyKey":"k"}`, `{"enclave/idempotencyKey":5}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`, `{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}`, `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`))
				case 3:
					ps = append(ps, `"task":`+pick(`{}`, `null`, `{"ttl":5}`, `5`))
				case 4:
					ps = append(ps, pick(`"requestState":5`, `"inputResponses":"x"`, `"extra":1`))
				}
			}
			parts = append(parts, `"params":`+pick(`{`+strings.Join(ps, ",")+`}`, `null`, `[]`))
		}
	}
	ct := pick("application/json", "application/json; charset=utf-8", "application/json;", "application/json; x=\"y\"", "application/jsonx", "")
	return ct, `{` + strings.Join(parts, ",") + `}`
}

// request2026 is a generated protocol 2026-07-28 request: no session.
type request2026 struct {
	token   string
	body    string
	headers map[string]string
}

// gen2026Call writes a protocol 2026-07-28 tools/call. hidden is the name
// written for hiddenTool; extra are further tool names to pick from.
func gen2026Call(r chooser, hidden string, extra ...string) request2026 {
	pick := func(xs ...string) string { return pickOf(r, xs...) }
	tools := append([]string{"echo", "progress", "ask", "fail", hidden, "nope", "rawArgs", "saysError", "streamThenLimit",
		"onlyTask", "longJob", "region", "regionUpper", "regionEscaped", "regionNested", "scoped", "boom"}, extra...)
	tool := tools[r.IntN(len(tools))]
	// Half the requests pass every check of the transport, so that the
	// handlers' side (results, streams, rounds, tasks) is reached.
	valid := r.IntN(2) == 0
	var meta []string
	if valid {
		meta = append(meta, `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`,
			`"io.modelcontextprotocol/clientCapabilities":`+pick(`{}`, `{"elicitation":{}}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`,
				`{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}`, `{"sampling":{},"roots":{}}`))
	} else if r.IntN(16) > 0 {
		meta = append(meta, `"io.modelcontextprotocol/protocolVersion":`+pick(`"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2026-07-28"`, `"2025-11-25"`, `"2099-01-01"`, `5`))
	}
	if !valid && r.IntN(6) > 0 {
		meta = append(meta, `"io.modelcontextprotocol/clientCapabilities":`+pick(`{}`, `{}`, `null`, `[]`, `5`, `{"elicitation":{}}`,
			`{"elicitation":5}`, `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, `{"extensions":5}`, `{"sampling":{},"roots":{}}`))
	}
	if r.IntN(3) > 0 {
		meta = append(meta, `"io.modelcontextprotocol/clientInfo":`+pick(`{"name":"t","version":"1"}`, `5`, `null`, `{}`, `{"name":5}`))
	}
	if r.IntN(3) == 0 {
		meta = append(meta, `"io.modelcontextprotocol/logLevel":`+pick(`"info"`, `"debug"`, `"bogus"`, `5`, `null`))
	}
	if r.IntN(3) == 0 {
		meta = append(meta, `"progressToken":`+pick(`"p"`, `3`, `null`))
	}
	var ps []string
	name := tool
	if !valid && r.IntN(10) == 0 {
		name = pick("", "x")
	}
	ps = append(ps, `"name":`+strconvQuote(name))
	if r.IntN(5) > 0 {
		ps = append(ps, `"arguments":`+pick(`{}`, `{"text":"a"}`, `{"tag":"t"}`, `{"region":"eu"}`, `{"region":""}`, `{"region":null}`,
			`{"region":5}`, `{"where":{"region":"eu"}}`, `null`, `{"Region":"eu"}`))
	}
	if r.IntN(4) == 0 {
		// _meta twice: the same, or another that lacks or changes a member
		other := slices.Clone(meta)
		if len(other) > 0 && r.IntN(2) == 0 {
			k := r.IntN(len(other))
			other = slices.Delete(other, k, k+1)
			if r.IntN(2) == 0 {
				other = append(other, pick(`"io.modelcontextprotocol/protocolVersion":"2025-11-25"`, `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`, `"progressToken":"q"`))
			}
		}
		ps = append(ps, pick(`"_meta"`, `"_META"`, `"_Meta"`)+`:{`+strings.Join(other, ",")+`}`)
	}
	ps = append(ps, pick(`"_meta"`, `"_meta"`, `"_meta"`, `"_META"`, `"\u005fmeta"`)+`:{`+strings.Join(meta, ",")+`}`)
	if r.IntN(8) == 0 {
		ps = append(ps, pick(`"requestState":"forged"`, `"inputResponses":{}`, `"inputResponses":{"k":{}}`))
	}
	shuffle(r, ps)
	h := map[string]string{}
	if r.IntN(8) > 0 {
		h[versionHeader] = pick("2026-07-28", "2026-07-28", "2026-07-28", "2026-07-28", "2026-07-28", "2026-07-28", "2025-11-25", "2099-01-01")
	}
	if r.IntN(8) > 0 {
		h["Mcp-Method"] = pick("tools/call", "tools/call", "tools/call", "tools/call", "tools/call", "tools/call", "tools/list", "TOOLS/CALL")
	}
	if r.IntN(8) > 0 {
		switch r.IntN(12) {
		case 0:
			h["Mcp-Name"] = "=?base64?" + base64.StdEncoding.EncodeToString([]byte(name)) + "?="
		case 1:
			h["Mcp-Name"] = pick("=?base64?!!?=", "other", "=?base64?"+base64.StdEncoding.EncodeToString([]byte("echo"))+"?=")
		default:
			h["Mcp-Name"] = name
		}
	}
	if r.IntN(3) == 0 {
		h["Mcp-Param-Region"] = pick("eu", "us", "", "=?base64?ZXU=?=", "=?base64?!?=")
	}
	if r.IntN(20) == 0 {
		h["Last-Event-ID"] = "1"
	}
	if valid {
		h[versionHeader], h["Mcp-Method"], h["Mcp-Name"] = "2026-07-28", "tools/call", name
		delete(h, "Last-Event-ID")
	}
	params := `"params":{` + strings.Join(ps, ",") + `}`
	switch r.IntN(10) {
	case 0: // params twice: an earlier one with other members
		params = pick(`"params":{"name":"fail"},`, `"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}},`,
			`"params":{"arguments":{"text":"x"},"task":{}},`, `"PARAMS":{"name":`+strconvQuote(hidden)+`},`) + params
	case 1: // and a later one
		params += pick(`,"params":{"name":"echo"}`, `,"Params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"echo"}`)
	case 2:
		params = strings.Replace(params, `"params"`, pick(`"Params"`, `"PARAMS"`, `"\u0070arams"`), 1)
	}
	id := pick(`7`, `7`, `"7"`, `-1`, `1e2`, `"x"`)
	if r.IntN(8) == 0 { // a request that also carries a result or an error
		params += pick(`,"result":{}`, `,"result":null`, `,"result":5`, `,"error":{"code":1,"message":"x"}`, `,"Result":[]`)
	}
	return request2026{token: pick("alice-token", "alice-token", "alice-notes-token", "bob-token", "admin-token"),
		body: `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call",` + params + `}`, headers: h}
}
