package audit

import (
	"context"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// QueryInput is the input of adminAuditLogQuery.
type QueryInput struct {
	Category string `json:"category,omitempty" jsonschema:"only events of this category" schema:"enum=mcp|capability|auth|account|outbound"`
	Action   string `json:"action,omitempty" jsonschema:"only events with exactly this action"`
	Result   string `json:"result,omitempty" jsonschema:"only events with this result" schema:"enum=success|failure|denied"`
	// UserID is hashed with the log's key before matching, so admins can
	// look up one user without the log holding raw ids.
	UserID  string `json:"userId,omitempty" jsonschema:"only events about the user with this stable user id"`
	TraceID string `json:"traceId,omitempty" jsonschema:"only events recorded in the request of this W3C trace id (32 hex characters)"`
	Since   string `json:"since,omitempty" jsonschema:"only events at or after this RFC 3339 time" schema:"format=date-time"`
	Until   string `json:"until,omitempty" jsonschema:"only events before this RFC 3339 time" schema:"format=date-time"`
	Limit   int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
	Cursor  string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
}

// QueryOutput is one page of events, newest first.
type QueryOutput struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// Capability returns adminAuditLogQuery: admins page through the audit log
// with filters.
func (l *Log) Capability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[QueryInput, QueryOutput]{
		Name:        "adminAuditLogQuery",
		Domain:      "admin",
		Title:       "Query the audit log",
		Description: "Lists security audit events (denied calls, rejected tokens, sign-ins, password and role changes), newest first, with optional filters. Admins only. Identifiers in events are keyed hashes.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Requires:    capabilities.Requirement{Role: capabilities.RoleAdmin},
		Handler: func(ctx context.Context, _ *capabilities.Call, in QueryInput) (QueryOutput, error) {
			f := Filter{Category: in.Category, Action: in.Action, Result: in.Result, UserHash: l.HashUser(in.UserID), TraceID: in.TraceID}
			for _, t := range []struct {
				raw  string
				dst  *time.Time
				name string
			}{{in.Since, &f.Since, "since"}, {in.Until, &f.Until, "until"}} {
				if t.raw == "" {
					continue
				}
				v, err := time.Parse(time.RFC3339, t.raw)
				if err != nil {
					return QueryOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", t.name)
				}
				*t.dst = v
			}
			if in.TraceID != "" {
				// Trace ids are stored as W3C writes them: 32 lowercase hex
				// characters; one pasted in capitals still matches.
				f.TraceID = strings.ToLower(in.TraceID)
				if !traceID(f.TraceID) {
					return QueryOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "traceId must be a W3C trace id: 32 hexadecimal characters, such as 4bf92f3577b34da6a3ce929d0e0e4736")
				}
			}
			req, err := storage.PageInput(in.Cursor, in.Limit)
			if err != nil {
				return QueryOutput{}, err
			}
			page, err := l.Query(ctx, f, req)
			if err != nil {
				return QueryOutput{}, err
			}
			if page.Items == nil {
				page.Items = []Event{}
			}
			return QueryOutput{Events: page.Items, NextCursor: page.Next}, nil
		},
	})
}

// traceID reports whether s is a W3C trace id as stored: 32 lowercase hex
// characters, not all zero (the invalid id).
func traceID(s string) bool {
	if len(s) != 32 || strings.Trim(s, "0") == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
