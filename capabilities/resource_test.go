package capabilities_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

func TestResourcesAndPromptsShareTheGuard(t *testing.T) {
	audit := &capabilitiestest.Auditor{}
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: audit})
	readText := func(text string) func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
		return func(_ context.Context, _ *capabilities.Call, uri string, p map[string]string) ([]capabilities.ResourceContents, error) {
			return []capabilities.ResourceContents{{URI: uri, Text: text + p["id"]}}, nil
		}
	}
	admin := capabilities.Requirement{Role: capabilities.RoleAdmin}
	if err := reg.RegisterResource(
		capabilities.Resource{URI: "test://public", Name: "public", Read: readText("hello")},
		capabilities.Resource{URI: "test://admin", Name: "admin", Requires: admin, Read: readText("secret")},
		capabilities.Resource{Template: "test://items/{id}/data", Name: "item", Read: readText("item ")},
	); err != nil {
		t.Fatal(err)
	}
	get := func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
		return capabilities.PromptResult{Messages: []capabilities.PromptMessage{{Role: "user", Content: capabilities.Text{Text: "hi"}}}}, nil
	}
	if err := reg.RegisterPrompt(
		capabilities.Prompt{Name: "greet", Get: get, Arguments: []capabilities.PromptArgument{{Name: "who", Required: true}}},
		capabilities.Prompt{Name: "adminPrompt", Requires: admin, Get: get},
	); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	ctx := t.Context()

	var uris []string
	for _, r := range reg.VisibleResources(ctx, user) {
		uris = append(uris, r.URI)
	}
	if !reflect.DeepEqual(uris, []string{"test://public"}) {
		t.Fatalf("visible resources = %v", uris)
	}
	got, err := reg.ReadResource(ctx, user, "test://items/42/data")
	if err != nil || got[0].Text != "item 42" {
		t.Fatalf("template read = %+v, %v", got, err)
	}
	_, hidden := reg.ReadResource(ctx, user, "test://admin")
	_, unknown := reg.ReadResource(ctx, user, "test://nothing")
	if capabilities.CodeOf(hidden) != capabilities.CodeNotFound ||
		strings.Replace(hidden.Error(), "admin", "X", 1) != strings.Replace(unknown.Error(), "nothing", "X", 1) {
		t.Fatalf("hidden %v vs unknown %v", hidden, unknown)
	}

	if ps := reg.VisiblePrompts(ctx, user); len(ps) != 1 || ps[0].Name != "greet" {
		t.Fatalf("visible prompts = %+v", ps)
	}
	if _, err := reg.GetPrompt(ctx, user, "greet", nil); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
		t.Fatalf("missing argument: %v", err)
	}
	if _, err := reg.GetPrompt(ctx, user, "adminPrompt", nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Fatalf("hidden prompt: %v", err)
	}
	suspended := user
	suspended.State = capabilities.AccountSuspended
	if _, err := reg.GetPrompt(ctx, suspended, "greet", map[string]string{"who": "x"}); capabilities.CodeOf(err) != capabilities.CodeAccountSuspended {
		t.Fatalf("suspended prompt: %v", err)
	}
	deleting := user
	deleting.State = capabilities.AccountDeleting
	if _, err := reg.ReadResource(ctx, deleting, "test://public"); err != nil {
		t.Fatalf("deleting account cannot read: %v", err)
	}
	if n := len(audit.Denials()); n != 4 {
		t.Fatalf("%d denials recorded, want 4: %+v", n, audit.Denials())
	}
}

func TestResourceDefinitionsValidated(t *testing.T) {
	read := func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
		return nil, nil
	}
	for name, r := range map[string]capabilities.Resource{
		"both":           {URI: "a://b", Template: "a://{x}", Name: "n", Read: read},
		"neither":        {Name: "n", Read: read},
		"no read":        {URI: "a://b", Name: "n"},
		"no name":        {URI: "a://b", Read: read},
		"no placeholder": {Template: "a://b", Name: "n", Read: read},
	} {
		if err := capabilities.NewRegistry(capabilities.Options{}).RegisterResource(r); err == nil {
			t.Errorf("%s: registered", name)
		}
	}
}

func TestResourceAndPromptRegistrationIsAllOrNothing(t *testing.T) {
	read := func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
		return nil, nil
	}
	get := func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
		return capabilities.PromptResult{}, nil
	}
	reg := capabilities.NewRegistry(capabilities.Options{})
	user := capabilitiestest.User("u")
	if err := reg.RegisterResource(
		capabilities.Resource{URI: "a://one", Name: "one", Read: read},
		capabilities.Resource{URI: "a://one", Name: "again", Read: read},
	); err == nil {
		t.Fatal("duplicate resource registered")
	}
	if got := reg.VisibleResources(t.Context(), user); len(got) != 0 {
		t.Fatalf("refused batch left %d resources", len(got))
	}
	if err := reg.RegisterPrompt(capabilities.Prompt{Name: "p", Get: get}, capabilities.Prompt{Name: "q"}); err == nil {
		t.Fatal("prompt without Get registered")
	}
	if got := reg.VisiblePrompts(t.Context(), user); len(got) != 0 {
		t.Fatalf("refused batch left %d prompts", len(got))
	}
}
