package capabilities_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// Two callers with the same VisibilityKey see the same capabilities, over
// every field the visibility checks read; registering changes every key;
// a capability behind a feature flag leaves no key at all.
func TestVisibilityKeyMatchesVisibleSet(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{Auditor: &capabilitiestest.Auditor{}})
	s := &spy{}
	if err := reg.Register(
		s.echo("readAny", read, capabilities.Requirement{}),
		s.echo("writeAny", write, capabilities.Requirement{}),
		s.echo("writeOwn", write, capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}),
		s.echo("adminRead", read, capabilities.Requirement{Role: capabilities.RoleAdmin}),
		s.echo("interactive", write, capabilities.Requirement{InteractiveOnly: true}),
		s.echo("sessionOnly", read, capabilities.Requirement{SessionOnly: true}),
		s.echo("scoped", read, capabilities.Requirement{Scopes: []string{"x"}}),
	); err != nil {
		t.Fatal(err)
	}
	var callers []capabilities.Caller
	for _, base := range []capabilities.Caller{capabilitiestest.User("u"), capabilitiestest.Admin("u"), {}, capabilities.FailClosed("u", nil)} {
		for _, state := range []capabilities.AccountState{capabilities.AccountActive, capabilities.AccountDeleting, capabilities.AccountSuspended} {
			for _, only := range [][]string{nil, {}, {"readAny"}, {"writeAny"}, {"readAny", "writeAny"}} {
				for _, flags := range []int{0, 1, 2, 3} {
					c := base
					c.State, c.Only = state, only
					c.Interactive, c.Session = flags&1 != 0, flags&2 != 0
					callers = append(callers, c)
				}
			}
		}
	}
	noPerm := capabilitiestest.User("u")
	noPerm.Permissions = nil
	roleAsPerm := capabilitiestest.User("u")
	roleAsPerm.Roles, roleAsPerm.Permissions = []string{string(capabilities.UpdateUserOwn)}, nil
	other := capabilitiestest.User("v")
	callers = append(callers, noPerm, roleAsPerm, other)

	keys := map[uint64][]string{}
	for _, c := range callers {
		key, ok := reg.VisibilityKey(c)
		if !ok {
			t.Fatalf("no key for %+v", c)
		}
		names := reg.VisibleNames(t.Context(), c)
		if seen, dup := keys[key]; dup && !reflect.DeepEqual(seen, names) {
			t.Fatalf("key %x stands for %v and %v (caller %+v)", key, seen, names, c)
		}
		keys[key] = names
	}
	// Distinct callers get distinct keys (no list of roles, permissions or
	// confinement can be mistaken for another).
	if n := len(keys); n != len(callers) {
		distinct := map[string]bool{}
		for _, c := range callers {
			distinct[fmt.Sprintf("%#v", c)] = true
		}
		if n != len(distinct) {
			t.Fatalf("%d keys for %d distinct callers", n, len(distinct))
		}
	}

	before, _ := reg.VisibilityKey(callers[0])
	if err := reg.Register(s.echo("later", read, capabilities.Requirement{})); err != nil {
		t.Fatal(err)
	}
	if after, _ := reg.VisibilityKey(callers[0]); after == before {
		t.Fatal("registering kept the key")
	}
	if err := reg.Register(s.echo("flagged", read, capabilities.Requirement{Feature: "f"})); err != nil {
		t.Fatal(err)
	}
	if key, ok := reg.VisibilityKey(callers[0]); ok || key != 0 {
		t.Fatalf("a flagged capability left the key %x", key)
	}
}
