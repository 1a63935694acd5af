package integrations

import (
	"context"
	"errors"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// ListOutput is the output of connectionList.
type ListOutput struct {
	Connections []Connection   `json:"connections"`
	Providers   []ProviderInfo `json:"providers" jsonschema:"the providers an account can be connected at, on the account's Connections page"`
}

// NameInput names a connection.
type NameInput struct {
	Name string `json:"name" jsonschema:"the connection's name, as connectionList shows it"`
}

// AppNameInput names one of the caller's own apps.
type AppNameInput struct {
	Name string `json:"name" jsonschema:"the app's name, as connectionAppList shows it"`
}

// StartInput is the input of connectionConnectStart (web shell only).
type StartInput struct {
	Provider string `json:"provider,omitempty" jsonschema:"the provider's name (or give app)"`
	App      string `json:"app,omitempty" jsonschema:"the name of one of your own apps (connectionAppList), instead of provider"`
	Name     string `json:"name,omitempty" jsonschema:"the connection's name (default: the provider's or app's)"`
	Binding  string `json:"binding" jsonschema:"the browser's secret for this flow, kept by the web shell"`
}

// StartOutput is where to send the browser.
type StartOutput struct {
	AuthorizationURL string `json:"authorizationUrl"`
}

// FinishInput is the input of connectionConnectFinish (web shell only):
// the callback's query and the browser's binding.
type FinishInput struct {
	Binding          string `json:"binding" jsonschema:"the browser's secret for this flow, kept by the web shell"`
	Provider         string `json:"provider,omitempty" jsonschema:"the provider named by the callback's path"`
	App              string `json:"app,omitempty" jsonschema:"the own app named by the callback's path, instead of provider"`
	State            string `json:"oauthState" jsonschema:"the OAuth state the provider sent back"`
	Code             string `json:"code,omitempty" jsonschema:"the authorization code the provider sent back"`
	Error            string `json:"error,omitempty" jsonschema:"the error the provider sent back, if any"`
	ErrorDescription string `json:"errorDescription,omitempty" jsonschema:"the provider's description of the error"`
}

var (
	readOwn  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	writeOwn = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
	webOnly  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}, SessionOnly: true, InteractiveOnly: true}
)

func (s *Service) owner(ctx context.Context, c capabilities.Caller) (storage.Owner, error) {
	o, err := s.owners(ctx, c)
	return storage.Owner(o), err
}

// AppListOutput is the output of connectionAppList.
type AppListOutput struct {
	Apps []App `json:"apps"`
	// RedirectURIBase is what every own app's redirect URI starts with.
	RedirectURIBase string `json:"redirectUriBase" jsonschema:"an app's redirect URI, to register at its provider, is this followed by the app's name"`
}

// Capabilities returns connectionList and connectionDisconnect, for agents
// and people, and connectionConnectStart and connectionConnectFinish,
// which only the person's own web session may call (connecting is done in
// the browser).
func (s *Service) Capabilities() []capabilities.Capability {
	return append(s.appCapabilities(), []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, ListOutput]{
			Name: "connectionList", Domain: "integrations", Title: "List your connected accounts",
			Description: "Lists the accounts you connected at other services (name, provider, scopes, status, last use; never a token) and the providers you can connect on your account's Connections page. Use a connection in httpRequest by writing {{connection:NAME}} where the Authorization header's value goes: it becomes the connection's bearer token, sent only to its provider's hosts.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (ListOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return ListOutput{}, err
				}
				cs, err := s.List(ctx, o)
				if err != nil {
					return ListOutput{}, err
				}
				return ListOutput{Connections: cs, Providers: s.Providers()}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[NameInput, Disconnected]{
			Name: "connectionDisconnect", Domain: "integrations", Title: "Disconnect an account",
			Description: "Disconnects one of your connected accounts: its tokens are revoked at the provider when it supports that, and forgotten here.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in NameInput) (Disconnected, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Disconnected{}, err
				}
				out, err := s.Disconnect(ctx, o, in.Name)
				if errors.Is(err, ErrNotFound) {
					return Disconnected{}, capabilities.Errorf(capabilities.CodeNotFound, "There is no connection named %q.", in.Name)
				}
				return out, err
			},
		}),
		capabilities.Define(capabilities.Spec[StartInput, StartOutput]{
			Name: "connectionConnectStart", Domain: "integrations", Title: "Start connecting an account",
			Description: "Starts connecting the signed-in person's account at a provider, on their account page only: returns the provider's authorization URL.",
			Annotations: &capabilities.Annotations{},
			Requires:    webOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, in StartInput) (StartOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return StartOutput{}, err
				}
				if (in.App == "") == (in.Provider == "") {
					return StartOutput{}, invalid("Name either a provider or one of your own apps.")
				}
				var u string
				if in.App != "" {
					u, err = s.StartApp(ctx, o, in.App, in.Name, in.Binding)
				} else {
					u, err = s.Start(ctx, o, in.Provider, in.Name, in.Binding)
				}
				return StartOutput{AuthorizationURL: u}, err
			},
		}),
		capabilities.Define(capabilities.Spec[FinishInput, Connection]{
			Name: "connectionConnectFinish", Domain: "integrations", Title: "Finish connecting an account",
			Description: "Finishes connecting the signed-in person's account with what the provider sent back to the Connections page.",
			Annotations: &capabilities.Annotations{},
			Requires:    webOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, in FinishInput) (Connection, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Connection{}, err
				}
				return s.Finish(ctx, o, in.Binding, Callback{Provider: in.Provider, App: in.App, State: in.State, Code: in.Code, Error: in.Error, ErrorDescription: in.ErrorDescription})
			},
		}),
	}...)
}

// appCapabilities are connectionAppAdd (web session only: the client
// secret is pasted by the person, and an app decides where tokens go),
// connectionAppList and connectionAppRemove.
func (s *Service) appCapabilities() []capabilities.Capability {
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[AppInput, App]{
			Name: "connectionAppAdd", Domain: "integrations", Title: "Add your own OAuth app",
			Description: "Adds an OAuth app the signed-in person registered at a provider (client id and secret, endpoints or issuer, scopes, API hosts), on their account's Connections page only. The secret is kept sealed and never shown again.",
			Annotations: &capabilities.Annotations{},
			Requires:    webOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, in AppInput) (App, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return App{}, err
				}
				return s.AddApp(ctx, o, in)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, AppListOutput]{
			Name: "connectionAppList", Domain: "integrations", Title: "List your own OAuth apps",
			Description: "Lists the OAuth apps you added for connected accounts (name, endpoints, client id, scopes, API hosts, the redirect URI to register; never the client secret).",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (AppListOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return AppListOutput{}, err
				}
				apps, err := s.ListApps(ctx, o)
				return AppListOutput{Apps: apps, RedirectURIBase: s.AppRedirectBase()}, err
			},
		}),
		capabilities.Define(capabilities.Spec[AppNameInput, AppRemoved]{
			Name: "connectionAppRemove", Domain: "integrations", Title: "Remove your own OAuth app",
			Description: "Removes one of your own OAuth apps: its connections are disconnected first (their tokens revoked at the provider when it supports that) and its client secret forgotten.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in AppNameInput) (AppRemoved, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return AppRemoved{}, err
				}
				out, err := s.RemoveApp(ctx, o, in.Name)
				if errors.Is(err, ErrAppNotFound) {
					return AppRemoved{}, capabilities.Errorf(capabilities.CodeNotFound, "You have no app named %q.", in.Name)
				}
				return out, err
			},
		}),
	}
}
