package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// ownCaps is a provider whose capabilities are kept per user id.
type ownCaps struct {
	mu   sync.Mutex
	reg  *capabilities.Registry
	caps map[string][]capabilities.Capability
	gen  map[string]uint64
	fail error
	runs int
}

func (p *ownCaps) add(t *testing.T, user, name string, req capabilities.Requirement) {
	t.Helper()
	c, err := p.reg.Compile(capabilities.Define(capabilities.Spec[echoIn, echoOut]{
		Name: name, Domain: "test", Description: "An own echo.", Annotations: &read, Requires: req,
		Handler: func(_ context.Context, call *capabilities.Call, in echoIn) (echoOut, error) {
			p.mu.Lock()
			p.runs++
			p.mu.Unlock()
			return echoOut{Echo: call.Caller.UserID + ":" + in.Text}, nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.caps[user] = append(p.caps[user], c)
	p.gen[user]++
}

func (p *ownCaps) Own(_ context.Context, c capabilities.Caller) ([]capabilities.Capability, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.caps[c.UserID]), p.fail
}

func (p *ownCaps) LookupOwn(_ context.Context, c capabilities.Caller, name string) (capabilities.Capability, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return capabilities.Capability{}, false, p.fail
	}
	for _, x := range p.caps[c.UserID] {
		if x.Name == name {
			return x, true, nil
		}
	}
	return capabilities.Capability{}, false, nil
}

func (p *ownCaps) Generation(user string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen[user]
}

func TestProviderCapabilitiesAreTheirOwnersAlone(t *testing.T) {
	audit := &capabilitiestest.Auditor{}
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: audit})
	p := &ownCaps{reg: reg, caps: map[string][]capabilities.Capability{}, gen: map[string]uint64{}}
	if err := reg.AddProvider("own_", p); err != nil {
		t.Fatal(err)
	}
	alice, bob := capabilitiestest.User("alice"), capabilitiestest.User("bob")
	keyBefore, _ := reg.VisibilityKey(alice)
	p.add(t, "alice", "own_echo", capabilities.Requirement{})
	p.add(t, "alice", "own_admin", capabilities.Requirement{Role: capabilities.RoleAdmin})
	ctx := context.Background()

	if got := reg.VisibleNames(ctx, alice); !slices.Contains(got, "own_echo") || slices.Contains(got, "own_admin") {
		t.Fatalf("alice sees %v", got)
	}
	if !slices.IsSorted(reg.VisibleNames(ctx, alice)) {
		t.Fatal("visible names are not sorted")
	}
	if got := reg.VisibleNames(ctx, bob); slices.Contains(got, "own_echo") {
		t.Fatalf("bob sees alice's capability: %v", got)
	}
	if k, _ := reg.VisibilityKey(alice); k == keyBefore {
		t.Fatal("the visibility key did not change with the provider's generation")
	}
	res, err := reg.Invoke(ctx, alice, "own_echo", json.RawMessage(`{"text":"hi"}`))
	if err != nil || res.Structured.(echoOut).Echo != "alice:hi" {
		t.Fatalf("alice's call: %+v %v", res, err)
	}
	if _, err := reg.Invoke(ctx, alice, "own_echo", json.RawMessage(`{"text":1}`)); capabilities.CodeOf(err) != capabilities.CodeInvalidInput {
		t.Fatalf("the input schema was not applied: %v", err)
	}
	_, errBob := reg.Invoke(ctx, bob, "own_echo", json.RawMessage(`{"text":"hi"}`))
	_, errUnknown := reg.Invoke(ctx, bob, "own_nothing", json.RawMessage(`{"text":"hi"}`))
	if errBob == nil || strings.ReplaceAll(errBob.Error(), "own_echo", "X") != strings.ReplaceAll(errUnknown.Error(), "own_nothing", "X") {
		t.Fatalf("bob's answer %v differs from an unknown name's %v", errBob, errUnknown)
	}
	if _, err := reg.Invoke(ctx, alice, "own_admin", nil); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Fatalf("a requirement of an own capability was not applied: %v", err)
	}
	confined := alice
	confined.Only = []string{"whoami"}
	if reg.IsVisible(ctx, confined, "own_echo") {
		t.Fatal("a confined credential sees an own capability")
	}
	if p.runs != 1 {
		t.Fatalf("handler ran %d times, want 1", p.runs)
	}
	var denied []string
	for _, d := range audit.Denials() {
		denied = append(denied, d.Name+":"+string(d.Reason))
	}
	for _, want := range []string{"own_echo:unknown", "own_admin:role"} {
		if !slices.Contains(denied, want) {
			t.Errorf("denial %s not audited (%v)", want, denied)
		}
	}

	p.fail = errors.New("provider down")
	if _, err := reg.Invoke(ctx, alice, "own_echo", nil); capabilities.CodeOf(err) != capabilities.CodeInternal {
		t.Fatalf("a failing provider: %v", err)
	}
	if slices.Contains(reg.VisibleNames(ctx, alice), "own_echo") {
		t.Fatal("a failing provider's capabilities stay visible")
	}
}

func TestProviderPrefixIsReserved(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	s := &spy{}
	if err := reg.AddProvider("Pkg", &ownCaps{}); err == nil {
		t.Fatal("a prefix without _ was accepted")
	}
	if err := reg.AddProvider("pkg_", &ownCaps{reg: reg}); err != nil {
		t.Fatal(err)
	}
	if err := reg.AddProvider("pk_", &ownCaps{}); err != nil {
		t.Fatal(err) // no overlap: "pk_" does not prefix "pkg_"
	}
	if err := reg.AddProvider("pkg_x_", &ownCaps{}); err == nil {
		t.Fatal("an overlapping prefix was accepted")
	}
	snake := capabilities.NewRegistry(capabilities.Options{Names: regexp.MustCompile(`^[a-z_]+$`)})
	if err := snake.Register(s.echo("tool_y", read, capabilities.Requirement{})); err != nil {
		t.Fatal(err)
	}
	if err := snake.AddProvider("tool_", &ownCaps{}); err == nil {
		t.Fatal("a prefix over a registered name was accepted")
	}
	if err := snake.AddProvider("mine_", &ownCaps{}); err != nil {
		t.Fatal(err)
	}
	if err := snake.Register(s.echo("mine_x", read, capabilities.Requirement{})); err == nil {
		t.Fatal("registered a name under a provider's prefix")
	}
	if _, err := reg.Compile(s.echo("other_name", read, capabilities.Requirement{})); err == nil {
		t.Fatal("compiled a name under no provider")
	}
	if _, err := reg.Compile(s.echo("pkg_a b", read, capabilities.Requirement{})); err == nil {
		t.Fatal("compiled a name with a space")
	}
}
