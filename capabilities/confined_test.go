package capabilities_test

import (
	"context"
	"slices"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
)

// TestConfinedCaller: a caller with Only (a workspace API key) sees and
// runs the named capabilities and nothing else, resources included.
func TestConfinedCaller(t *testing.T) {
	r := capabilities.NewRegistry(capabilities.Options{})
	var s spy
	open := capabilities.Annotations{ReadOnly: true}
	if err := r.Register(s.echo("allowedEcho", open, capabilities.Requirement{}), s.echo("otherEcho", open, capabilities.Requirement{})); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterResource(capabilities.Resource{URI: "test://public", Name: "public", Read: func(_ context.Context, _ *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
		return []capabilities.ResourceContents{{URI: uri, Text: "hello"}}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	c := capabilities.Caller{UserID: "u1", State: capabilities.AccountActive, AllScopes: true, Only: []string{"allowedEcho"}}
	if got := r.VisibleNames(context.Background(), c); !slices.Equal(got, []string{"allowedEcho"}) {
		t.Fatalf("visible = %v", got)
	}
	if _, err := r.Invoke(context.Background(), c, "allowedEcho", []byte(`{"text":"x"}`)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"otherEcho", "whoami"} {
		_, err := r.Invoke(context.Background(), c, name, []byte(`{"text":"x"}`))
		if capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if s.runs != 1 {
		t.Fatalf("handler ran %d times", s.runs)
	}
	if _, err := r.ReadResource(context.Background(), c, "test://public"); capabilities.CodeOf(err) != capabilities.CodeNotFound {
		t.Fatalf("resource read by a confined caller: %v", err)
	}
	if len(r.VisibleResources(context.Background(), c)) != 0 {
		t.Fatal("resources visible to a confined caller")
	}
	c.Only = nil
	if _, err := r.ReadResource(context.Background(), c, "test://public"); err != nil {
		t.Fatal(err)
	}
}
