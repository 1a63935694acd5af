package integrations_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/storage/storagetest"
)

func invoke[T any](t *testing.T, reg *capabilities.Registry, c capabilities.Caller, name string, in any) (T, error) {
	t.Helper()
	var out T
	raw, _ := json.Marshal(in)
	res, err := reg.Invoke(t.Context(), c, name, raw)
	if err != nil {
		return out, err
	}
	b, _ := json.Marshal(res.Structured)
	return out, json.Unmarshal(b, &out)
}

// Through the registry: an agent lists and disconnects its own
// connections only; starting or finishing a connection is for the
// person's web session alone; bob cannot see, use or remove alice's.
func TestCapabilities(t *testing.T) {
	storagetest.EachDialect(t, func(t *testing.T, s *storage.Store) {
		f := newFakeProvider(t)
		svc := newService(t, s, provider(f, false))
		reg := capabilities.NewRegistry(capabilities.Options{Logger: quiet()})
		if err := reg.Register(svc.Capabilities()...); err != nil {
			t.Fatal(err)
		}
		alice, bob := addUser(t, s, "alice"), addUser(t, s, "bob")
		web := alice
		web.Session = true

		// An agent (no web session) cannot start a connection.
		if _, err := invoke[integrations.StartOutput](t, reg, alice, "connectionConnectStart", integrations.StartInput{Provider: "acme", Binding: binding}); err == nil {
			t.Fatal("an agent started a connection")
		}
		start, err := invoke[integrations.StartOutput](t, reg, web, "connectionConnectStart", integrations.StartInput{Provider: "acme", Binding: binding})
		if err != nil || !strings.HasPrefix(start.AuthorizationURL, f.srv.URL+"/authorize?") {
			t.Fatalf("start: %+v %v", start, err)
		}
		q := f.authorize(t, start.AuthorizationURL)
		conn, err := invoke[integrations.Connection](t, reg, web, "connectionConnectFinish", integrations.FinishInput{Binding: binding, Provider: "acme", State: q.Get("state"), Code: q.Get("code")})
		if err != nil || conn.Name != "acme" {
			t.Fatalf("finish: %+v %v", conn, err)
		}
		token := f.lastAccessToken()

		list, err := invoke[integrations.ListOutput](t, reg, alice, "connectionList", struct{}{})
		if err != nil || len(list.Connections) != 1 || len(list.Providers) != 1 || list.Providers[0].APIHosts[0] != "api.acme.example" {
			t.Fatalf("alice's list: %+v %v", list, err)
		}
		if b, _ := json.Marshal(list); strings.Contains(string(b), token) {
			t.Fatal("connectionList shows the token")
		}
		list, err = invoke[integrations.ListOutput](t, reg, bob, "connectionList", struct{}{})
		if err != nil || len(list.Connections) != 0 {
			t.Fatalf("bob's list: %+v %v", list, err)
		}
		_, err = invoke[integrations.Disconnected](t, reg, bob, "connectionDisconnect", integrations.NameInput{Name: "acme"})
		var ce *capabilities.Error
		if !errors.As(err, &ce) || ce.Code != capabilities.CodeNotFound {
			t.Fatalf("bob disconnects alice's: %v", err)
		}
		if _, err := svc.Use(t.Context(), ownerOf(bob), "acme"); !errors.Is(err, integrations.ErrNotFound) {
			t.Fatalf("bob uses alice's: %v", err)
		}
		if len(f.revocations()) != 0 {
			t.Fatal("bob's attempt revoked alice's token")
		}
		d, err := invoke[integrations.Disconnected](t, reg, alice, "connectionDisconnect", integrations.NameInput{Name: "acme"})
		if err != nil || !d.Disconnected || !d.Revoked {
			t.Fatalf("alice disconnects: %+v %v", d, err)
		}
	})
}
