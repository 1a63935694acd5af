package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/codemode"
	"github.com/enclave-mcp/enclave/codemode/sandbox"
	"github.com/enclave-mcp/enclave/enclavetest"
	"github.com/enclave-mcp/enclave/feedback"
	"github.com/enclave-mcp/enclave/memory"
	"github.com/enclave-mcp/enclave/workspaces"
)

// schemaNode is one place in a capability's schema.
type schemaNode struct {
	capability, side, path string // side is "input" or "output"; path like .ops[].op
	schema                 map[string]any
	name                   string // the property name, when the node is a property
}

// walkSchema calls fn for every schema reachable from s (properties, array
// items, map values).
func walkSchema(capability, side string, raw json.RawMessage, fn func(n schemaNode)) {
	var s map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return
	}
	var walk func(s map[string]any, path, name string)
	walk = func(s map[string]any, path, name string) {
		fn(schemaNode{capability: capability, side: side, path: path, schema: s, name: name})
		props, _ := s["properties"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(props)) {
			if p, ok := props[k].(map[string]any); ok {
				walk(p, path+"."+k, k)
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(items, path+"[]", "")
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			walk(ap, path+"{}", "")
		}
	}
	walk(s, "", "")
}

var camelCase = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// closedNames are property names that, for a string, name a closed set in
// every built-in capability: each such property must carry an enum, unless
// listed in openSets.
var closedNames = map[string]bool{
	"status": true, "kind": true, "category": true, "result": true, "state": true, "level": true,
	"mode": true, "op": true, "method": true, "role": true, "maxRole": true, "limit": true,
	"lastStatus": true, "writer": true,
}

// openSets are the properties named like a closed set whose values are
// open, and why.
var openSets = map[string]string{
	"adminRoleAssign input .role":                  "roles are the embedder's to define",
	"adminRoleRemove input .role":                  "roles are the embedder's to define",
	"adminUserList input .role":                    "roles are the embedder's to define",
	"adminFeatureSet input .role":                  "roles are the embedder's to define",
	"adminFeatureSet output .role":                 "roles are the embedder's to define",
	"adminFeatureList output .flags[].role":        "roles are the embedder's to define",
	"memoryGet output .writer":                     "credential:<kind> writers are open",
	"memorySave output .writer":                    "credential:<kind> writers are open",
	"memoryUpdate output .writer":                  "credential:<kind> writers are open",
	"memoryList output .memories[].writer":         "credential:<kind> writers are open",
	"memorySearch output .memories[].writer":       "credential:<kind> writers are open",
	"adminAuditLogQuery output .events[].category": "an embedder may record events of its own categories",
	"workspaceExport output .events[].op":          "op names are the embedder's to define",
}

// closedSets are the closed sets the built-in capabilities document, with
// their values.
var closedSets = func() map[string][]string {
	fb := []string{feedback.StatusOpen, feedback.StatusTriaged, feedback.StatusResolved, feedback.StatusDismissed}
	roles := []string{string(workspaces.RoleOwner), string(workspaces.RoleAdmin), string(workspaces.RoleViewer)}
	runKinds := []string{sandbox.KindLimit, sandbox.KindException, sandbox.KindSyntax, sandbox.KindCancelled, sandbox.KindBusy, sandbox.KindInternal}
	limits := []string{sandbox.LimitMemory, sandbox.LimitTimeout, sandbox.LimitStack, sandbox.LimitResult, sandbox.LimitHostCalls}
	runStatus := []string{codemode.StatusSucceeded, codemode.StatusFailed}
	results := []string{audit.ResultSuccess, audit.ResultFailure, audit.ResultDenied}
	return map[string][]string{
		"feedbackSubmit input .category":                feedback.Categories,
		"feedbackListOwn output .feedback[].category":   feedback.Categories,
		"feedbackListOwn output .feedback[].status":     fb,
		"adminFeedbackList input .status":               fb,
		"adminFeedbackList output .feedback[].status":   fb,
		"adminFeedbackUpdate input .status":             fb,
		"adminFeedbackGet output .feedback.status":      fb,
		"adminAuditLogQuery input .category":            {audit.CategoryMCP, audit.CategoryCapability, audit.CategoryAuth, audit.CategoryAccount, audit.CategoryOutbound},
		"adminAuditLogQuery input .result":              results,
		"adminAuditLogQuery output .events[].result":    results,
		"adminWebhookList output .webhooks[].state":     {"active", "disabled"},
		"httpRequest input .method":                     {http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions},
		"memoryList input .status":                      {memory.StatusActive, memory.StatusArchived, "all"},
		"memorySearch input .status":                    {memory.StatusActive, memory.StatusArchived, "all"},
		"memoryUpdate input .status":                    {memory.StatusActive, memory.StatusArchived},
		"memoryGet output .status":                      {memory.StatusActive, memory.StatusArchived},
		"memorySearch output .mode":                     {"fulltext", "hybrid"},
		"storageTransact input .ops[].op":               {"set", "delete"},
		"storageBuckets output .buckets[].kind":         {buckets.KindExec, buckets.KindPackage, buckets.KindJob, buckets.KindNamed},
		"workspaceMemberInvite input .role":             roles,
		"workspaceMemberRoleSet input .role":            roles,
		"workspaceKeyCreate input .maxRole":             roles,
		"workspaceList output .workspaces[].role":       roles,
		"workspaceMemberList output .members[].role":    roles,
		"workspaceKeyList output .keys[].maxRole":       roles,
		"runList input .status":                         runStatus,
		"runList output .runs[].status":                 runStatus,
		"runGet output .kind":                           {codemode.KindExecute, codemode.KindExport, codemode.KindJob},
		"runGet output .error.kind":                     runKinds,
		"runGet output .error.limit":                    limits,
		"execute output .error.kind":                    runKinds,
		"execute output .logs[].level":                  {"log", "info", "warn", "error", "debug"},
		"packageRun output .error.limit":                limits,
		"accountExportManifest output .sections[].kind": {lifecycle.KindSQL, lifecycle.KindBlob, lifecycle.KindCustom},
	}
}()

// TestSchemaRules walks the input and output schemas of every built-in
// capability of a server with every domain on and checks what models and
// function-calling front ends rely on: no type unions with null (a slice is
// an array, an optional pointer is its pointee's type), camelCase property
// names, an enum for every closed set, bounds on every limit, a
// description for every argument, and no argument an agent may not send.
func TestSchemaRules(t *testing.T) {
	srv := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{Workspaces: &workspaces.Options{}}})
	caps := srv.Registry().All()
	if len(caps) < 80 {
		t.Fatalf("only %d capabilities: is every domain on?", len(caps))
	}
	byName := map[string]capabilities.Capability{}
	var problems []string
	bad := func(n schemaNode, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s %s %s: %s", n.capability, n.side, n.path, fmt.Sprintf(format, args...)))
	}
	for _, c := range caps {
		byName[c.Name] = c
		if c.Title == "" {
			problems = append(problems, c.Name+": no title")
		}
		check := func(n schemaNode) {
			switch typ := n.schema["type"].(type) {
			case []any:
				for _, x := range typ {
					if x == "null" {
						bad(n, "type %v is a union with null", typ)
					}
				}
			}
			if n.name != "" && !camelCase.MatchString(n.name) {
				bad(n, "property %q is not camelCase", n.name)
			}
			if n.side == "input" && n.name != "" {
				if d, _ := n.schema["description"].(string); strings.TrimSpace(d) == "" {
					bad(n, "argument has no description")
				}
			}
			key := n.capability + " " + n.side + " " + n.path
			if closedNames[n.name] {
				_, open := openSets[key]
				_, hasEnum := n.schema["enum"]
				switch n.schema["type"] {
				case "string":
					if !hasEnum && !open {
						bad(n, "a closed set without an enum")
					}
				case "integer":
					if n.side == "input" && (n.schema["minimum"] == nil || n.schema["maximum"] == nil) {
						bad(n, "a limit without minimum and maximum")
					}
				}
			}
		}
		walkSchema(c.Name, "input", c.InputSchema, check)
		walkSchema(c.Name, "output", c.OutputSchema, check)
	}

	// The closed sets documented in prose carry exactly these values.
	for key, want := range closedSets {
		name, rest, _ := strings.Cut(key, " ")
		side, path, _ := strings.Cut(rest, " ")
		c, ok := byName[name]
		if !ok {
			problems = append(problems, name+": not registered")
			continue
		}
		raw := c.InputSchema
		if side == "output" {
			raw = c.OutputSchema
		}
		found := false
		walkSchema(name, side, raw, func(n schemaNode) {
			if n.path != path {
				return
			}
			found = true
			var got []string
			for _, v := range n.schema["enum"].([]any) {
				got = append(got, fmt.Sprint(v))
			}
			if !slices.Equal(sortedCopy(got), sortedCopy(want)) {
				bad(n, "enum %v, want %v", got, want)
			}
		})
		if !found {
			problems = append(problems, key+": no such property")
		}
	}

	// Fields an agent may not set are not in its schema.
	for _, f := range []struct{ capability, property string }{
		{"secretSet", "allowedHosts"}, {"secretSet", "expiresAt"},
	} {
		walkSchema(f.capability, "input", byName[f.capability].InputSchema, func(n schemaNode) {
			if n.path == "."+f.property {
				bad(n, "an agent may never set %s", f.property)
			}
		})
	}

	// Every schema is one a validator accepts.
	for _, c := range caps {
		for _, raw := range []json.RawMessage{c.InputSchema, c.OutputSchema} {
			if len(raw) == 0 {
				continue
			}
			var s jsonschema.Schema
			if err := json.Unmarshal(raw, &s); err != nil {
				problems = append(problems, c.Name+": "+err.Error())
				continue
			}
			if _, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
				problems = append(problems, c.Name+": "+err.Error())
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestSchemaRulesOutputsMatch calls every read-only capability that needs
// no arguments, as a new user and as an admin with nothing stored yet (the
// answers where empty lists come from nil slices), and validates each
// structured answer against the capability's output schema, as clients
// that check structured content do.
func TestSchemaRulesOutputsMatch(t *testing.T) {
	srv := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{Workspaces: &workspaces.Options{}}})
	reg := srv.Registry()
	checked := 0
	for _, u := range []*enclavetest.User{srv.CreateUser(t, "ann"), srv.CreateUser(t, "ada", capabilities.RoleAdmin)} {
		caller := u.Caller(t)
		for _, c := range reg.Visible(t.Context(), caller) {
			if !c.Annotations.ReadOnly || len(c.OutputSchema) == 0 {
				continue
			}
			var in struct {
				Required []string `json:"required"`
			}
			if json.Unmarshal(c.InputSchema, &in) != nil || len(in.Required) > 0 {
				continue
			}
			res, err := reg.Invoke(t.Context(), caller, c.Name, nil)
			if err != nil || res.IsError {
				t.Errorf("%s as %s: %v", c.Name, u.Username, err)
				continue
			}
			var s jsonschema.Schema
			if err := json.Unmarshal(c.OutputSchema, &s); err != nil {
				t.Fatal(err)
			}
			rs, err := s.Resolve(nil)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			b, err := json.Marshal(res.Structured)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if err := rs.Validate(v); err != nil {
				t.Errorf("%s as %s: the answer %s does not match the output schema: %v", c.Name, u.Username, b, err)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d answers checked", checked)
	}
}

// TestMCPInstructions: a server started with the defaults tells MCP
// clients at initialize what it is and how to find its tools (with code
// mode on: execute), and the tools it lists over the wire have no type
// unions with null.
func TestMCPInstructions(t *testing.T) {
	srv := enclavetest.Start(t, enclavetest.Options{Config: enclave.Config{SiteName: "Acme Tools"}})
	ann := srv.CreateUser(t, "ann")
	token := ann.Token(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + enclavetest.ProtocolVersion + `","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw := readMessage(t, resp)
	var msg struct {
		Result struct {
			Instructions string `json:"instructions"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("initialize: %d %s", resp.StatusCode, raw)
	}
	in := msg.Result.Instructions
	for _, want := range []string{"Acme Tools", "capabilitiesSearch", "execute", "codemode."} {
		if !strings.Contains(in, want) {
			t.Errorf("instructions lack %q: %q", want, in)
		}
	}
	if n := len(in); n > 1200 {
		t.Errorf("instructions are %d bytes: keep them concise", n)
	}

	listed, err := ann.MCP(t).Request("tools/list", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var tools struct {
		Tools []struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(listed, &tools); err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v %s", err, listed)
	}
	for _, tl := range tools.Tools {
		for side, raw := range map[string]json.RawMessage{"input": tl.InputSchema, "output": tl.OutputSchema} {
			walkSchema(tl.Name, side, raw, func(n schemaNode) {
				if typ, ok := n.schema["type"].([]any); ok && slices.Contains(typ, any("null")) {
					t.Errorf("%s %s %s: type %v over the wire", n.capability, n.side, n.path, typ)
				}
			})
		}
	}
}
