package remotemcp

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
)

// AddInput is the input of mcpServerAdd.
type AddInput struct {
	URL  string `json:"url" jsonschema:"the remote MCP server's endpoint URL (https)" schema:"maxLength=2048"`
	Name string `json:"name,omitempty" jsonschema:"a short name, 1-16 lowercase letters or digits starting with a letter, prefixing the server's tools as mcp_<name>__<tool> (default: from the URL's host)" schema:"maxLength=16"`
}

// NameInput names a remote server.
type NameInput struct {
	Name string `json:"name" jsonschema:"the server's name, as mcpServerList shows it"`
}

// ListOutput is the output of mcpServerList.
type ListOutput struct {
	Servers []Server `json:"servers"`
}

// ConsentStartInput is the input of mcpServerConsentStart (web only).
type ConsentStartInput struct {
	Name    string `json:"name" jsonschema:"the server's name"`
	Binding string `json:"binding" jsonschema:"the browser's secret for this flow, kept by the web shell"`
}

// ConsentStartOutput is where to send the browser.
type ConsentStartOutput struct {
	AuthorizationURL string `json:"authorizationUrl"`
}

// ConsentFinishInput is the input of mcpServerConsentFinish (web only).
type ConsentFinishInput struct {
	Binding          string `json:"binding" jsonschema:"the browser's secret for this flow, kept by the web shell"`
	Server           string `json:"server" jsonschema:"the server's public id named by the callback's path"`
	State            string `json:"oauthState" jsonschema:"the OAuth state sent back"`
	Code             string `json:"code,omitempty" jsonschema:"the authorization code sent back"`
	Issuer           string `json:"iss,omitempty" jsonschema:"the issuer sent back (RFC 9207), if any"`
	Error            string `json:"error,omitempty" jsonschema:"the error sent back, if any"`
	ErrorDescription string `json:"errorDescription,omitempty" jsonschema:"the description of the error"`
}

var (
	readOwn  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	writeOwn = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
	webOnly  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}, SessionOnly: true, InteractiveOnly: true}
)

func notFound(name string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return capabilities.Errorf(capabilities.CodeNotFound, "You have no remote MCP server named %q.", name)
	}
	return err
}

// Capabilities returns mcpServerAdd, mcpServerList, mcpServerRemove and
// mcpServerRefresh, and the consent pair only the person's web session
// may call.
func (s *Service) Capabilities() []capabilities.Capability {
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[AddInput, Added]{
			Name: "mcpServerAdd", Domain: "integrations", Title: "Add a remote MCP server",
			Description: "Adds a remote MCP server by URL: its tools become your own tools, named mcp_<name>__<tool>. A server asking for authorization answers status consent_required and a consentUrl: the person opens it and grants access at the server; its tools appear after that.",
			Annotations: &capabilities.Annotations{OpenWorld: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in AddInput) (Added, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Added{}, err
				}
				return s.Add(ctx, o, in.URL, in.Name)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, ListOutput]{
			Name: "mcpServerList", Domain: "integrations", Title: "List your remote MCP servers",
			Description: "Lists the remote MCP servers you added: name, URL, status, the capability names of their tools; never a token.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (ListOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return ListOutput{}, err
				}
				l, err := s.List(ctx, o)
				return ListOutput{Servers: l}, err
			},
		}),
		capabilities.Define(capabilities.Spec[NameInput, Removed]{
			Name: "mcpServerRemove", Domain: "integrations", Title: "Remove a remote MCP server",
			Description: "Removes one of your remote MCP servers: its token is revoked at the server's authorization server when it supports that, and its tools are no longer yours.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true, OpenWorld: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in NameInput) (Removed, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Removed{}, err
				}
				out, err := s.Remove(ctx, o, in.Name)
				return out, notFound(in.Name, err)
			},
		}),
		capabilities.Define(capabilities.Spec[NameInput, Added]{
			Name: "mcpServerRefresh", Domain: "integrations", Title: "Refresh a remote MCP server's tools",
			Description: "Reads one of your remote MCP servers' tool list again, when its tools changed.",
			Annotations: &capabilities.Annotations{Idempotent: true, OpenWorld: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in NameInput) (Added, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Added{}, err
				}
				out, err := s.Refresh(ctx, o, in.Name)
				return out, notFound(in.Name, err)
			},
		}),
		capabilities.Define(capabilities.Spec[ConsentStartInput, ConsentStartOutput]{
			Name: "mcpServerConsentStart", Domain: "integrations", Title: "Start consent at a remote MCP server",
			Description: "Starts the signed-in person's consent at a remote MCP server's authorization server, on their account page only: returns the authorization URL.",
			Annotations: &capabilities.Annotations{},
			Requires:    webOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, in ConsentStartInput) (ConsentStartOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return ConsentStartOutput{}, err
				}
				u, err := s.ConsentStart(ctx, o, in.Name, in.Binding)
				return ConsentStartOutput{AuthorizationURL: u}, err
			},
		}),
		capabilities.Define(capabilities.Spec[ConsentFinishInput, Server]{
			Name: "mcpServerConsentFinish", Domain: "integrations", Title: "Finish consent at a remote MCP server",
			Description: "Finishes the signed-in person's consent at a remote MCP server with what its authorization server sent back.",
			Annotations: &capabilities.Annotations{},
			Requires:    webOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, in ConsentFinishInput) (Server, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Server{}, err
				}
				return s.ConsentFinish(ctx, o, in.Binding, Callback{Server: in.Server, State: in.State, Code: in.Code, Issuer: in.Issuer, Error: in.Error, ErrorDescription: in.ErrorDescription})
			},
		}),
	}
}
