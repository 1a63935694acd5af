package secrets

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// SetInput is the input of secretSet.
type SetInput struct {
	Name        string `json:"name" jsonschema:"the secret's name: 1-64 letters, digits, '.', '_' or '-'"`
	Value       string `json:"value" jsonschema:"the secret value (at most 64 KiB); it can never be read back by an agent"`
	Description string `json:"description,omitempty" jsonschema:"what the secret is for"`
}

// SetOutput is the output of secretSet.
type SetOutput struct {
	Secret  Secret `json:"secret"`
	Created bool   `json:"created"`
}

// ListInput is the input of secretList.
type ListInput struct {
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
}

// ListOutput is one page of secret metadata.
type ListOutput struct {
	Secrets    []Secret `json:"secrets"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// DeleteInput is the input of secretDelete.
type DeleteInput struct {
	Name string `json:"name" jsonschema:"the secret's name"`
}

// DeleteOutput is the output of secretDelete.
type DeleteOutput struct {
	Deleted bool `json:"deleted"`
}

// RevealInput is the input of secretReveal.
type RevealInput struct {
	Name string `json:"name" jsonschema:"the secret's name"`
}

// RevealOutput is the output of secretReveal: the value in clear.
type RevealOutput struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Capabilities returns secretSet, secretList and secretDelete, which act on
// the caller's own secrets only and never return a value, and
// secretReveal, which returns one of the caller's own values and only to a
// person signed in to the web shell (Requirement.SessionOnly): no agent
// ever sees or calls it.
func (s *Service) Capabilities(owner capabilities.OwnerOf) []capabilities.Capability {
	own := func(p capabilities.Permission) capabilities.Requirement {
		return capabilities.Requirement{Permissions: []capabilities.Permission{p}}
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[SetInput, SetOutput]{
			Name: "secretSet", Domain: "secrets", Title: "Store a secret",
			Description: "Stores a named secret (an API key, a token) for the signed-in user, replacing any secret of the same name. The value is encrypted at rest and is never returned to agents; the user can reveal it on their account page.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    own(capabilities.UpdateUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in SetInput) (SetOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return SetOutput{}, err
				}
				meta, created, err := s.Set(ctx, o, in.Name, in.Description, []byte(in.Value))
				if errors.Is(err, ErrInvalid) {
					return SetOutput{}, &capabilities.Error{Code: capabilities.CodeInvalidInput, Message: err.Error()}
				}
				return SetOutput{Secret: meta, Created: created}, err
			},
		}),
		capabilities.Define(capabilities.Spec[ListInput, ListOutput]{
			Name: "secretList", Domain: "secrets", Title: "List secrets",
			Description: "Lists the signed-in user's secrets by name: names, descriptions and times, never values.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    own(capabilities.ReadUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in ListInput) (ListOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return ListOutput{}, err
				}
				req, err := storage.PageInput(in.Cursor, in.Limit)
				if err != nil {
					return ListOutput{}, err
				}
				page, err := s.List(ctx, o, req)
				if err != nil {
					return ListOutput{}, err
				}
				if page.Items == nil {
					page.Items = []Secret{}
				}
				return ListOutput{Secrets: page.Items, NextCursor: page.Next}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[RevealInput, RevealOutput]{
			Name: "secretReveal", Domain: "secrets", Title: "Reveal a secret",
			Description: "Shows the value of one of the signed-in person's own secrets, on their account page only.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires: capabilities.Requirement{
				Permissions: []capabilities.Permission{capabilities.ReadUserOwn},
				SessionOnly: true, InteractiveOnly: true,
			},
			Handler: func(ctx context.Context, call *capabilities.Call, in RevealInput) (RevealOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return RevealOutput{}, err
				}
				v, err := s.Reveal(ctx, o, in.Name)
				if errors.Is(err, ErrNotFound) {
					return RevealOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "There is no secret of that name.")
				}
				if err != nil {
					return RevealOutput{}, err
				}
				return RevealOutput{Name: in.Name, Value: string(v)}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[DeleteInput, DeleteOutput]{
			Name: "secretDelete", Domain: "secrets", Title: "Delete a secret",
			Description: "Deletes one of the signed-in user's secrets by name. Deleting a secret that does not exist reports deleted: false.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    own(capabilities.UpdateUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in DeleteInput) (DeleteOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return DeleteOutput{}, err
				}
				ok, err := s.Delete(ctx, o, in.Name)
				return DeleteOutput{Deleted: ok}, err
			},
		}),
	}
}
