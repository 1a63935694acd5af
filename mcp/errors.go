package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/requestid"
)

// wire is how one domain error code travels over MCP: as a tool error
// result (the model sees the message and can react) or as a JSON-RPC error,
// and with which HTTP status when it is answered before reaching the
// protocol layer.
type wire struct {
	toolError bool
	rpcCode   int
	status    int
}

// codes is the one table mapping domain codes to MCP.
var codes = map[capabilities.Code]wire{
	capabilities.CodeNotFound:          {toolError: true, rpcCode: mcpgo.INVALID_PARAMS, status: http.StatusNotFound},
	capabilities.CodeInvalidInput:      {toolError: true, rpcCode: mcpgo.INVALID_PARAMS, status: http.StatusBadRequest},
	capabilities.CodeAccountSuspended:  {toolError: true, rpcCode: mcpgo.INVALID_REQUEST, status: http.StatusForbidden},
	capabilities.CodeAccountDeleting:   {toolError: true, rpcCode: mcpgo.INVALID_REQUEST, status: http.StatusForbidden},
	capabilities.CodeInsufficientScope: {toolError: true, rpcCode: mcpgo.INVALID_REQUEST, status: http.StatusForbidden},
	capabilities.CodeQuotaExceeded:     {toolError: true, rpcCode: mcpgo.INVALID_REQUEST, status: http.StatusTooManyRequests},
	capabilities.CodeConflict:          {toolError: true, rpcCode: mcpgo.INVALID_REQUEST, status: http.StatusConflict},
	capabilities.CodeUnsupported:       {toolError: true, rpcCode: mcpgo.INVALID_REQUEST, status: http.StatusBadRequest},
	capabilities.CodeInternal:          {toolError: true, rpcCode: mcpgo.INTERNAL_ERROR, status: http.StatusInternalServerError},
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

// writeHTTPError answers before the protocol layer with a JSON-RPC error
// envelope, so that clients parse it like any other error.
func writeHTTPError(w http.ResponseWriter, status int, msg, requestID string) {
	code := mcpgo.INVALID_REQUEST
	if status >= 500 {
		code = mcpgo.INTERNAL_ERROR
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(requestid.Header, requestID)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg, "data": map[string]string{"requestId": requestID}},
	})
}
