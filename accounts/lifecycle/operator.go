package lifecycle

import (
	"context"
	"encoding/json"
	"io"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

type exportWriterKey struct{}

// WithExportWriter returns ctx carrying w, the destination of
// operatorUserExport's document. The export streams (memory stays bounded
// by one page whatever the account's size), so it is written to w rather
// than answered; only in-process code, which alone holds the operator's
// caller, can hand the capability a writer.
func WithExportWriter(ctx context.Context, w io.Writer) context.Context {
	return context.WithValue(ctx, exportWriterKey{}, w)
}

// OperatorExportOutput is the answer of operatorUserExport.
type OperatorExportOutput struct {
	User accounts.OperatorUser `json:"user"`
}

// OperatorDeleteOutput is the structured answer of operatorUserDelete:
// the account and what its deletion removed, also when the deletion
// stopped midway (the result is then an error result whose text says why,
// and the account is kept, marked deleting, for a retry).
type OperatorDeleteOutput struct {
	User     accounts.OperatorUser `json:"user"`
	Deletion DeletionResult        `json:"deletion"`
}

// OperatorCapabilities returns the operator's lifecycle capabilities
// (capabilities.Requirement.Operator): operatorUserExport writes an
// account's complete export (WriteExport) to the writer of the call's
// context (WithExportWriter), and operatorUserDelete deletes an account
// and everything it owns (Delete, the deletion accountDelete runs).
func (s *Service) OperatorCapabilities() []capabilities.Capability {
	op := capabilities.Requirement{Operator: true}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[accounts.OperatorUserRef, OperatorExportOutput]{
			Name: "operatorUserExport", Domain: "operator", Title: "Export an account",
			Description: "Writes an account's complete export, every registered surface, as one JSON document to the operator's destination.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true}, Requires: op,
			Handler: func(ctx context.Context, call *capabilities.Call, in accounts.OperatorUserRef) (OperatorExportOutput, error) {
				w, _ := ctx.Value(exportWriterKey{}).(io.Writer)
				if w == nil {
					return OperatorExportOutput{}, capabilities.Errorf(capabilities.CodeInvalidInput, "the export has no destination (lifecycle.WithExportWriter)")
				}
				u, err := s.accounts.Roles.OperatorAccount(ctx, call, in.Email)
				if err != nil {
					return OperatorExportOutput{}, err
				}
				if err := s.WriteExport(ctx, storage.Owner{ID: u.ID, StableID: u.StableID}, w); err != nil {
					return OperatorExportOutput{}, err
				}
				return OperatorExportOutput{User: accounts.OperatorUserOf(u)}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[accounts.OperatorUserRef, capabilities.Result]{
			Name: "operatorUserDelete", Domain: "operator", Title: "Delete an account",
			Description: "Deletes an account and everything it owns, and answers what was removed per surface. Refused for the last active admin; a deletion that stops midway keeps the account, marked deleting, and finishes when run again.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true}, Requires: op,
			Handler: func(ctx context.Context, call *capabilities.Call, in accounts.OperatorUserRef) (capabilities.Result, error) {
				u, err := s.accounts.Roles.OperatorAccount(ctx, call, in.Email)
				if err != nil {
					return capabilities.Result{}, err
				}
				res, err := s.Delete(ctx, storage.Owner{ID: u.ID, StableID: u.StableID})
				out := OperatorDeleteOutput{User: accounts.OperatorUserOf(u), Deletion: res}
				if out.Deletion.Deleted == nil {
					out.Deletion.Deleted = map[string]int64{}
				}
				if err != nil {
					// What was removed before the stop is part of the answer.
					return capabilities.Result{IsError: true, Structured: out, Content: []capabilities.Content{capabilities.Text{Text: err.Error()}}}, nil
				}
				text, err := json.Marshal(out)
				if err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.Result{Structured: out, Content: []capabilities.Content{capabilities.Text{Text: string(text)}}}, nil
			},
		}),
	}
}
