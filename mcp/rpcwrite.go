package mcp

import (
	"encoding/json"
	"net/http"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/internal/requestid"
)

// The transport's JSON-RPC answers, written in one shape: the members in
// mcp-go's order (jsonrpc, id, then result or error; an error's code,
// message, then data), encoded as json.Marshal encodes them, one answer a
// line, with Content-Type application/json. Every answer the transport
// writes itself goes through these functions; the direct path's common
// tools/call result is appended without reflection in the same bytes
// (answer.go).

// rpcResponse is a JSON-RPC response. ID is echoed byte for byte (nil
// is null).
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcError is the error of a JSON-RPC response.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// idOrNull is id, or null for a request without one.
func idOrNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

// resultAnswer encodes the response carrying result under id.
func resultAnswer(id json.RawMessage, result any) ([]byte, error) {
	return json.Marshal(rpcResponse{JSONRPC: mcpgo.JSONRPC_VERSION, ID: idOrNull(id), Result: result})
}

// errorAnswer encodes the error response under id. Data that does not
// encode is left out (the transport's own data always does).
func errorAnswer(id json.RawMessage, code int, message string, data any) []byte {
	resp := rpcResponse{JSONRPC: mcpgo.JSONRPC_VERSION, ID: idOrNull(id), Error: &rpcError{Code: code, Message: message, Data: data}}
	b, err := json.Marshal(resp)
	if err != nil {
		resp.Error.Data = nil
		b, _ = json.Marshal(resp) // an int and a string always encode; id was decoded from JSON
	}
	return b
}

// jsonContentType is the Content-Type header value of every JSON answer,
// shared (net/http only reads it; Header.Set replaces it).
var jsonContentType = []string{"application/json"}

// writeAnswer writes body, one encoded JSON-RPC message, as the whole
// response with status.
func writeAnswer(w http.ResponseWriter, status int, body []byte) error {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, err := w.Write(append(body, '\n'))
	return err
}

// writeResult answers with result under id, status 200.
func writeResult(w http.ResponseWriter, id json.RawMessage, result any) {
	body, err := resultAnswer(id, result)
	if err != nil {
		// The transport's own results always encode; a handler's are
		// encoded by the caller, which answers its failure itself.
		writeError(w, http.StatusInternalServerError, id, mcpgo.INTERNAL_ERROR, "internal error", nil)
		return
	}
	_ = writeAnswer(w, http.StatusOK, body)
}

// writeError answers with a JSON-RPC error under id, with status.
func writeError(w http.ResponseWriter, status int, id json.RawMessage, code int, message string, data any) {
	_ = writeAnswer(w, status, errorAnswer(id, code, message, data))
}

// writePlainError answers with a plain text error, as http.Error does
// (mcp-go's answers to a GET or DELETE it refuses).
func writePlainError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}

// writeHTTPError answers before the protocol layer with a JSON-RPC error
// envelope without a request id, so that clients parse it like any other
// error: invalid request for a client's fault, internal error for the
// server's.
func writeHTTPError(w http.ResponseWriter, status int, msg, requestID string) {
	code := mcpgo.INVALID_REQUEST
	if status >= 500 {
		code = mcpgo.INTERNAL_ERROR
	}
	writeRequestError(w, status, code, msg, requestID)
}

// writeRequestError writes a JSON-RPC error without a request id, with
// status, naming the HTTP request's id in the header and the error's data.
func writeRequestError(w http.ResponseWriter, status, code int, msg, requestID string) {
	w.Header().Set(requestid.Header, requestID)
	writeError(w, status, nil, code, msg, requestIDData{requestID})
}

type requestIDData struct {
	RequestID string `json:"requestId"`
}

// fixedAnswer is a request's answer decided while its handler ran, in
// place of what the handler returns: a refusal (a quota, a malformed
// _meta, the errors 2026-07-28 prescribes) or a result mcp-go has no type
// for (a created task), with the HTTP status of its plain JSON answer.
type fixedAnswer struct {
	status int
	body   []byte
}

// refuseCall makes the request's answer the JSON-RPC error code under the
// request's id, whatever its handler returns (written as it is by
// serveToolCall or serveEngine).
func (st *reqState) refuseCall(status, code int, message string, data any) {
	st.fixed = &fixedAnswer{status: status, body: errorAnswer(st.rpcID, code, message, data)}
}

// answerWith makes body, a complete JSON-RPC response, the request's
// answer, whatever its handler returns.
func (st *reqState) answerWith(body []byte) {
	st.fixed = &fixedAnswer{status: http.StatusOK, body: body}
}
