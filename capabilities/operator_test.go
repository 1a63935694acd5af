package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// operatorAudit remembers the operator calls the registry recorded.
type operatorAudit struct {
	mu    sync.Mutex
	calls []capabilities.OperatorCall
}

func (a *operatorAudit) RecordOperatorCall(_ context.Context, c capabilities.OperatorCall) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, c)
}

func (a *operatorAudit) Calls() []capabilities.OperatorCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// operatorFixture is a registry with one operator capability
// (operatorPoke, which names its argument as the call's subject and fails
// when asked to), an ordinary one and an admin one, a resource and a
// prompt.
func operatorFixture(t *testing.T, opts capabilities.Options) (*capabilities.Registry, *spy) {
	t.Helper()
	s := &spy{}
	reg := capabilities.NewRegistry(opts)
	type pokeIn struct {
		Who  string `json:"who" jsonschema:"the account poked"`
		Fail bool   `json:"fail,omitempty" jsonschema:"answer a conflict"`
	}
	poke := capabilities.Define(capabilities.Spec[pokeIn, echoOut]{
		Name: "operatorPoke", Domain: "operator", Description: "Pokes an account.",
		Annotations: &capabilities.Annotations{Destructive: true},
		Requires:    capabilities.Requirement{Operator: true},
		Handler: func(_ context.Context, call *capabilities.Call, in pokeIn) (echoOut, error) {
			s.runs++
			call.SetSubject(in.Who)
			if in.Fail {
				return echoOut{}, capabilities.Errorf(capabilities.CodeConflict, "%s cannot be poked", in.Who)
			}
			return echoOut{Echo: in.Who}, nil
		},
	})
	if err := reg.Register(poke, s.echo("userEcho", read, capabilities.Requirement{}),
		s.echo("adminEcho", write, capabilities.Requirement{Role: capabilities.RoleAdmin})); err != nil {
		t.Fatal(err)
	}
	read := func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: "test://r", Text: "r"}}, nil
	}
	if err := reg.RegisterResource(capabilities.Resource{URI: "test://r", Name: "r", Read: read}); err != nil {
		t.Fatal(err)
	}
	get := func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
		return capabilities.PromptResult{}, nil
	}
	if err := reg.RegisterPrompt(capabilities.Prompt{Name: "p", Description: "A prompt.", Get: get}); err != nil {
		t.Fatal(err)
	}
	return reg, s
}

// An operator capability is invisible to every other caller, admins with a
// session and every scope included, and answers each of them exactly like
// a name that does not exist; the refusal is audited.
func TestOperatorCapabilityHiddenFromEveryoneElse(t *testing.T) {
	ctx := context.Background()
	aud := &capabilitiestest.Auditor{}
	reg, s := operatorFixture(t, capabilities.Options{Auditor: aud})
	admin := capabilitiestest.Admin("a1")
	webAdmin := admin
	webAdmin.Session = true
	background := admin
	background.Interactive = false
	callers := map[string]capabilities.Caller{
		"user": capabilitiestest.User("u1"), "admin": admin, "admin with a session": webAdmin,
		"background admin": background, "anonymous": capabilities.Anonymous(),
		"decoded from JSON": decodedOperator(t),
	}
	authenticated := 0
	for _, caller := range callers {
		if caller.Authenticated() {
			authenticated++
		}
	}
	for name, caller := range callers {
		t.Run(name, func(t *testing.T) {
			if slices.Contains(reg.VisibleNames(ctx, caller), "operatorPoke") || reg.IsVisible(ctx, caller, "operatorPoke") {
				t.Fatalf("operatorPoke is visible to %+v", caller)
			}
			_, err := reg.Invoke(ctx, caller, "operatorPoke", json.RawMessage(`{"who":"x"}`))
			_, unknown := reg.Invoke(ctx, caller, "operatorPokx", json.RawMessage(`{"who":"x"}`))
			var e, u *capabilities.Error
			if !errors.As(err, &e) || !errors.As(unknown, &u) || e.Code != capabilities.CodeNotFound {
				t.Fatalf("Invoke = %v, want not found", err)
			}
			if e.Message != `capability "operatorPoke" not found` || u.Message != `capability "operatorPokx" not found` {
				t.Fatalf("answers %q and %q differ from an unknown name's", e.Message, u.Message)
			}
			if !reg.Screen(ctx, caller, "operatorPoke") {
				t.Fatal("Screen lets operatorPoke through")
			}
			if err := reg.Admit(ctx, caller, "operatorPoke"); capabilities.CodeOf(err) != capabilities.CodeNotFound {
				t.Fatalf("Admit = %v", err)
			}
		})
	}
	if s.runs != 0 {
		t.Fatalf("the handler ran %d times", s.runs)
	}
	var reasons []capabilities.DenialReason
	for _, d := range aud.Denials() {
		if d.Name == "operatorPoke" && d.Reason == capabilities.ReasonOperator {
			reasons = append(reasons, d.Reason)
		}
	}
	// Every authenticated caller's refusals (Invoke, Screen, Admit) are
	// audited as operator-only; the anonymous one's as unauthenticated.
	if authenticated != 4 || len(reasons) != authenticated*3 {
		t.Fatalf("%d operator-only denials audited, want %d: %+v", len(reasons), authenticated*3, aud.Denials())
	}
}

// decodedOperator is the operator's caller after a trip through JSON:
// whatever a transport decodes, it never carries the operator's mark.
func decodedOperator(t *testing.T) capabilities.Caller {
	t.Helper()
	raw, err := json.Marshal(capabilities.OperatorCaller())
	if err != nil {
		t.Fatal(err)
	}
	var c capabilities.Caller
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if c.Operator() {
		t.Fatal("a decoded caller is the operator's")
	}
	return c
}

// The operator's caller sees and runs its capabilities and nothing else:
// no ordinary or admin capability, resource or prompt (it holds no account
// for them to act as).
func TestOperatorCallerRunsOnlyOperatorCapabilities(t *testing.T) {
	ctx := context.Background()
	aud := &capabilitiestest.Auditor{}
	quota := quotaFunc(func(context.Context, capabilities.Caller, string) error { return errors.New("over quota") })
	reg, s := operatorFixture(t, capabilities.Options{Auditor: aud, Quota: quota, NoBuiltins: true})
	op := capabilities.OperatorCaller()
	if !op.Operator() || op.Authenticated() || capabilitiestest.Admin("a1").Operator() {
		t.Fatalf("OperatorCaller %+v", op)
	}
	if got := reg.VisibleNames(ctx, op); !reflect.DeepEqual(got, []string{"operatorPoke"}) {
		t.Fatalf("the operator sees %v, want [operatorPoke]", got)
	}
	if n := len(reg.VisibleResources(ctx, op)) + len(reg.VisiblePrompts(ctx, op)); n != 0 {
		t.Fatalf("the operator sees %d resources and prompts", n)
	}
	for _, name := range []string{"userEcho", "adminEcho"} {
		if _, err := reg.Invoke(ctx, op, name, json.RawMessage(`{"text":"x"}`)); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Errorf("the operator ran %s: %v", name, err)
		}
	}
	if _, err := reg.ReadResource(ctx, op, "test://r"); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Errorf("the operator read a resource: %v", err)
	}
	if _, err := reg.GetPrompt(ctx, op, "p", nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Errorf("the operator got a prompt: %v", err)
	}
	if s.runs != 0 {
		t.Fatalf("handlers ran %d times", s.runs)
	}
	// Its own capability runs, and the quota (which refuses everyone) is
	// not asked: the operator has no account to meter.
	res, err := reg.Invoke(ctx, op, "operatorPoke", json.RawMessage(`{"who":"u7"}`))
	if err != nil || res.IsError || s.runs != 1 {
		t.Fatalf("operatorPoke = %+v, %v (runs %d)", res, err, s.runs)
	}
	for _, d := range aud.Denials() {
		if d.Name == "operatorPoke" {
			t.Errorf("the operator's own call was denied: %+v", d)
		}
	}
}

// Every call of the operator that the checks let run is recorded with
// Options.OperatorAudit: the capability, the account its handler named,
// and the outcome; a call refused for its arguments (the input schema, a
// NUL, a malformed idempotency key) too, as invalid_input naming no
// account, as an ordinary caller's is an admitted call's outcome and not a
// denial. A capability that is not the operator's is a denial (Auditor),
// never an operator call; other callers' calls are neither.
func TestOperatorCallsAudited(t *testing.T) {
	ctx := context.Background()
	rec := &operatorAudit{}
	aud := &capabilitiestest.Auditor{}
	reg, s := operatorFixture(t, capabilities.Options{Auditor: aud, OperatorAudit: rec})
	op := capabilities.OperatorCaller()
	if _, err := reg.Invoke(ctx, op, "operatorPoke", json.RawMessage(`{"who":"u7"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Invoke(ctx, op, "operatorPoke", json.RawMessage(`{"who":"u8","fail":true}`)); capabilities.CodeOf(err) != capabilities.CodeConflict {
		t.Fatalf("failing poke = %v", err)
	}
	badKey := capabilities.WithRequestMeta(ctx, map[string]any{capabilities.MetaIdempotencyKey: 7})
	for name, call := range map[string]func() error{
		"a number for a string": func() error {
			_, err := reg.Invoke(ctx, op, "operatorPoke", json.RawMessage(`{"who":7}`))
			return err
		},
		"a NUL": func() error {
			_, err := reg.Invoke(ctx, op, "operatorPoke", json.RawMessage(`{"who":"u\u00009"}`))
			return err
		},
		"a malformed idempotency key": func() error {
			_, err := reg.Invoke(badKey, op, "operatorPoke", json.RawMessage(`{"who":"u9"}`))
			return err
		},
	} {
		if err := call(); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
			t.Fatalf("%s: %v, want invalid input", name, err)
		}
	}
	runs := s.runs
	// Refused by the checks (someone else's capability, another caller):
	// no operator call.
	_, _ = reg.Invoke(ctx, op, "userEcho", json.RawMessage(`{"text":"x"}`))
	_, _ = reg.Invoke(ctx, capabilitiestest.User("u1"), "userEcho", json.RawMessage(`{"text":"x"}`))
	_, _ = reg.Invoke(ctx, capabilitiestest.User("u1"), "userEcho", json.RawMessage(`{"text":7}`))
	got := rec.Calls()
	if len(got) != 5 || runs != 2 {
		t.Fatalf("recorded %+v (handler runs %d), want 5 calls of which 2 ran", got, runs)
	}
	invalid := capabilities.OperatorCall{Name: "operatorPoke", Outcome: string(capabilities.CodeInvalidInput)}
	for i, want := range []capabilities.OperatorCall{
		{Name: "operatorPoke", Subject: "u7", Outcome: "ok"},
		{Name: "operatorPoke", Subject: "u8", Outcome: string(capabilities.CodeConflict)},
		invalid, invalid, invalid,
	} {
		if got[i].At.IsZero() {
			t.Errorf("call %d has no time", i)
		}
		got[i].At = want.At
		if got[i] != want {
			t.Errorf("call %d = %+v, want %+v", i, got[i], want)
		}
	}
	var denials []capabilities.Denial
	for _, d := range aud.Denials() {
		d.At, d.Subject = time.Time{}, ""
		denials = append(denials, d)
	}
	if want := []capabilities.Denial{{Surface: "tool", Name: "userEcho", Reason: capabilities.ReasonOperator}}; !reflect.DeepEqual(denials, want) {
		t.Fatalf("denials %+v, want %+v", denials, want)
	}
}

// An operator capability asks the operator for nothing it cannot hold.
func TestRegisterRefusesOperatorWithOtherRequirements(t *testing.T) {
	s := &spy{}
	for name, req := range map[string]capabilities.Requirement{
		"role":       {Operator: true, Role: capabilities.RoleAdmin},
		"permission": {Operator: true, Permissions: []capabilities.Permission{capabilities.ReadUserOwn}},
		"scope":      {Operator: true, Scopes: []string{"mcp"}},
		"feature":    {Operator: true, Feature: "beta"},
		"session":    {Operator: true, SessionOnly: true},
		"public":     {Operator: true, Public: true},
	} {
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(s.echo("operatorEcho", read, req)); err == nil {
			t.Errorf("an operator capability requiring a %s was registered", name)
		}
	}
}
