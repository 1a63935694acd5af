package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/enclave-mcp/enclave/capabilities"
)

// The diagnostic tools of the protocol 2026-07-28 scenarios: asking for
// input (which a 2026-07-28 client gets as an input-required result and a
// session-based client as requests on its stream), custom headers, and
// the stateless transport's probes.

func nameQuestion(key, message string) capabilities.Question {
	return capabilities.Question{Key: key, Elicit: &capabilities.ElicitRequest{Message: message,
		Schema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)}}
}

func sampleQuestion(key, text string, maxTokens int) capabilities.Question {
	return capabilities.Question{Key: key, Sample: &capabilities.SampleRequest{
		Messages: []capabilities.SampleMessage{{Role: "user", Text: text}}, MaxTokens: maxTokens}}
}

// asking defines a tool without arguments whose handler asks and answers.
func asking(name, description string, h func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error)) capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: name, Domain: "conformance", Description: description, Annotations: asks,
		Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
			return h(ctx, call)
		},
	})
}

func rootsText(roots []capabilities.Root) string {
	var uris []string
	for _, r := range roots {
		uris = append(uris, r.URI)
	}
	return strings.Join(uris, ", ")
}

type regionIn struct {
	Region string `json:"region"`
	Query  string `json:"query"`
}

func inputTools() []capabilities.Capability {
	return []capabilities.Capability{
		asking("test_input_required_result_elicitation", "Asks the user's name, then greets them.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Ask(ctx, nameQuestion("user_name", "What is your name?"))
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("Hello, %v!", ans[0].Elicit.Content["name"])), nil
		}),
		asking("test_input_required_result_sampling", "Asks the model a question.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Ask(ctx, sampleQuestion("capital_question", "What is the capital of France?", 100))
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("The model answered: " + ans[0].Sample.Text), nil
		}),
		asking("test_input_required_result_list_roots", "Asks the client for its roots.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Ask(ctx, capabilities.Question{Key: "client_roots", Roots: true})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("Client roots: " + rootsText(ans[0].Roots)), nil
		}),
		asking("test_input_required_result_request_state", "Asks for a confirmation; the answer comes back with verified request state.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Ask(ctx, capabilities.Question{Key: "confirm", Elicit: &capabilities.ElicitRequest{Message: "Please confirm",
				Schema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)}})
			if err != nil {
				return capabilities.Result{}, err
			}
			// Reaching here on a retry means the transport verified the
			// request state it signed.
			return capabilities.TextResult(fmt.Sprintf("state-ok: confirmed=%v", ans[0].Elicit.Content["ok"])), nil
		}),
		asking("test_input_required_result_tampered_state", "Asks for a confirmation; tampered request state is refused.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Ask(ctx, capabilities.Question{Key: "confirm", Elicit: &capabilities.ElicitRequest{Message: "Please confirm",
				Schema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)}})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("confirmed=%v", ans[0].Elicit.Content["ok"])), nil
		}),
		asking("test_input_required_result_multiple_inputs", "Asks the user, the model and the client at once.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Ask(ctx,
				nameQuestion("user_name", "What is your name?"),
				sampleQuestion("greeting", "Generate a greeting", 50),
				capabilities.Question{Key: "client_roots", Roots: true})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("name=%v greeting=%s roots=%s", ans[0].Elicit.Content["name"], ans[1].Sample.Text, rootsText(ans[2].Roots))), nil
		}),
		asking("test_input_required_result_multi_round", "Asks two questions, one round each.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			first, err := call.Ask(ctx, nameQuestion("step1", "Step 1: What is your name?"))
			if err != nil {
				return capabilities.Result{}, err
			}
			second, err := call.Ask(ctx, capabilities.Question{Key: "step2", Elicit: &capabilities.ElicitRequest{Message: "Step 2: What is your favorite color?",
				Schema: json.RawMessage(`{"type":"object","properties":{"color":{"type":"string"}},"required":["color"]}`)}})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("%v likes %v", first[0].Elicit.Content["name"], second[0].Elicit.Content["color"])), nil
		}),
		asking("test_input_required_result_capabilities", "Asks only what the client declared it can answer.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			var qs []capabilities.Question
			for _, q := range []capabilities.Question{
				nameQuestion("user_name", "What is your name?"),
				sampleQuestion("greeting", "Generate a greeting", 50),
				{Key: "client_roots", Roots: true},
			} {
				if call.CanAsk(ctx, q) {
					qs = append(qs, q)
				}
			}
			if len(qs) == 0 {
				return capabilities.TextResult("the client declared nothing to ask"), nil
			}
			if _, err := call.Ask(ctx, qs...); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(fmt.Sprintf("asked %d question(s)", len(qs))), nil
		}),
		asking("test_missing_capability", "Needs sampling, whether or not the client declared it.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			res, err := call.Sample(ctx, capabilities.SampleRequest{Messages: []capabilities.SampleMessage{{Role: "user", Text: "Say hi"}}, MaxTokens: 10})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult(res.Text), nil
		}),
		asking("test_streaming_elicitation", "Asks the user a question while the call is open.", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			ans, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: "Continue?",
				Schema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`)})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("answered: " + ans.Action), nil
		}),
		asking("test_logging_tool", "Logs a message (sent only if the request asked for a log level).", func(ctx context.Context, call *capabilities.Call) (capabilities.Result, error) {
			if err := call.Log(ctx, capabilities.LogInfo, "conformance", "a log message"); err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("logged"), nil
		}),
		{
			Name: "test_custom_headers", Domain: "conformance", Annotations: readOnly,
			Description: "Takes a region that also travels in the Mcp-Param-Region header.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{
				"region":{"type":"string","description":"Region to query","x-mcp-header":"Region"},
				"query":{"type":"string","description":"What to look up"}},
				"required":["region"]}`),
			Handler: func(_ context.Context, _ *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
				var in regionIn
				if err := json.Unmarshal(args, &in); err != nil {
					return capabilities.Result{}, capabilities.Errorf(capabilities.CodeInvalidInput, "arguments: %v", err)
				}
				return capabilities.TextResult("region=" + in.Region), nil
			},
		},
	}
}

// changers are the tools that change the tool and prompt lists, for the
// list-changed notifications of listen streams.
func changers(reg *capabilities.Registry) []capabilities.Capability {
	var n atomic.Int64
	return []capabilities.Capability{
		asking("test_trigger_tool_change", "Adds a tool.", func(context.Context, *capabilities.Call) (capabilities.Result, error) {
			name := fmt.Sprintf("test_dynamic_tool_%d", n.Add(1))
			err := reg.Register(fixed(name, "A tool added at run time.", func() capabilities.Result { return capabilities.TextResult(name) }))
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("added " + name), nil
		}),
		asking("test_trigger_prompt_change", "Adds a prompt.", func(context.Context, *capabilities.Call) (capabilities.Result, error) {
			name := fmt.Sprintf("test_dynamic_prompt_%d", n.Add(1))
			err := reg.RegisterPrompt(capabilities.Prompt{Name: name, Description: "A prompt added at run time.",
				Get: func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
					return capabilities.PromptResult{Messages: []capabilities.PromptMessage{{Role: "user", Content: capabilities.Text{Text: name}}}}, nil
				}})
			if err != nil {
				return capabilities.Result{}, err
			}
			return capabilities.TextResult("added " + name), nil
		}),
	}
}

func inputPrompts() []capabilities.Prompt {
	return []capabilities.Prompt{{
		Name: "test_input_required_result_prompt", Description: "A prompt that asks the user for context first",
		Get: func(ctx context.Context, call *capabilities.Call, _ map[string]string) (capabilities.PromptResult, error) {
			ans, err := call.Ask(ctx, capabilities.Question{Key: "user_context", Elicit: &capabilities.ElicitRequest{
				Message: "What context should the prompt use?",
				Schema:  json.RawMessage(`{"type":"object","properties":{"context":{"type":"string"}},"required":["context"]}`)}})
			if err != nil {
				return capabilities.PromptResult{}, err
			}
			return capabilities.PromptResult{Messages: []capabilities.PromptMessage{{Role: "user",
				Content: capabilities.Text{Text: fmt.Sprintf("Use this context: %v", ans[0].Elicit.Content["context"])}}}}, nil
		},
	}}
}
