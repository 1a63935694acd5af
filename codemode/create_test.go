package codemode_test

import (
	"context"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/enclavetest"
)

// Create saves a new package only: an existing name (the owner's) is a
// conflict that adds no version, while another user's package of the
// same name does not stand in the way.
func TestCreateIsCreateOnly(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		ctx := context.Background()
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		files := map[string]string{"main.js": "export const f = async () => 1;"}
		m := codemode.Manifest{Description: "first", Exports: map[string]codemode.Export{"f": {Description: "f"}}}
		v, err := s.CodeMode().Create(ctx, alice.Caller(t), alice.Owner(), "tool", files, m)
		if err != nil || v.Version != 1 {
			t.Fatalf("create: %+v %v", v, err)
		}
		m.Description = "second"
		if _, err := s.CodeMode().Create(ctx, alice.Caller(t), alice.Owner(), "tool", files, m); capabilities.CodeOf(err) != capabilities.CodeConflict {
			t.Fatalf("a second create: %v", err)
		}
		if _, err := s.CodeMode().Get(ctx, alice.Owner(), "tool", 2); capabilities.CodeOf(err) != capabilities.CodeNotFound {
			t.Fatalf("a refused create added a version: %v", err)
		}
		if v, err := s.CodeMode().Create(ctx, bob.Caller(t), bob.Owner(), "tool", files, m); err != nil || v.Version != 1 {
			t.Fatalf("bob's create of the same name: %+v %v", v, err)
		}
		if v, err := s.CodeMode().Save(ctx, alice.Caller(t), alice.Owner(), "tool", files, m); err != nil || v.Version != 2 {
			t.Fatalf("save after create: %+v %v", v, err)
		}
	})
}
