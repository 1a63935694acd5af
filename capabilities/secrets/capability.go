package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// SetInput is the input of secretSet: a secret without its policy, which
// no agent may set. A secret an agent stores or replaces has no approved
// hosts until its owner approves them; one the owner's web session
// replaces keeps its policy.
type SetInput struct {
	Name        string `json:"name" jsonschema:"the secret's name: 1-64 letters, digits, '.', '_' or '-'" schema:"pattern=^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"`
	Value       string `json:"value" jsonschema:"the secret value (at most 64 KiB); it can never be read back by an agent"`
	Description string `json:"description,omitempty" jsonschema:"what the secret is for"`
}

// SetWithPolicyInput is the input of secretSetWithPolicy, which only the
// owner's web session may call: a secret with its policy. Absent both
// AllowedHosts and ExpiresAt, a replaced secret keeps its policy; given
// either, the policy is replaced as a whole.
type SetWithPolicyInput struct {
	Name         string    `json:"name" jsonschema:"the secret's name: 1-64 letters, digits, '.', '_' or '-'"`
	Value        string    `json:"value" jsonschema:"the secret value (at most 64 KiB)"`
	Description  string    `json:"description,omitempty" jsonschema:"what the secret is for"`
	AllowedHosts *[]string `json:"allowedHosts,omitempty" jsonschema:"hosts this secret may be sent to: exact names or *.domain"`
	ExpiresAt    string    `json:"expiresAt,omitempty" jsonschema:"RFC 3339 time after which the secret is never used; empty: never expires"`
}

// PolicyInput is the input of secretPolicySet.
type PolicyInput struct {
	Name         string   `json:"name" jsonschema:"the secret's name"`
	AllowedHosts []string `json:"allowedHosts" jsonschema:"hosts this secret may be sent to: exact names (api.example.com) or subdomain forms (*.example.com), port 443 unless one is named (api.example.com:8443)"`
	ExpiresAt    string   `json:"expiresAt,omitempty" jsonschema:"RFC 3339 time after which the secret is never used; empty: never expires"`
}

// PolicyOutput is the output of secretPolicySet.
type PolicyOutput struct {
	Secret Secret `json:"secret"`
}

// ParseExpiry parses an expiresAt input: empty means none; otherwise an
// RFC 3339 time, or a date-time without zone ("2026-12-31T23:59", as a
// browser's datetime-local field sends it) taken as UTC.
func ParseExpiry(v string) (*time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, v); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("%w: expiresAt %q is not an RFC 3339 time", ErrInvalid, v)
}

func invalid(err error) error {
	if errors.Is(err, ErrInvalid) {
		return &capabilities.Error{Code: capabilities.CodeInvalidInput, Message: strings.TrimPrefix(err.Error(), "secrets: ")}
	}
	return err
}

// SetOutput is the output of secretSet.
type SetOutput struct {
	Secret  Secret `json:"secret"`
	Created bool   `json:"created"`
}

// ListInput is the input of secretList.
type ListInput struct {
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
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
// secretReveal, secretPolicySet and secretSetWithPolicy, which only a
// person signed in to the web shell may call (Requirement.SessionOnly): no
// agent ever sees a value or approves a host. secretSet's input has no
// policy fields at all: an agent cannot even name them.
func (s *Service) Capabilities(owner capabilities.OwnerOf) []capabilities.Capability {
	own := func(p capabilities.Permission) capabilities.Requirement {
		return capabilities.Requirement{Permissions: []capabilities.Permission{p}}
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[SetInput, SetOutput]{
			Name: "secretSet", Domain: "secrets", Title: "Store a secret",
			Description: "Stores a named secret (an API key, a token) for the signed-in user, replacing any secret of the same name. The value is encrypted at rest and is never returned to agents; the user can reveal it on their account page. Agents use it as {{secret:NAME}} in httpRequest, for the hosts the user approved for it on the Secrets page. A secret stored or replaced by an agent has no approved hosts until the user approves them again.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    own(capabilities.UpdateUserOwn),
			Handler: func(ctx context.Context, call *capabilities.Call, in SetInput) (SetOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return SetOutput{}, err
				}
				var policy *Policy
				if !call.Caller.Session {
					// A value an agent wrote is one the owner never saw:
					// approvals given for the old value must not carry
					// over, or a swapped credential (the agent's own
					// token in place of the owner's) would be sent where
					// the owner's went.
					policy = &Policy{}
				}
				meta, created, err := s.Put(ctx, o, in.Name, in.Description, []byte(in.Value), policy)
				if err != nil {
					return SetOutput{}, invalid(err)
				}
				return SetOutput{Secret: meta, Created: created}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[SetWithPolicyInput, SetOutput]{
			Name: "secretSetWithPolicy", Domain: "secrets", Title: "Store a secret with its approved hosts",
			Description: "Stores a named secret for the signed-in person together with the hosts it may be sent to and when it expires, on their account page only.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires: capabilities.Requirement{
				Permissions: []capabilities.Permission{capabilities.UpdateUserOwn},
				SessionOnly: true, InteractiveOnly: true,
			},
			Handler: func(ctx context.Context, call *capabilities.Call, in SetWithPolicyInput) (SetOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return SetOutput{}, err
				}
				// Approving a host is the owner's decision, taken on the
				// page that shows them the secret.
				var policy *Policy
				if in.AllowedHosts != nil || in.ExpiresAt != "" {
					exp, err := ParseExpiry(in.ExpiresAt)
					if err != nil {
						return SetOutput{}, invalid(err)
					}
					policy = &Policy{ExpiresAt: exp}
					if in.AllowedHosts != nil {
						policy.AllowedHosts = *in.AllowedHosts
					}
				}
				meta, created, err := s.Put(ctx, o, in.Name, in.Description, []byte(in.Value), policy)
				if err != nil {
					return SetOutput{}, invalid(err)
				}
				return SetOutput{Secret: meta, Created: created}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[PolicyInput, PolicyOutput]{
			Name: "secretPolicySet", Domain: "secrets", Title: "Approve hosts for a secret",
			Description: "Sets the hosts one of the signed-in person's secrets may be sent to and when it expires, on their account page only.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires: capabilities.Requirement{
				Permissions: []capabilities.Permission{capabilities.UpdateUserOwn},
				SessionOnly: true, InteractiveOnly: true,
			},
			Handler: func(ctx context.Context, call *capabilities.Call, in PolicyInput) (PolicyOutput, error) {
				o, err := owner(ctx, call.Caller)
				if err != nil {
					return PolicyOutput{}, err
				}
				exp, err := ParseExpiry(in.ExpiresAt)
				if err != nil {
					return PolicyOutput{}, invalid(err)
				}
				meta, err := s.SetPolicy(ctx, o, in.Name, Policy{AllowedHosts: in.AllowedHosts, ExpiresAt: exp})
				if errors.Is(err, ErrNotFound) {
					return PolicyOutput{}, capabilities.Errorf(capabilities.CodeNotFound, "There is no secret of that name.")
				}
				if err != nil {
					return PolicyOutput{}, invalid(err)
				}
				return PolicyOutput{Secret: meta}, nil
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
