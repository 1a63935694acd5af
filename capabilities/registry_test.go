package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

type echoIn struct {
	Text  string `json:"text" jsonschema:"what to echo"`
	Times int    `json:"times,omitempty"`
}

type echoOut struct {
	Echo string `json:"echo"`
}

// spy counts handler runs so tests can prove a refused call never ran.
type spy struct{ runs int }

func (s *spy) echo(name string, ann capabilities.Annotations, req capabilities.Requirement) capabilities.Capability {
	return capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: name, Domain: "test", Description: "Echoes its input.",
		Annotations: &ann, Requires: req,
		Handler: func(_ context.Context, _ *capabilities.Call, in echoIn) (echoOut, error) {
			s.runs++
			return echoOut{Echo: strings.Repeat(in.Text, max(in.Times, 1))}, nil
		},
	})
}

type quotaFunc func(ctx context.Context, c capabilities.Caller, name string) error

func (f quotaFunc) Allow(ctx context.Context, c capabilities.Caller, name string) error {
	return f(ctx, c, name)
}

type flags map[string]bool

func (f flags) Enabled(_ context.Context, _ capabilities.Caller, flag string) bool { return f[flag] }

var (
	read  = capabilities.Annotations{ReadOnly: true, Idempotent: true}
	write = capabilities.Annotations{Destructive: true}
)

func TestInvokeOrderOfChecks(t *testing.T) {
	user := capabilitiestest.User("u1")
	admin := capabilitiestest.Admin("a1")
	with := func(c capabilities.Caller, f func(*capabilities.Caller)) capabilities.Caller { f(&c); return c }
	suspended := func(c *capabilities.Caller) { c.State = capabilities.AccountSuspended }
	deleting := func(c *capabilities.Caller) { c.State = capabilities.AccountDeleting }
	overQuota := errors.New("over quota")

	tests := []struct {
		name       string
		caller     capabilities.Caller
		capability string // of the fixture below
		args       string
		quota      error
		wantCode   capabilities.Code // "" means the handler ran
		wantReason capabilities.DenialReason
	}{
		{"active user reads", user, "readAny", `{"text":"x"}`, nil, "", ""},
		{"unauthenticated", capabilities.Caller{State: capabilities.AccountActive}, "readAny", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonUnauthenticated},
		{"suspended refuses reads", with(user, suspended), "readAny", `{"text":"x"}`, nil, capabilities.CodeAccountSuspended, capabilities.ReasonSuspended},
		{"suspended before role: audited as suspended, answered as hidden", with(user, suspended), "adminWrite", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonSuspended},
		{"deleting refuses writes", with(user, deleting), "writeOwn", `{"text":"x"}`, nil, capabilities.CodeAccountDeleting, capabilities.ReasonDeleting},
		{"deleting allows reads", with(user, deleting), "readAny", `{"text":"x"}`, nil, "", ""},
		{"load failure is deleting", capabilities.FailClosed("u1", nil), "writeOwn", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonDeleting},
		{"missing role hides", user, "adminWrite", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonRole},
		{"missing permission hides", with(user, func(c *capabilities.Caller) { c.Permissions = nil }), "writeOwn", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonPermission},
		{"feature off hides", user, "flagged", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonFeature},
		{"feature on", user, "flaggedOn", `{"text":"x"}`, nil, "", ""},
		{"background caller refused interactive-only", with(user, func(c *capabilities.Caller) { c.Interactive = false }), "interactive", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonInteractive},
		{"token caller refused session-only", user, "sessionOnly", `{"text":"x"}`, nil, capabilities.CodeNotFound, capabilities.ReasonSession},
		{"deleting refuses writes that do not finish the deletion", with(user, deleting), "interactive", `{"text":"x"}`, nil, capabilities.CodeAccountDeleting, capabilities.ReasonDeleting},
		{"deleting runs what finishes the deletion", with(user, deleting), "finishDeletion", `{"text":"x"}`, nil, "", ""},
		{"suspended does not finish a deletion", with(user, suspended), "finishDeletion", `{"text":"x"}`, nil, capabilities.CodeAccountSuspended, capabilities.ReasonSuspended},
		{"web session caller", with(user, func(c *capabilities.Caller) { c.Session = true }), "sessionOnly", `{"text":"x"}`, nil, "", ""},
		{"web session caller reads a credential", with(user, func(c *capabilities.Caller) { c.Session = true }), "sessionRead", `{"text":"x"}`, nil, "", ""},
		{"deleting admin reads no other account", with(admin, deleting), "adminRead", `{"text":"x"}`, nil, capabilities.CodeAccountDeleting, capabilities.ReasonDeleting},
		{"active admin reads", admin, "adminRead", `{"text":"x"}`, nil, "", ""},
		{"deleting never reads a credential", with(user, func(c *capabilities.Caller) { c.Session = true; c.State = capabilities.AccountDeleting }), "sessionRead", `{"text":"x"}`, nil, capabilities.CodeAccountDeleting, capabilities.ReasonDeleting},
		{"missing scope", with(user, func(c *capabilities.Caller) { c.AllScopes = false; c.Scopes = []string{"mcp"} }), "scoped", `{"text":"x"}`, nil, capabilities.CodeInsufficientScope, capabilities.ReasonScope},
		{"scope present", with(user, func(c *capabilities.Caller) { c.AllScopes = false; c.Scopes = []string{"notes:write"} }), "scoped", `{"text":"x"}`, nil, "", ""},
		{"role before quota", user, "adminWrite", `{"text":"x"}`, overQuota, capabilities.CodeNotFound, capabilities.ReasonRole},
		{"quota before input", admin, "adminWrite", `{"bad":1}`, overQuota, capabilities.CodeQuotaExceeded, capabilities.ReasonQuota},
		{"input validated", admin, "adminWrite", `{"times":2}`, nil, capabilities.CodeInvalidInput, ""},
		{"input type validated", admin, "adminWrite", `{"text":3}`, nil, capabilities.CodeInvalidInput, ""},
		{"input not json", admin, "adminWrite", `{"text":`, nil, capabilities.CodeInvalidInput, ""},
		{"admin writes", admin, "adminWrite", `{"text":"ab","times":2}`, nil, "", ""},
		{"unknown", admin, "noSuchThing", `{}`, nil, capabilities.CodeNotFound, capabilities.ReasonUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			audit := &capabilitiestest.Auditor{}
			reg := capabilities.NewRegistry(capabilities.Options{
				Auditor:  audit,
				Features: flags{"beta": true},
				Quota: quotaFunc(func(context.Context, capabilities.Caller, string) error {
					return tt.quota
				}),
			})
			s := &spy{}
			if err := reg.Register(
				s.echo("readAny", read, capabilities.Requirement{}),
				s.echo("writeOwn", write, capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}),
				s.echo("adminWrite", write, capabilities.Requirement{Role: capabilities.RoleAdmin}),
				s.echo("flagged", read, capabilities.Requirement{Feature: "alpha"}),
				s.echo("flaggedOn", read, capabilities.Requirement{Feature: "beta"}),
				s.echo("interactive", write, capabilities.Requirement{InteractiveOnly: true}),
				s.echo("sessionOnly", write, capabilities.Requirement{SessionOnly: true}),
				s.echo("sessionRead", read, capabilities.Requirement{SessionOnly: true, InteractiveOnly: true}),
				s.echo("adminRead", read, capabilities.Requirement{Role: capabilities.RoleAdmin}),
				s.echo("finishDeletion", write, capabilities.Requirement{DuringDeletion: true}),
				s.echo("scoped", write, capabilities.Requirement{Scopes: []string{"notes:write"}}),
			); err != nil {
				t.Fatal(err)
			}
			res, err := reg.Invoke(t.Context(), tt.caller, tt.capability, json.RawMessage(tt.args))
			if got := codeOrEmpty(err); got != tt.wantCode {
				t.Fatalf("code = %q (err %v), want %q", got, err, tt.wantCode)
			}
			if ran := s.runs == 1; ran != (tt.wantCode == "") {
				t.Fatalf("handler ran %d times, want ran=%v", s.runs, tt.wantCode == "")
			}
			if tt.wantCode == "" && res.Structured == nil {
				t.Fatalf("result has no structured content: %+v", res)
			}
			denials := audit.Denials()
			if tt.wantReason == "" {
				if len(denials) != 0 {
					t.Fatalf("denials = %+v, want none", denials)
				}
				return
			}
			if len(denials) != 1 || denials[0].Reason != tt.wantReason || denials[0].Name != tt.capability {
				t.Fatalf("denials = %+v, want one %q for %q", denials, tt.wantReason, tt.capability)
			}
			if d := denials[0]; tt.caller.UserID != "" && (d.Subject == "" || strings.Contains(d.Subject, tt.caller.UserID)) {
				t.Fatalf("subject %q is not a hash of %q", d.Subject, tt.caller.UserID)
			}
		})
	}
}

func codeOrEmpty(err error) capabilities.Code {
	if err == nil {
		return ""
	}
	return capabilities.CodeOf(err)
}

func TestHiddenAnswersLikeUnknown(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}})
	s := &spy{}
	if err := reg.Register(s.echo("adminOnly", write, capabilities.Requirement{Role: capabilities.RoleAdmin})); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	_, hidden := reg.Invoke(t.Context(), user, "adminOnly", json.RawMessage(`{"text":"x"}`))
	_, unknown := reg.Invoke(t.Context(), user, "adminOnlx", json.RawMessage(`{"text":"x"}`))
	// The two answers differ only by the name the caller sent.
	if got, want := strings.Replace(hidden.Error(), "adminOnly", "NAME", 1), strings.Replace(unknown.Error(), "adminOnlx", "NAME", 1); got != want {
		t.Fatalf("hidden answers %q, unknown answers %q", got, want)
	}
	if reg.IsVisible(t.Context(), user, "adminOnly") {
		t.Fatal("hidden capability reported visible")
	}
	for _, c := range reg.Visible(t.Context(), user) {
		if c.Name == "adminOnly" {
			t.Fatal("hidden capability listed")
		}
	}
	if !reg.IsVisible(t.Context(), capabilitiestest.Admin("a1"), "adminOnly") {
		t.Fatal("admin cannot see admin capability")
	}
}

// TestVisibleMatchesInvoke proves discovery and invocation make one decision:
// for every caller shape, a capability is listed if and only if calling it
// gets past the guard.
func TestVisibleMatchesInvoke(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}, Features: flags{"beta": true}})
	s := &spy{}
	if err := reg.Register(
		s.echo("readAny", read, capabilities.Requirement{}),
		s.echo("writeOwn", write, capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}),
		s.echo("adminWrite", write, capabilities.Requirement{Role: capabilities.RoleAdmin}),
		s.echo("flagged", read, capabilities.Requirement{Feature: "alpha"}),
		s.echo("beta", read, capabilities.Requirement{Feature: "beta"}),
		s.echo("interactive", write, capabilities.Requirement{InteractiveOnly: true}),
	); err != nil {
		t.Fatal(err)
	}
	callers := map[string]capabilities.Caller{
		"user":       capabilitiestest.User("u"),
		"admin":      capabilitiestest.Admin("a"),
		"anonymous":  {},
		"failClosed": capabilities.FailClosed("f", nil),
	}
	for _, st := range []capabilities.AccountState{capabilities.AccountSuspended, capabilities.AccountDeleting} {
		c := capabilitiestest.Admin("s")
		c.State = st
		callers[st.String()] = c
	}
	bg := capabilitiestest.User("b")
	bg.Interactive = false
	callers["background"] = bg
	for label, caller := range callers {
		visible := map[string]bool{}
		var names []string
		for _, c := range reg.Visible(t.Context(), caller) {
			visible[c.Name] = true
			names = append(names, c.Name)
		}
		if got := reg.VisibleNames(t.Context(), caller); !reflect.DeepEqual(got, names) {
			t.Errorf("%s: VisibleNames %v, Visible %v", label, got, names)
		}
		for _, c := range reg.All() {
			_, err := reg.Invoke(t.Context(), caller, c.Name, json.RawMessage(`{"text":"x","query":"x"}`))
			passed := err == nil || capabilities.CodeOf(err) == capabilities.CodeInvalidInput
			if passed != visible[c.Name] {
				t.Errorf("%s: %s visible=%v but invoke err=%v", label, c.Name, visible[c.Name], err)
			}
		}
	}
}

func TestPanicRecovered(t *testing.T) {
	var logs strings.Builder
	reg := capabilities.NewRegistry(capabilities.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	err := reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "boom", Domain: "test", Description: "Panics.", Annotations: &read,
		Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
			panic("secret detail")
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.Invoke(t.Context(), capabilitiestest.User("u"), "boom", nil)
	var e *capabilities.Error
	if !errors.As(err, &e) || e.Code != capabilities.CodeInternal {
		t.Fatalf("err = %v, want internal", err)
	}
	if strings.Contains(e.Message, "secret") {
		t.Fatalf("message %q leaks the panic", e.Message)
	}
	if !strings.Contains(logs.String(), "secret detail") {
		t.Fatalf("panic not logged: %s", logs.String())
	}
}

func TestRegisterRefusesInvalid(t *testing.T) {
	s := &spy{}
	ok := s.echo("fine", read, capabilities.Requirement{})
	mod := func(f func(*capabilities.Capability)) capabilities.Capability {
		c := ok
		f(&c)
		return c
	}
	tests := map[string]capabilities.Capability{
		"snake name":     mod(func(c *capabilities.Capability) { c.Name = "not_camel" }),
		"upper name":     mod(func(c *capabilities.Capability) { c.Name = "Upper" }),
		"no description": mod(func(c *capabilities.Capability) { c.Description = "" }),
		"no annotations": mod(func(c *capabilities.Capability) { c.Annotations = nil }),
		"read-only delete": mod(func(c *capabilities.Capability) {
			c.Annotations = &capabilities.Annotations{ReadOnly: true, Destructive: true}
		}),
		"no domain":  mod(func(c *capabilities.Capability) { c.Domain = "" }),
		"no handler": mod(func(c *capabilities.Capability) { c.Handler = nil }),
		"unknown permission": mod(func(c *capabilities.Capability) {
			c.Requires.Permissions = []capabilities.Permission{"read:note:any"}
		}),
		"array input schema": mod(func(c *capabilities.Capability) { c.InputSchema = json.RawMessage(`{"type":"array"}`) }),
		"non-struct input": capabilities.Define(capabilities.Spec[string, echoOut]{
			Name: "str", Domain: "test", Description: "x", Annotations: &read,
			Handler: func(context.Context, *capabilities.Call, string) (echoOut, error) { return echoOut{}, nil },
		}),
	}
	for name, c := range tests {
		t.Run(name, func(t *testing.T) {
			reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true})
			if err := reg.Register(c); err == nil {
				t.Fatal("registered")
			}
			if len(reg.All()) != 0 {
				t.Fatal("refused capability was added")
			}
		})
	}
	t.Run("duplicate", func(t *testing.T) {
		reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true})
		if err := reg.Register(ok); err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(ok); err == nil {
			t.Fatal("registered twice")
		}
		if err := reg.Register(s.echo("other", read, capabilities.Requirement{}), s.echo("other", read, capabilities.Requirement{})); err == nil {
			t.Fatal("registered a duplicate within one call")
		}
		if len(reg.All()) != 1 {
			t.Fatalf("%d capabilities, want 1", len(reg.All()))
		}
	})
	t.Run("builtin name", func(t *testing.T) {
		reg := capabilities.NewRegistry(capabilities.Options{})
		if err := reg.Register(s.echo("whoami", read, capabilities.Requirement{})); err == nil {
			t.Fatal("shadowed a built-in")
		}
	})
}

func TestDefineSchemas(t *testing.T) {
	s := &spy{}
	c := s.echo("echo", read, capabilities.Requirement{})
	var in struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(c.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if in.Type != "object" || len(in.Properties) != 2 || !reflect.DeepEqual(in.Required, []string{"text"}) {
		t.Fatalf("input schema = %s", c.InputSchema)
	}
	if !strings.Contains(string(in.Properties["text"]), "what to echo") {
		t.Fatalf("description missing from %s", in.Properties["text"])
	}
	if !strings.Contains(string(c.OutputSchema), `"echo"`) {
		t.Fatalf("output schema = %s", c.OutputSchema)
	}
	free := capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "free", Domain: "test", Description: "x", Annotations: &read,
		Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) {
			return capabilities.TextResult("hi"), nil
		},
	})
	if free.OutputSchema != nil {
		t.Fatalf("free-form capability has output schema %s", free.OutputSchema)
	}
}

func TestBuiltins(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	s := &spy{}
	if err := reg.Register(
		s.echo("noteCreate", write, capabilities.Requirement{}),
		s.echo("noteList", read, capabilities.Requirement{}),
		s.echo("adminUserList", read, capabilities.Requirement{Role: capabilities.RoleAdmin}),
	); err != nil {
		t.Fatal(err)
	}
	user := capabilitiestest.User("u1")
	res, err := reg.Invoke(t.Context(), user, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	who := res.Structured.(capabilities.WhoamiOutput)
	if who.UserID != "u1" || !reflect.DeepEqual(who.Roles, []string{"user"}) || len(who.Permissions) == 0 {
		t.Fatalf("whoami = %+v", who)
	}

	search := func(c capabilities.Caller, q string) []string {
		res, err := reg.Invoke(t.Context(), c, "capabilitiesSearch", json.RawMessage(`{"query":"`+q+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range res.Structured.(capabilities.SearchOutput).Matches {
			names = append(names, m.Name)
		}
		return names
	}
	if got := search(user, "note"); !reflect.DeepEqual(got, []string{"noteCreate", "noteList"}) {
		t.Fatalf("search note = %v", got)
	}
	if got := search(user, "user list"); got != nil {
		t.Fatalf("user finds hidden capabilities: %v", got)
	}
	if got := search(capabilitiestest.Admin("a"), "user list"); !reflect.DeepEqual(got, []string{"adminUserList"}) {
		t.Fatalf("admin search = %v", got)
	}
}

func TestClientReachesHandler(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	err := reg.Register(capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: "chatty", Domain: "test", Description: "Reports progress.", Annotations: &read,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			if err := call.Progress(ctx, 1, 2, "half"); err != nil {
				return capabilities.Result{}, err
			}
			if _, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: "ok?"}); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("done"), nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	// Without a client, progress is a no-op and elicitation unsupported.
	_, err = reg.Invoke(t.Context(), capabilitiestest.User("u"), "chatty", nil)
	if capabilities.CodeOf(err) != capabilities.CodeUnsupported {
		t.Fatalf("err = %v, want unsupported", err)
	}
	fc := &fakeClient{}
	ctx := capabilities.WithClient(t.Context(), fc)
	if _, err := reg.Invoke(ctx, capabilitiestest.User("u"), "chatty", nil); err != nil {
		t.Fatal(err)
	}
	if fc.progress != "half" || fc.elicited != "ok?" {
		t.Fatalf("client saw %+v", fc)
	}
}

type fakeClient struct{ progress, elicited string }

func (f *fakeClient) Progress(_ context.Context, _, _ float64, msg string) error {
	f.progress = msg
	return nil
}
func (f *fakeClient) Log(context.Context, capabilities.LogLevel, string, any) error { return nil }
func (f *fakeClient) Elicit(_ context.Context, r capabilities.ElicitRequest) (capabilities.ElicitResult, error) {
	f.elicited = r.Message
	return capabilities.ElicitResult{Action: "accept"}, nil
}
func (f *fakeClient) Sample(context.Context, capabilities.SampleRequest) (capabilities.SampleResult, error) {
	return capabilities.SampleResult{}, capabilities.ErrUnsupported
}

func TestHashSubject(t *testing.T) {
	a := capabilities.NewRegistry(capabilities.Options{AuditKey: []byte("k1")})
	b := capabilities.NewRegistry(capabilities.Options{AuditKey: []byte("k2")})
	if a.HashSubject("u1") == b.HashSubject("u1") {
		t.Fatal("hash does not depend on the key")
	}
	if a.HashSubject("u1") != a.HashSubject("u1") || a.HashSubject("u1") == a.HashSubject("u2") {
		t.Fatal("hash is not a stable function of the id")
	}
	if len(a.HashSubject("u1")) != 32 {
		t.Fatalf("hash %q is not 128 bits of hex", a.HashSubject("u1"))
	}
}

func TestNullArgumentsAreAbsent(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	for _, args := range []string{"", "null", " null ", "{}"} {
		if _, err := reg.Invoke(t.Context(), capabilitiestest.User("u"), "whoami", json.RawMessage(args)); err != nil {
			t.Errorf("args %q: %v", args, err)
		}
	}
	if _, err := reg.Invoke(t.Context(), capabilitiestest.User("u"), "whoami", json.RawMessage(`[]`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
		t.Errorf("array arguments: %v", err)
	}
}

func TestNamesOption(t *testing.T) {
	s := &spy{}
	snake := s.echo("snake_name", read, capabilities.Requirement{})
	if err := capabilities.NewRegistry(capabilities.Options{}).Register(snake); err == nil {
		t.Fatal("snake_case accepted by default")
	}
	reg := capabilities.NewRegistry(capabilities.Options{Names: regexp.MustCompile(`^[a-z][a-z_]*$`)})
	if err := reg.Register(snake); err != nil {
		t.Fatal(err)
	}
}

// TestAdmitMatchesInvokeWhileDeleting: Admit decides for an account being
// deleted exactly as Invoke does: what finishes the deletion is admitted,
// a session-only read and an ordinary write are not.
func TestAdmitMatchesInvokeWhileDeleting(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}})
	s := &spy{}
	if err := reg.Register(
		s.echo("finishDeletion", write, capabilities.Requirement{DuringDeletion: true}),
		s.echo("sessionRead", read, capabilities.Requirement{SessionOnly: true}),
		s.echo("readAny", read, capabilities.Requirement{}),
		s.echo("writeAny", write, capabilities.Requirement{}),
	); err != nil {
		t.Fatal(err)
	}
	c := capabilitiestest.User("u1")
	c.State, c.Session = capabilities.AccountDeleting, true
	for _, name := range []string{"finishDeletion", "sessionRead", "readAny", "writeAny"} {
		_, invokeErr := reg.Invoke(t.Context(), c, name, json.RawMessage(`{"text":"x"}`))
		admitErr := reg.Admit(t.Context(), c, name)
		if codeOrEmpty(invokeErr) != codeOrEmpty(admitErr) {
			t.Errorf("%s: Invoke %v, Admit %v", name, invokeErr, admitErr)
		}
	}
}

// TestVisibilityKey: two callers share a key only when VisibleNames
// answers them the same for the same registry, and there is no key once a
// capability depends on a feature flag.
func TestVisibilityKey(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}})
	s := &spy{}
	if err := reg.Register(
		s.echo("readAny", read, capabilities.Requirement{}),
		s.echo("writeOwn", write, capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}),
		s.echo("adminWrite", write, capabilities.Requirement{Role: capabilities.RoleAdmin}),
		s.echo("interactive", write, capabilities.Requirement{InteractiveOnly: true}),
	); err != nil {
		t.Fatal(err)
	}
	base := capabilitiestest.User("u")
	variants := map[string]func(*capabilities.Caller){
		"same":             func(*capabilities.Caller) {},
		"role":             func(c *capabilities.Caller) { c.Roles = append(c.Roles, capabilities.RoleAdmin) },
		"no roles":         func(c *capabilities.Caller) { c.Roles = nil },
		"permission":       func(c *capabilities.Caller) { c.Permissions = nil },
		"suspended":        func(c *capabilities.Caller) { c.State = capabilities.AccountSuspended },
		"deleting":         func(c *capabilities.Caller) { c.State = capabilities.AccountDeleting },
		"background":       func(c *capabilities.Caller) { c.Interactive = false },
		"web session":      func(c *capabilities.Caller) { c.Session = true },
		"confined":         func(c *capabilities.Caller) { c.Only = []string{"readAny"} },
		"confined to none": func(c *capabilities.Caller) { c.Only = []string{} },
		"other user":       func(c *capabilities.Caller) { c.UserID = "v" },
		// two roles, and one role whose name reads like those two joined
		"two roles":   func(c *capabilities.Caller) { c.Roles = append(c.Roles, "x") },
		"joined role": func(c *capabilities.Caller) { c.Roles = []string{strings.Join(append(c.Roles, "x"), "\x00")} },
	}
	keyOf := func(c capabilities.Caller) uint64 {
		k, ok := reg.VisibilityKey(c)
		if !ok {
			t.Fatal("no key without flagged capabilities")
		}
		return k
	}
	baseKey := keyOf(base)
	seenKeys := map[uint64]string{}
	for label, change := range variants {
		c := base
		c.Roles = slices.Clone(base.Roles)
		c.Permissions = slices.Clone(base.Permissions)
		change(&c)
		k := keyOf(c)
		if (k == baseKey) != (label == "same") {
			t.Errorf("%s: key equal to the base caller's = %v", label, k == baseKey)
		}
		if other, dup := seenKeys[k]; dup {
			t.Errorf("%s and %s share a key", label, other)
		}
		seenKeys[k] = label
	}

	// Registering changes every key.
	if err := reg.Register(s.echo("later", read, capabilities.Requirement{})); err != nil {
		t.Fatal(err)
	}
	if keyOf(base) == baseKey {
		t.Error("key unchanged after a registration")
	}
	// A capability behind a feature flag: the visible set can change at
	// any time, so there is no key.
	if err := reg.Register(s.echo("flagged", read, capabilities.Requirement{Feature: "alpha"})); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.VisibilityKey(base); ok {
		t.Error("a key although a capability depends on a feature flag")
	}
}
