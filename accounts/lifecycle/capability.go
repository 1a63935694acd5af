package lifecycle

import (
	"context"
	"errors"
	"strings"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// SectionInput is the input of accountExportSection.
type SectionInput struct {
	Section string `json:"section" jsonschema:"a section name from accountExportManifest, e.g. sql:users or blob:notes"`
	Cursor  string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page of this section"`
	Limit   int    `json:"limit,omitempty" jsonschema:"rows per page for SQL and custom sections, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
}

// Capabilities returns accountExportManifest and accountExportSection:
// the caller's own complete export, page by page.
func (s *Service) Capabilities(owner capabilities.OwnerOf) []capabilities.Capability {
	read := capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	ro := &capabilities.Annotations{ReadOnly: true, Idempotent: true}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, Manifest]{
			Name: "accountExportManifest", Domain: "account", Title: "Export manifest",
			Description: "Describes a complete export of the signed-in user's data: every section with its item count and redacted columns, and how to fetch each with accountExportSection. Secret values are never exported.",
			Annotations: ro, Requires: read,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (Manifest, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return Manifest{}, err
				}
				return s.Manifest(ctx, o)
			},
		}),
		capabilities.Define(capabilities.Spec[SectionInput, SectionPage]{
			Name: "accountExportSection", Domain: "account", Title: "Export one section",
			Description: "Returns one page of one export section of the signed-in user's data: SQL rows in key order, or one base64 chunk (at most 256 KiB) of a stored file. Pass nextCursor back until it is absent. A file changed between chunks is reported; restart that section.",
			Annotations: ro, Requires: read,
			Handler: func(ctx context.Context, call *capabilities.Call, in SectionInput) (SectionPage, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return SectionPage{}, err
				}
				if _, err := storage.PageInput(in.Cursor, in.Limit); err != nil {
					return SectionPage{}, err
				}
				page, err := s.Section(ctx, o, in.Section, in.Cursor, in.Limit)
				switch {
				case errors.Is(err, ErrUnknownSection):
					return page, capabilities.Errorf(capabilities.CodeNotFound, "no export section %q; see accountExportManifest", in.Section)
				case errors.Is(err, storage.ErrBlobChanged):
					return page, capabilities.Errorf(capabilities.CodeConflict, "a file changed while it was being exported; restart section %s without a cursor", in.Section)
				}
				return page, err
			},
		}),
	}
}

// ErrConfirmMismatch: the username typed to confirm a deletion is not the
// account's.
var ErrConfirmMismatch = errors.New("Type your username exactly to confirm.")

// DeleteInput is the input of accountDelete.
type DeleteInput struct {
	Confirm  string `json:"confirm" jsonschema:"the account's username, typed to confirm"`
	Password string `json:"password" jsonschema:"the account's password"`
}

// DeleteCapability returns accountDelete: the signed-in person deletes
// their own account, confirming with their username and password. It is
// session-only (never an agent), and it runs for an account whose
// deletion failed midway too, to finish it. Errors: ErrConfirmMismatch and
// accounts.ErrInvalidCredentials (invalid input), accounts.ErrLastAdmin
// (conflict); a failure midway is internal and leaves the account marked
// deleting for a retry.
func (s *Service) DeleteCapability() capabilities.Capability {
	return capabilities.Define(capabilities.Spec[DeleteInput, DeletionResult]{
		Name: "accountDelete", Domain: "account", Title: "Delete the account",
		Description: "Deletes the signed-in person's account and everything it owns, after they confirm with their username and password. Answers what was removed.",
		Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
		Requires: capabilities.Requirement{
			Permissions: []capabilities.Permission{capabilities.DeleteUserOwn},
			SessionOnly: true, InteractiveOnly: true, DuringDeletion: true,
		},
		Handler: func(ctx context.Context, call *capabilities.Call, in DeleteInput) (DeletionResult, error) {
			u, err := s.accounts.Identity.UserByStableID(ctx, call.Caller.UserID)
			if errors.Is(err, accounts.ErrNotFound) {
				return DeletionResult{}, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
			}
			if err != nil {
				return DeletionResult{}, err
			}
			if strings.TrimSpace(in.Confirm) != u.Username {
				return DeletionResult{}, &capabilities.Error{Code: capabilities.CodeInvalidInput, Message: ErrConfirmMismatch.Error(), Err: ErrConfirmMismatch}
			}
			if _, err := s.accounts.Credentials.VerifyPassword(ctx, u.ID, in.Password); err != nil {
				if errors.Is(err, accounts.ErrInvalidCredentials) {
					return DeletionResult{}, &capabilities.Error{Code: capabilities.CodeInvalidInput, Message: "The password is not correct.", Err: err}
				}
				return DeletionResult{}, err
			}
			res, err := s.Delete(ctx, storage.Owner{ID: u.ID, StableID: u.StableID})
			if errors.Is(err, accounts.ErrLastAdmin) {
				return res, &capabilities.Error{Code: capabilities.CodeConflict, Message: accounts.ErrLastAdmin.Error(), Err: err}
			}
			return res, err
		},
	})
}

// Owners resolves callers through the accounts service: the owner key
// that travels on the caller (Caller.OwnerID, set by accounts.CallerFor
// from the same row as its stable id) when there is one, otherwise the
// account of the caller's stable user id; an unknown account is refused as
// not found.
func Owners(acc *accounts.Service) capabilities.OwnerOf {
	return func(ctx context.Context, c capabilities.Caller) (capabilities.Owner, error) {
		if c.OwnerID != 0 && c.UserID != "" {
			return capabilities.Owner{ID: c.OwnerID, StableID: c.UserID}, nil
		}
		u, err := acc.Identity.UserByStableID(ctx, c.UserID)
		if errors.Is(err, accounts.ErrNotFound) {
			return capabilities.Owner{}, capabilities.Errorf(capabilities.CodeNotFound, "no such account")
		}
		if err != nil {
			return capabilities.Owner{}, err
		}
		return capabilities.Owner{ID: u.ID, StableID: u.StableID}, nil
	}
}
