package e2e

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/memory"
)

// Memories over MCP: the capabilities, the memory:// resources and the
// memories prompt answer each user with their own memories only; the
// account export carries them without vectors, and account deletion
// removes them.
func TestMemoryOverMCP(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		a, b := alice.MCP(t), bob.MCP(t)

		res, err := a.Call("memorySave", map[string]any{"text": "Alice's favourite colour is teal", "tags": []string{"preferences"}, "source": "onboarding chat"})
		if err != nil || res.IsError {
			t.Fatalf("save: %v %s", err, res.Text)
		}
		var m memory.Memory
		if err := res.Decode(&m); err != nil || m.Writer != "agent" {
			t.Fatalf("saved %+v %v", m, err)
		}
		res, _ = a.Call("memorySearch", map[string]any{"query": "favourite colour?"})
		var found memory.SearchOutput
		_ = res.Decode(&found)
		if len(found.Memories) != 1 || found.Memories[0].ID != m.ID {
			t.Fatalf("search %s", res.Text)
		}
		for _, name := range []string{"memoryGet", "memoryUpdate", "memoryDelete"} {
			args := map[string]any{"id": m.ID}
			if name == "memoryUpdate" {
				args["text"] = "bob's now"
			}
			res, err := b.Call(name, args)
			if err != nil {
				t.Fatal(err)
			}
			if name == "memoryDelete" {
				if res.IsError || !strings.Contains(res.Text, `"deleted":false`) {
					t.Fatalf("bob's delete: %s", res.Text)
				}
				continue
			}
			if !res.IsError || !strings.Contains(res.Text, "not found") {
				t.Fatalf("bob's %s: %s", name, res.Text)
			}
		}
		res, _ = b.Call("memorySearch", map[string]any{"query": "Alice favourite colour teal", "status": "all"})
		if strings.Contains(res.Text, m.ID) {
			t.Fatalf("bob's search found alice's memory: %s", res.Text)
		}

		// Resources and the prompt, through the MCP methods.
		raw, err := a.Request("resources/list", map[string]any{})
		if err != nil || !bytes.Contains(raw, []byte(memory.IndexURI)) {
			t.Fatalf("resources/list %s %v", raw, err)
		}
		raw, err = a.Request("resources/templates/list", map[string]any{})
		if err != nil || !bytes.Contains(raw, []byte(memory.ResourceTemplate)) {
			t.Fatalf("resources/templates/list %s %v", raw, err)
		}
		raw, err = a.Request("resources/read", map[string]any{"uri": memory.IndexURI})
		if err != nil || !bytes.Contains(raw, []byte(memory.ResourceURI(m.ID))) {
			t.Fatalf("alice's index %s %v", raw, err)
		}
		raw, err = a.Request("resources/read", map[string]any{"uri": memory.ResourceURI(m.ID)})
		if err != nil || !bytes.Contains(raw, []byte("teal")) {
			t.Fatalf("alice reads her memory: %s %v", raw, err)
		}
		raw, err = b.Request("resources/read", map[string]any{"uri": memory.ResourceURI(m.ID)})
		if err == nil || bytes.Contains(raw, []byte("teal")) {
			t.Fatalf("bob read alice's memory: %s %v", raw, err)
		}
		raw, err = b.Request("resources/read", map[string]any{"uri": memory.IndexURI})
		if err != nil || bytes.Contains(raw, []byte(m.ID)) {
			t.Fatalf("bob's index %s %v", raw, err)
		}
		raw, err = a.Request("prompts/get", map[string]any{"name": memory.PromptName, "arguments": map[string]string{"topic": "colour"}})
		if err != nil || !bytes.Contains(raw, []byte("teal")) {
			t.Fatalf("alice's prompt %s %v", raw, err)
		}
		raw, err = b.Request("prompts/get", map[string]any{"name": memory.PromptName, "arguments": map[string]string{"query": "colour teal"}})
		if err != nil || bytes.Contains(raw, []byte(m.ID)) {
			t.Fatalf("bob's prompt %s %v", raw, err)
		}

		// The export holds the memory, no vectors; deletion removes it.
		ctx := t.Context()
		lc := s.Server.Lifecycle()
		man, err := lc.Manifest(ctx, alice.Owner())
		if err != nil {
			t.Fatal(err)
		}
		var sections struct {
			Sections []struct{ Name string }
			Excluded []string
		}
		manifest, _ := json.Marshal(man)
		_ = json.Unmarshal(manifest, &sections)
		var names []string
		for _, sec := range sections.Sections {
			names = append(names, sec.Name)
		}
		if !slices.Contains(names, "sql:memories") || slices.Contains(names, "sql:memory_vectors") || !slices.Contains(sections.Excluded, "sql:memory_vectors") {
			t.Fatalf("manifest %s", manifest)
		}
		page, err := lc.Section(ctx, alice.Owner(), "sql:memories", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if sec, _ := json.Marshal(page); !bytes.Contains(sec, []byte("teal")) {
			t.Fatalf("export section %s", sec)
		}
		if _, err := lc.Delete(ctx, alice.Owner()); err != nil {
			t.Fatal(err)
		}
		var left int
		if err := s.Server.Store().DB.NewRaw("SELECT count(*) FROM memories WHERE user_id = ?", alice.ID).Scan(ctx, &left); err != nil || left != 0 {
			t.Fatalf("memories left after deletion: %d %v", left, err)
		}
	})
}

// Config.Memory.Disabled registers none of it.
func TestMemoryDisabled(t *testing.T) {
	s := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{Memory: memory.Options{Disabled: true}}})
	if s.Server.Memory() != nil {
		t.Fatal("a memory service with memories off")
	}
	names, err := s.CreateUser(t, "alice").MCP(t).Tools()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "memory") }) {
		t.Fatalf("tools %v", names)
	}
}
