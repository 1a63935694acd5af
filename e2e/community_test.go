package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// communityCall calls a tool over MCP and decodes its structured answer,
// failing on a refusal.
func communityCall[T any](t *testing.T, c *enclavetest.Client, name string, args any) T {
	t.Helper()
	res, err := c.Call(name, args)
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %s", name, err, res.Text)
	}
	var out T
	if err := res.Decode(&out); err != nil {
		t.Fatalf("%s answered %s: %v", name, res.Structured, err)
	}
	return out
}

// communityGreet runs the caller's export pkg_<pkg>_greet and returns who
// ran it.
func communityGreet(t *testing.T, c *enclavetest.Client, pkg string) string {
	t.Helper()
	out := communityCall[struct {
		Result struct{ Hello, RunBy string }
	}](t, c, "pkg_"+pkg+"_greet", map[string]any{"name": "ann"})
	if out.Result.Hello != "ann" {
		t.Fatalf("pkg_%s_greet answered %+v", pkg, out)
	}
	return out.Result.RunBy
}

// Through real MCP sessions with real OAuth tokens, on both dialects:
// alice saves and publishes a package; bob finds it, forks it and runs his
// fork (as himself); alice unpublishes, then her account is deleted, and
// bob's fork keeps working with its provenance; the admin's activity
// projection names bob's fork without his email.
func TestCommunityForkJourneyOverMCP(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob, ada := s.CreateUser(t, "alice"), s.CreateUser(t, "bob"), s.CreateUser(t, "ada", capabilities.RoleAdmin)
		a, b, d := alice.MCP(t), bob.MCP(t), ada.MCP(t)

		communityCall[json.RawMessage](t, a, "packageSave", map[string]any{
			"name": "greeter",
			"files": map[string]string{"main.js": `export async function greet(args) {
  const me = await codemode.whoami({});
  return {hello: args.name, runBy: me.username};
}`},
			"manifest": map[string]any{"description": "Friendly greetings", "exports": map[string]any{
				"greet": map[string]any{"description": "Greets someone.", "readOnly": true}}},
		})
		pub := communityCall[struct{ ID, Author string }](t, a, "communityPublish", map[string]any{"package": "greeter", "readme": "Say **hello**."})
		if pub.Author != "alice" {
			t.Fatalf("published %+v", pub)
		}
		found := communityCall[struct{ Listings []struct{ ID string } }](t, b, "communitySearch", map[string]any{"query": "friendly"})
		if len(found.Listings) != 1 || found.Listings[0].ID != pub.ID {
			t.Fatalf("search %+v", found)
		}
		// Bob cannot run alice's package in place: only his own exports exist for him.
		if res, err := b.Call("pkg_greeter_greet", map[string]any{"name": "ann"}); err == nil && !res.IsError {
			t.Fatalf("bob ran alice's package before forking: %s", res.Structured)
		}
		fork := communityCall[struct{ Package string }](t, b, "communityFork", map[string]any{"listing": pub.ID})
		if fork.Package != "greeter" {
			t.Fatalf("fork %+v", fork)
		}
		b = bob.MCP(t) // a new session sees the new tools
		if who := communityGreet(t, b, "greeter"); who != "bob" {
			t.Fatalf("bob's fork ran as %q", who)
		}

		communityCall[json.RawMessage](t, a, "communityUnpublish", map[string]any{"listing": pub.ID})
		if who := communityGreet(t, b, "greeter"); who != "bob" {
			t.Fatalf("after unpublishing, bob's fork ran as %q", who)
		}
		if res, err := s.Lifecycle().Delete(context.Background(), alice.Owner()); err != nil || !res.Completed {
			t.Fatalf("delete alice: %+v %v", res, err)
		}
		if res, err := a.Call("communityListOwn", map[string]any{}); err == nil && !res.IsError {
			t.Fatal("alice's token still works after her deletion")
		}
		if who := communityGreet(t, b, "greeter"); who != "bob" {
			t.Fatalf("after alice's deletion, bob's fork ran as %q", who)
		}
		own := communityCall[struct {
			Forks []struct {
				Listing, ListingName string
				ListingRemoved       bool
			}
		}](t, b, "communityListOwn", map[string]any{})
		if len(own.Forks) != 1 || own.Forks[0].Listing != pub.ID || own.Forks[0].ListingName != "greeter" || !own.Forks[0].ListingRemoved {
			t.Fatalf("bob's forks %+v", own.Forks)
		}

		res, err := d.Call("adminCommunityActivityList", map[string]any{})
		if err != nil || res.IsError {
			t.Fatalf("activity: %v %s", err, res.Text)
		}
		if !strings.Contains(string(res.Structured), `"actorUsername":"bob"`) || strings.Contains(string(res.Structured), "@example.com") || strings.Contains(string(res.Structured), bob.StableID) {
			t.Fatalf("activity %s", res.Structured)
		}
		// Users do not see the admins' tools.
		if res, err := b.Call("adminCommunityActivityList", map[string]any{}); err == nil && !res.IsError {
			t.Fatal("bob listed the community's activity")
		}
	})
}
