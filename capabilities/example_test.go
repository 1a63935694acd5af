package capabilities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/capabilitiestest"
)

// Struct tags give a field its name (json), its description (jsonschema)
// and its constraints (schema): a closed set as an enum, bounds, a pattern,
// a format and a default. Invoke refuses arguments that break them.
func ExampleDefine() {
	type listIn struct {
		Status string `json:"status,omitempty" jsonschema:"only tickets with this status" schema:"enum=open|closed,default=open"`
		Limit  int    `json:"limit,omitempty" jsonschema:"page size" schema:"minimum=1,maximum=100,default=20"`
		Since  string `json:"since,omitempty" jsonschema:"only tickets opened at or after this time" schema:"format=date-time"`
		Tag    string `json:"tag,omitempty" jsonschema:"only tickets with this tag" schema:"pattern=^[a-z][a-z0-9-]*$"`
	}
	type listOut struct {
		Tickets []string `json:"tickets" jsonschema:"the matching tickets"`
	}
	c := capabilities.Define(capabilities.Spec[listIn, listOut]{
		Name: "ticketList", Domain: "tickets", Description: "Lists tickets.",
		Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
		Handler: func(_ context.Context, _ *capabilities.Call, in listIn) (listOut, error) {
			fmt.Printf("status=%s limit=%d\n", in.Status, in.Limit)
			return listOut{}, nil // a nil slice is sent as []
		},
	})
	reg := capabilities.NewRegistry(capabilities.Options{})
	if err := reg.Register(c); err != nil {
		panic(err)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(c.InputSchema, &schema)
	fmt.Println(string(schema.Properties["status"]))

	caller := capabilitiestest.User("u1")
	res, _ := reg.Invoke(context.Background(), caller, "ticketList", nil)
	fmt.Println(res.Content[0].(capabilities.Text).Text)

	_, err := reg.Invoke(context.Background(), caller, "ticketList", json.RawMessage(`{"status":"pending"}`))
	var ce *capabilities.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Code, ce.Message)
	}
	// Output:
	// {"type":"string","description":"only tickets with this status","default":"open","enum":["open","closed"]}
	// status=open limit=20
	// {"tickets":[]}
	// invalid_input invalid arguments: status must be one of "open", "closed" (got "pending")
}

// A public capability (Requirement.Public, read-only only) runs for a
// visitor who is not signed in: capabilities.Anonymous, the zero Caller.
// Every other capability answers that caller as unknown. The handler sees
// that the caller is not authenticated and answers public data only.
func ExampleAnonymous() {
	type in struct{}
	type out struct {
		Visitor bool `json:"visitor"`
	}
	reg := capabilities.NewRegistry(capabilities.Options{})
	read := &capabilities.Annotations{ReadOnly: true, Idempotent: true}
	if err := reg.Register(
		capabilities.Define(capabilities.Spec[in, out]{
			Name: "catalogueList", Domain: "catalogue", Description: "Lists the public catalogue.",
			Annotations: read, Requires: capabilities.Requirement{Public: true},
			Handler: func(_ context.Context, call *capabilities.Call, _ in) (out, error) {
				return out{Visitor: !call.Caller.Authenticated()}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[in, out]{
			Name: "draftList", Domain: "catalogue", Description: "Lists your drafts.", Annotations: read,
			Handler: func(context.Context, *capabilities.Call, in) (out, error) { return out{}, nil },
		}),
	); err != nil {
		panic(err)
	}
	res, err := reg.Invoke(context.Background(), capabilities.Anonymous(), "catalogueList", nil)
	fmt.Println(res.Content[0].(capabilities.Text).Text, err)
	_, err = reg.Invoke(context.Background(), capabilities.Anonymous(), "draftList", nil)
	fmt.Println(capabilities.CodeOf(err))
	// Output:
	// {"visitor":true} <nil>
	// not_found
}

// A transport answers a refusal with the status and JSON-RPC code of its
// domain code, read from the one table.
func ExampleHTTPStatus() {
	err := fmt.Errorf("save note: %w", capabilities.Errorf(capabilities.CodeQuotaExceeded, "daily limit reached"))
	code := capabilities.CodeOf(err)
	fmt.Println(code, capabilities.HTTPStatus(code), capabilities.RPCCode(code))
	code = capabilities.CodeOf(errors.New("disk full"))
	fmt.Println(code, capabilities.HTTPStatus(code), capabilities.RPCCode(code))
	// Output:
	// quota_exceeded 429 -32029
	// internal 500 -32603
}

// The operator's capabilities (Requirement.Operator) run only for the
// caller of OperatorCaller, which in-process code alone can hold (the
// server's command line): for everyone else, admins included, they do not
// exist. Each call of the operator that runs is recorded with
// Options.OperatorAudit, naming the account its handler acted on.
func ExampleOperatorCaller() {
	type ref struct {
		Email string `json:"email" jsonschema:"the account's email address"`
	}
	type done struct {
		Done bool `json:"done"`
	}
	grant := capabilities.Define(capabilities.Spec[ref, done]{
		Name: "operatorAdminGrant", Domain: "operator", Description: "Grants admin.",
		Annotations: &capabilities.Annotations{Idempotent: true},
		Requires:    capabilities.Requirement{Operator: true},
		Handler: func(_ context.Context, call *capabilities.Call, in ref) (done, error) {
			call.SetSubject("u-" + in.Email) // the account's stable id, for the audit row
			return done{Done: true}, nil
		},
	})
	reg := capabilities.NewRegistry(capabilities.Options{NoBuiltins: true, OperatorAudit: printAudit{}})
	if err := reg.Register(grant); err != nil {
		panic(err)
	}
	ctx := context.Background()
	args := json.RawMessage(`{"email":"ann@example.com"}`)
	_, err := reg.Invoke(ctx, capabilitiestest.Admin("a1"), "operatorAdminGrant", args)
	fmt.Println("admin:", capabilities.CodeOf(err))
	res, err := reg.Invoke(ctx, capabilities.OperatorCaller(), "operatorAdminGrant", args)
	fmt.Println("operator:", res.Structured, err)
	// Output:
	// admin: not_found
	// audit: operatorAdminGrant on u-ann@example.com: ok
	// operator: {true} <nil>
}

type printAudit struct{}

func (printAudit) RecordOperatorCall(_ context.Context, c capabilities.OperatorCall) {
	fmt.Printf("audit: %s on %s: %s\n", c.Name, c.Subject, c.Outcome)
}
