package mcp

import (
	"encoding/json"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/internal/jsonscan"
)

// decodeEnvelope fills msg from a POST body as json.Unmarshal does (and
// marks it decoded when that succeeds and names params once). A request of
// the commonest shape is read in one pass over the bytes, without
// reflection: an object holding only "jsonrpc", "method", "id" and
// "params", each once and spelled so, whose params hold only "name",
// "arguments" and "_meta", each once; strings that are printable ASCII
// without escapes (arguments excepted, which are any JSON value); an id
// that is a number or a string. The id and the arguments are then slices
// of body (capacity cut to their length, so an append copies them), which
// nothing writes to. Anything else, and anything malformed, is decoded by
// json.Unmarshal, whose verdict stands (envelope_test.go compares the two).
func decodeEnvelope(body []byte, msg *envelope) {
	if fastEnvelope(body, msg) {
		msg.decoded = true
		return
	}
	// Decoded into an envelope of its own: msg itself, not handed to
	// json.Unmarshal, can stay on its caller's stack.
	m := new(envelope)
	m.decoded = json.Unmarshal(body, m) == nil
	*msg = *m
	if msg.Method == string(mcpgo.MethodToolsCall) && !oneParams(body) {
		msg.decoded = false // mcp-go reads it otherwise (see oneParams)
	}
}

// clientCapabilities is msg.Params.Meta.ClientCapabilities(), decoded
// once (mcp-go decodes them from the map of _meta on every call).
func (msg *envelope) clientCapabilities() *mcpgo.ClientCapabilities {
	if !msg.capsDecoded {
		msg.caps, msg.capsDecoded = msg.Params.Meta.ClientCapabilities(), true
	}
	return msg.caps
}

// maxScanDepth bounds the nesting fastEnvelope follows; deeper arguments
// go to json.Unmarshal.
const maxScanDepth = 200

// fastEnvelope is decodeEnvelope's one pass; false leaves msg to be reset
// and decoded by json.Unmarshal.
func fastEnvelope(b []byte, msg *envelope) bool {
	var seenRPC, seenMethod, seenID, seenParams bool
	i := jsonscan.Space(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i, ok := members(b, i, 0, true, func(key []byte, start, end int) bool {
		v := b[start:end:end]
		switch string(key) {
		case "jsonrpc":
			if seenRPC {
				return false
			}
			seenRPC = true
			s, ok := plainString(v)
			if ok {
				msg.JSONRPC = intern(s, mcpgo.JSONRPC_VERSION)
			}
			return ok
		case "method":
			if seenMethod {
				return false
			}
			seenMethod = true
			s, ok := plainString(v)
			if ok {
				msg.Method = intern(s, string(mcpgo.MethodToolsCall))
			}
			return ok
		case "id":
			if seenID || (v[0] != '"' && v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
				return false
			}
			seenID = true
			msg.ID = v
			return true
		case "params":
			if seenParams || v[0] != '{' {
				return false
			}
			seenParams = true
			return fastParams(v, &msg.Params)
		}
		return false
	})
	return ok && jsonscan.Space(b, i) == len(b)
}

// fastParams reads params holding only name, arguments and _meta.
func fastParams(b []byte, p *envelopeParams) bool {
	var seenName, seenArgs, seenMeta bool
	_, ok := members(b, 0, 1, true, func(key []byte, start, end int) bool {
		v := b[start:end:end]
		switch string(key) {
		case "name":
			if seenName {
				return false
			}
			seenName = true
			s, ok := plainString(v)
			if ok {
				p.Name = string(s)
			}
			return ok
		case "arguments":
			if seenArgs {
				return false
			}
			seenArgs = true
			p.Arguments = v
			return true
		case "_meta":
			if seenMeta || v[0] != '{' {
				return false
			}
			seenMeta = true
			meta := new(mcpgo.Meta)
			if json.Unmarshal(v, meta) != nil {
				return false
			}
			p.Meta = meta
			return true
		}
		return false
	})
	return ok
}

// members reads the JSON object at b[i] (which is '{', at nesting depth
// depth), calling member with each key and the bounds of its value, which
// it has checked is valid JSON; with plainKeys, a key that is not
// printable ASCII without escapes fails it. It returns the index after
// the object, and false when the object is malformed or member refused.
func members(b []byte, i, depth int, plainKeys bool, member func(key []byte, start, end int) bool) (int, bool) {
	i = jsonscan.Space(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, false
		}
		end, plain := jsonscan.String(b, i)
		if end < 0 || plainKeys && !plain {
			return i, false
		}
		key := b[i+1 : end-1]
		i = jsonscan.Space(b, end)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		start := jsonscan.Space(b, i+1)
		if i = skipValue(b, start, depth+1); i < 0 || !member(key, start, i) {
			return i, false
		}
		i = jsonscan.Space(b, i)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = jsonscan.Space(b, i+1)
		default:
			return i, false
		}
	}
}

// plainString returns the contents of v, a JSON string, when they are
// printable ASCII without escapes (decoded, they are the same bytes).
func plainString(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	if end, plain := jsonscan.String(v, 0); end != len(v) || !plain {
		return nil, false
	}
	return v[1 : len(v)-1], true
}

// intern is s as a string, without allocating when it is common.
func intern(s []byte, common string) string {
	if string(s) == common {
		return common
	}
	return string(s)
}

// skipValue checks the JSON value at b[i] and returns the index after it,
// or -1 when it is not valid JSON or nests deeper than maxScanDepth.
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '{':
		if depth >= maxScanDepth {
			return -1
		}
		end, ok := members(b, i, depth, false, anyMember)
		if !ok {
			return -1
		}
		return end
	case c == '[':
		if depth >= maxScanDepth {
			return -1
		}
		i = jsonscan.Space(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for {
			if i = skipValue(b, i, depth+1); i < 0 {
				return -1
			}
			i = jsonscan.Space(b, i)
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case ']':
				return i + 1
			case ',':
				i = jsonscan.Space(b, i+1)
			default:
				return -1
			}
		}
	case c == '"':
		end, _ := jsonscan.String(b, i)
		return end
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	}
	return -1
}

func anyMember([]byte, int, int) bool { return true }

func literal(b []byte, i int, word string) int {
	if len(b)-i >= len(word) && string(b[i:i+len(word)]) == word {
		return i + len(word)
	}
	return -1
}

// skipNumber checks the JSON number at b[i] and returns the index after
// it, or -1.
func skipNumber(b []byte, i int) int {
	digits := func(i int) int { // at least one
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}
