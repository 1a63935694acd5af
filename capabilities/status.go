package capabilities

import "net/http"

// The JSON-RPC 2.0 error codes of the domain codes (RPCCode). The first
// three are JSON-RPC's own; RPCQuotaExceeded is a server error code
// (-32000..-32099) that neither the MCP specification nor this module
// uses otherwise.
const (
	RPCInvalidRequest = -32600
	RPCInvalidParams  = -32602
	RPCInternalError  = -32603
	// RPCQuotaExceeded answers a call the quota refused; transports add
	// when to retry in the error's data.
	RPCQuotaExceeded = -32029
)

// transportCodes is the one table from domain codes to the transports'
// vocabularies: every Code has a row (TestEveryCodeHasTransportCodes).
// Web pages, the MCP endpoint's refusals and JSON answers read it
// through HTTPStatus and RPCCode; no other package keeps a copy.
var transportCodes = map[Code]struct{ http, rpc int }{
	CodeNotFound:             {http.StatusNotFound, RPCInvalidParams},
	CodeInvalidInput:         {http.StatusBadRequest, RPCInvalidParams},
	CodeAccountSuspended:     {http.StatusForbidden, RPCInvalidRequest},
	CodeAccountDeleting:      {http.StatusForbidden, RPCInvalidRequest},
	CodeInsufficientScope:    {http.StatusForbidden, RPCInvalidRequest},
	CodeSecondFactorRequired: {http.StatusForbidden, RPCInvalidRequest},
	CodeQuotaExceeded:        {http.StatusTooManyRequests, RPCQuotaExceeded},
	CodeConflict:             {http.StatusConflict, RPCInvalidRequest},
	CodeUnsupported:          {http.StatusBadRequest, RPCInvalidRequest},
	CodeInternal:             {http.StatusInternalServerError, RPCInternalError},
}

// HTTPStatus returns the HTTP status that answers a refusal with code: 404
// for not_found, 400 for invalid_input and unsupported, 403 for the
// account and scope refusals, 429 for quota_exceeded, 409 for conflict,
// and 500 for internal or a code this package does not declare.
func HTTPStatus(code Code) int {
	if c, ok := transportCodes[code]; ok {
		return c.http
	}
	return http.StatusInternalServerError
}

// RPCCode returns the JSON-RPC error code that answers a refusal with
// code: RPCInvalidParams for not_found and invalid_input (the arguments
// name something unknown or wrong), RPCQuotaExceeded for quota_exceeded,
// RPCInternalError for internal or an undeclared code, and
// RPCInvalidRequest for the rest.
func RPCCode(code Code) int {
	if c, ok := transportCodes[code]; ok {
		return c.rpc
	}
	return RPCInternalError
}
