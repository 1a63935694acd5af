package capabilities_test

// Security review tests (providers). Each one fails while the weakness it
// names is present.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// reviewProvider answers one capability, whatever the caller.
type reviewProvider struct{ c capabilities.Capability }

func (p reviewProvider) Own(context.Context, capabilities.Caller) ([]capabilities.Capability, error) {
	return []capabilities.Capability{p.c}, nil
}

func (p reviewProvider) LookupOwn(_ context.Context, _ capabilities.Caller, name string) (capabilities.Capability, bool, error) {
	return p.c, name == p.c.Name, nil
}

func (reviewProvider) Generation(string) uint64 { return 0 }

const reviewChildEnv = "ENCLAVE_REVIEW_CHILD"

// TestReviewCompileAcceptsSchemasWhoseValidationNeverEnds: a provider's
// capability carries an input schema its user wrote (codemode: an export's
// inputSchema). Compile resolves {"type":"object","$ref":"#"}, and Invoke's
// validation of any arguments against it recurses until the goroutine
// stack passes 1 GB: a fatal error that kills the process (run's recover
// cannot catch it). Compile (and Register) must refuse what Invoke cannot
// validate: here, a $ref cycle that consumes no input. The Invoke runs in a
// child process.
func TestReviewCompileAcceptsSchemasWhoseValidationNeverEnds(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	c := capabilities.Capability{
		Name: "own_loop", Domain: "test", Description: "A user's tool.", Annotations: &capabilities.Annotations{ReadOnly: true},
		InputSchema: json.RawMessage(`{"type":"object","$ref":"#"}`),
		Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
			return capabilities.Result{}, nil
		},
	}
	p := &reviewProvider{}
	if err := reg.AddProvider("own_", p); err != nil {
		t.Fatal(err)
	}
	compiled, err := reg.Compile(c)
	if err != nil {
		return // refused: fixed
	}
	if os.Getenv(reviewChildEnv) == t.Name() {
		p.c = compiled
		_, _ = reg.Invoke(context.Background(), capabilitiestest.User("alice"), "own_loop", json.RawMessage(`{}`))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), reviewChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	text := string(out)
	if i := strings.Index(text, "fatal error"); i >= 0 {
		text = text[i:min(len(text), i+300)]
	}
	if err != nil {
		t.Fatalf("Compile accepted {\"type\":\"object\",\"$ref\":\"#\"}, and one Invoke of it killed the process (%v):\n%s", err, text)
	}
	t.Fatalf("Compile accepted {\"type\":\"object\",\"$ref\":\"#\"} (Invoke survived it this time)")
}

// TestReviewCompileAcceptsRefSpelledAnotherWay: encoding/json matches
// field names case-insensitively, so {"$REF": "#"} decodes as the
// self-reference of TestReviewCompileAcceptsSchemasWhoseValidationNeverEnds;
// a check on the raw keys misses it. Compile must refuse it too.
func TestReviewCompileAcceptsRefSpelledAnotherWay(t *testing.T) {
	reg := capabilities.NewRegistry(capabilities.Options{})
	if err := reg.AddProvider("own_", &reviewProvider{}); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{`{"type":"object","$REF":"#"}`, `{"type":"object","allOf":[{"$Ref":"#"}]}`} {
		_, err := reg.Compile(capabilities.Capability{
			Name: "own_loop", Domain: "test", Description: "A user's tool.", Annotations: &capabilities.Annotations{ReadOnly: true},
			InputSchema: json.RawMessage(schema),
			Handler: func(context.Context, *capabilities.Call, json.RawMessage) (capabilities.Result, error) {
				return capabilities.Result{}, nil
			},
		})
		if err == nil {
			t.Errorf("Compile accepted %s, whose validation never ends", schema)
		}
	}
}
