package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// How domain errors travel (capabilities.Code):
//
//   - tools/call: every failure is a tool result with isError set and the
//     domain message, so the model can read it and react; hidden and
//     unknown capabilities are the one exception, answered by mcp-go's own
//     "tool not found" error so that the two are indistinguishable, and a
//     quota refusal the other, answered by the JSON-RPC error
//     CodeQuotaExceeded carrying when to retry (retryError);
//   - resources/read, prompts/get, completion/complete: a JSON-RPC error
//     carrying the domain message (mcp-go fixes its code);
//   - refusals answered before the protocol layer: the HTTP status and
//     JSON-RPC code of capabilities' one table (HTTPStatus, RPCCode);
//   - tasks/update refused by the registry's decision for the task's
//     capability: the same table, with {"code": domain code} and, for a
//     quota, "retryAfter" in the error's data (taskRefused); a hidden
//     capability answers like an unknown task.
//
// CodeInternal never carries its detail: the client gets a generic message
// with the request id, and the log gets the error.

// CodeQuotaExceeded is the JSON-RPC error code of a tools/call refused by
// the quota, capabilities.RPCCode(capabilities.CodeQuotaExceeded): a
// server error code (-32000..-32099) that neither the MCP specification
// nor this package uses otherwise. Its data is
// {"code": "quota_exceeded", "retryAfter": RFC 3339 time}.
const CodeQuotaExceeded = capabilities.RPCQuotaExceeded

// retryError answers a tools/call refusal that says when to retry (a
// quota) with the JSON-RPC error CodeQuotaExceeded, HTTP 200, in place of
// the tool result: written as it is on the direct path, and in place of
// mcp-go's response otherwise (mcp-go gives tool handlers no way to choose
// an error code). It reports whether it did.
func retryError(st *reqState, err error) bool {
	at, ok := capabilities.RetryAfterOf(err)
	if !ok || st.out == nil {
		return false
	}
	st.refuseCall(http.StatusOK, capabilities.RPCCode(capabilities.CodeQuotaExceeded), publicMessage(err, st.requestID),
		retryData{Code: string(capabilities.CodeOf(err)), RetryAfter: at.UTC().Format(time.RFC3339)})
	return true
}

// metaError answers a tools/call whose _meta the registry refused (a
// malformed idempotency key) with the JSON-RPC error invalid params, in
// place of a tool result: the request, not the tool, is at fault. It
// reports whether it did.
func metaError(st *reqState, err error) bool {
	if err == nil || !errors.Is(err, capabilities.ErrInvalidRequestMeta) || st.out == nil {
		return false
	}
	st.refuseCall(http.StatusOK, capabilities.RPCCode(capabilities.CodeInvalidInput), publicMessage(err, st.requestID), nil)
	return true
}

// refuse answers a request with a domain error before the protocol
// layer: the HTTP status and JSON-RPC code of its domain code.
func refuse(w http.ResponseWriter, err error, requestID string) {
	code := capabilities.CodeOf(err)
	writeRequestError(w, capabilities.HTTPStatus(code), capabilities.RPCCode(code), publicMessage(err, requestID), requestID)
}

// publicMessage is what the client may read about err: the domain message,
// or for internal errors a generic text carrying the request id (the
// detail goes to the log).
func publicMessage(err error, requestID string) string {
	if errors.Is(err, context.Canceled) {
		return "request cancelled"
	}
	var e *capabilities.Error
	if errors.As(err, &e) && e.Code != capabilities.CodeInternal && e.Message != "" {
		return e.Message
	}
	return internalMessage(requestID)
}

func internalMessage(requestID string) string {
	return fmt.Sprintf("internal error (request id %s)", requestID)
}

// safeError is an error whose text is safe to send: mcp-go sends handler
// errors verbatim, so handlers only ever return this.
type safeError struct{ msg string }

func (e safeError) Error() string { return e.msg }

// retryData is the data of a refusal that says when to retry.
type retryData struct {
	Code       string `json:"code"`
	RetryAfter string `json:"retryAfter"`
}
