package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// The fixtures of the tasks scenarios: capabilities that run as tasks for
// clients that negotiated the tasks extension (Call.Detach).

type greetIn struct {
	Name string `json:"name,omitempty" jsonschema:"who to greet"`
}

type computeIn struct {
	Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to work"`
	Label   string  `json:"label,omitempty" jsonschema:"a label echoed in the result"`
}

type fileIn struct {
	Filename string `json:"filename,omitempty" jsonschema:"the file to delete"`
}

func taskTools() []capabilities.Capability {
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[greetIn, capabilities.Result]{
			Name: "greet", Domain: "conformance", Description: "Greets at once (never a task).", Annotations: readOnly,
			Handler: func(_ context.Context, _ *capabilities.Call, in greetIn) (capabilities.Result, error) {
				return capabilities.TextResult(fmt.Sprintf("Hello, %s!", in.Name)), nil
			},
		}),
		capabilities.Define(capabilities.Spec[computeIn, capabilities.Result]{
			Name: "slow_compute", Domain: "conformance", Description: "Works for a while, as a task when the client can follow one.",
			Annotations: readOnly, Task: capabilities.TaskOptional,
			Handler: func(ctx context.Context, call *capabilities.Call, in computeIn) (capabilities.Result, error) {
				ctx, err := call.Detach(ctx)
				if err != nil {
					return capabilities.Result{}, err
				}
				if err := sleep(ctx, time.Duration(in.Seconds*float64(time.Second))); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult(fmt.Sprintf("Computed %s after %gs", in.Label, in.Seconds)), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "failing_job", Domain: "conformance", Description: "A task whose tool reports an error.",
			Annotations: readOnly, Task: capabilities.TaskRequired,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				if _, err := call.Detach(ctx); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.ErrorResult("the job failed"), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "protocol_error_job", Domain: "conformance", Description: "A task that fails inside the server.",
			Annotations: readOnly, Task: capabilities.TaskOptional,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				if _, err := call.Detach(ctx); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.Result{}, errors.New("conformance: an internal failure")
			},
		}),
		capabilities.Define(capabilities.Spec[fileIn, capabilities.Result]{
			Name: "confirm_delete", Domain: "conformance", Description: "A task that asks for a confirmation.",
			Annotations: asks, Task: capabilities.TaskOptional,
			Handler: func(ctx context.Context, call *capabilities.Call, in fileIn) (capabilities.Result, error) {
				ctx, err := call.Detach(ctx)
				if err != nil {
					return capabilities.Result{}, err
				}
				ans, err := call.Ask(ctx, capabilities.Question{Key: "confirm", Elicit: &capabilities.ElicitRequest{Message: "Delete " + in.Filename + "?",
					Schema: json.RawMessage(`{"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}`)}})
				if err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult(fmt.Sprintf("delete %s: %v", ans[0].Elicit.Action, ans[0].Elicit.Content)), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "multi_input", Domain: "conformance", Description: "A task that asks two questions at once.",
			Annotations: asks, Task: capabilities.TaskOptional,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				ctx, err := call.Detach(ctx)
				if err != nil {
					return capabilities.Result{}, err
				}
				ans, err := call.Ask(ctx, nameQuestion("first_name", "First name?"), nameQuestion("last_name", "Last name?"))
				if err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult(fmt.Sprintf("%v %v", ans[0].Elicit.Content["name"], ans[1].Elicit.Content["name"])), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "test_tool_with_task", Domain: "conformance", Description: "Asks a name, then continues as a task.",
			Annotations: asks, Task: capabilities.TaskRequired,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				ans, err := call.Ask(ctx, nameQuestion("user_name", "What is your name?"))
				if err != nil {
					return capabilities.Result{}, err
				}
				if ctx, err = call.Detach(ctx); err != nil {
					return capabilities.Result{}, err
				}
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult(fmt.Sprintf("Hello, %v! The task is done.", ans[0].Elicit.Content["name"])), nil
			},
		}),
	}
}
