package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

var (
	readOnly = &capabilities.Annotations{ReadOnly: true, Idempotent: true}
	asks     = &capabilities.Annotations{ReadOnly: true} // talks to the user or the model
)

// redPixel is a 1×1 red PNG.
func redPixel() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return b.Bytes()
}

// silence is a short mono 8 kHz 16-bit WAV of silence.
func silence() []byte {
	const rate, samples = 8000, 80
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + samples*2))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1)) // PCM
	le(uint16(1)) // mono
	le(uint32(rate))
	le(uint32(rate * 2))
	le(uint16(2))
	le(uint16(16))
	b.WriteString("data")
	le(uint32(samples * 2))
	b.Write(make([]byte, samples*2))
	return b.Bytes()
}

// fixed is a capability without arguments returning a fixed result.
func fixed(name, description string, res func() capabilities.Result) capabilities.Capability {
	return capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
		Name: name, Domain: "conformance", Description: description, Annotations: readOnly,
		Handler: func(context.Context, *capabilities.Call, struct{}) (capabilities.Result, error) { return res(), nil },
	})
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type messageIn struct {
	Message string `json:"message" jsonschema:"the message to show the user"`
}

type promptIn struct {
	Prompt string `json:"prompt" jsonschema:"the prompt to send to the model"`
}

// elicit asks the user with a schema and reports the answer.
func elicit(ctx context.Context, call *capabilities.Call, message, schema string) (capabilities.Result, error) {
	ans, err := call.Elicit(ctx, capabilities.ElicitRequest{Message: message, Schema: json.RawMessage(schema)})
	if err != nil {
		return capabilities.Result{}, err
	}
	content, _ := json.Marshal(ans.Content)
	return capabilities.TextResult(fmt.Sprintf("Elicitation completed: action=%s, content=%s", ans.Action, content)), nil
}

func register(reg *capabilities.Registry) error {
	text := func(s string) capabilities.Content { return capabilities.Text{Text: s} }
	err := reg.Register(
		fixed("test_simple_text", "Returns a simple text response.", func() capabilities.Result {
			return capabilities.TextResult("This is a simple text response for testing.")
		}),
		fixed("test_image_content", "Returns a 1x1 red PNG.", func() capabilities.Result {
			return capabilities.Result{Content: []capabilities.Content{capabilities.Image{Data: redPixel(), MIMEType: "image/png"}}}
		}),
		fixed("test_audio_content", "Returns a short WAV clip.", func() capabilities.Result {
			return capabilities.Result{Content: []capabilities.Content{capabilities.Audio{Data: silence(), MIMEType: "audio/wav"}}}
		}),
		fixed("test_embedded_resource", "Returns an embedded text resource.", func() capabilities.Result {
			return capabilities.Result{Content: []capabilities.Content{capabilities.EmbeddedResource{Contents: capabilities.ResourceContents{
				URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content.",
			}}}}
		}),
		fixed("test_multiple_content_types", "Returns text, an image and a resource.", func() capabilities.Result {
			return capabilities.Result{Content: []capabilities.Content{
				text("Multiple content types test:"),
				capabilities.Image{Data: redPixel(), MIMEType: "image/png"},
				capabilities.EmbeddedResource{Contents: capabilities.ResourceContents{
					URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`,
				}},
			}}
		}),
		fixed("test_error_handling", "Always fails.", func() capabilities.Result {
			return capabilities.ErrorResult("This tool intentionally returns an error for testing")
		}),
		fixed("test_reconnection", "Answers at once (streams are not resumable here).", func() capabilities.Result {
			return capabilities.TextResult("Reconnection test completed successfully")
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "test_tool_with_logging", Domain: "conformance", Description: "Logs three messages while it runs.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
					if i > 0 {
						if err := sleep(ctx, 50*time.Millisecond); err != nil {
							return capabilities.Result{}, err
						}
					}
					if err := call.Log(ctx, capabilities.LogInfo, "conformance", msg); err != nil {
						return capabilities.Result{}, err
					}
				}
				return capabilities.TextResult("Tool with logging executed successfully"), nil
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "test_tool_with_progress", Domain: "conformance", Description: "Reports progress while it runs.", Annotations: readOnly,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				for i, p := range []float64{0, 50, 100} {
					if i > 0 {
						if err := sleep(ctx, 50*time.Millisecond); err != nil {
							return capabilities.Result{}, err
						}
					}
					if err := call.Progress(ctx, p, 100, ""); err != nil {
						return capabilities.Result{}, err
					}
				}
				return capabilities.TextResult("Tool with progress executed successfully"), nil
			},
		}),
		capabilities.Define(capabilities.Spec[promptIn, capabilities.Result]{
			Name: "test_sampling", Domain: "conformance", Description: "Asks the client's model.", Annotations: asks,
			Handler: func(ctx context.Context, call *capabilities.Call, in promptIn) (capabilities.Result, error) {
				res, err := call.Sample(ctx, capabilities.SampleRequest{
					Messages:  []capabilities.SampleMessage{{Role: "user", Text: in.Prompt}},
					MaxTokens: 100,
				})
				if err != nil {
					return capabilities.Result{}, err
				}
				return capabilities.TextResult("LLM response: " + res.Text), nil
			},
		}),
		capabilities.Define(capabilities.Spec[messageIn, capabilities.Result]{
			Name: "test_elicitation", Domain: "conformance", Description: "Asks the user for a name and email.", Annotations: asks,
			Handler: func(ctx context.Context, call *capabilities.Call, in messageIn) (capabilities.Result, error) {
				return elicit(ctx, call, in.Message, `{"type":"object","properties":{
					"username":{"type":"string","description":"User's response"},
					"email":{"type":"string","description":"User's email address"}},
					"required":["username","email"]}`)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "test_elicitation_sep1034_defaults", Domain: "conformance", Description: "Asks with default values.", Annotations: asks,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				return elicit(ctx, call, "Please review the defaults", `{"type":"object","properties":{
					"name":{"type":"string","description":"User name","default":"John Doe"},
					"age":{"type":"integer","description":"User age","default":30},
					"score":{"type":"number","description":"User score","default":95.5},
					"status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},
					"verified":{"type":"boolean","description":"Verification status","default":true}}}`)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, capabilities.Result]{
			Name: "test_elicitation_sep1330_enums", Domain: "conformance", Description: "Asks with every kind of enum.", Annotations: asks,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (capabilities.Result, error) {
				return elicit(ctx, call, "Please choose", `{"type":"object","properties":{
					"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
					"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
					"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
					"untitledMulti":{"type":"array","items":{"type":"string","enum":["option1","option2","option3"]}},
					"titledMulti":{"type":"array","items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}`)
			},
		}),
		capabilities.Capability{
			Name: "json_schema_2020_12_tool", Domain: "conformance", Description: "Tool with JSON Schema 2020-12 features",
			Annotations: readOnly,
			InputSchema: json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
				"$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
				"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},
					"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},
				"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],
				"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},
				"then":{"required":["phone"]},"else":{"required":["email"]},
				"additionalProperties":false}`),
			Handler: func(_ context.Context, _ *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
				return capabilities.TextResult("Received: " + string(args)), nil
			},
		},
	)
	if err != nil {
		return err
	}
	if err := reg.Register(append(append(inputTools(), taskTools()...), changers(reg)...)...); err != nil {
		return err
	}
	if err := reg.RegisterPrompt(inputPrompts()...); err != nil {
		return err
	}
	if err := registerResources(reg); err != nil {
		return err
	}
	return registerPrompts(reg)
}

func registerResources(reg *capabilities.Registry) error {
	static := func(uri, name, mime, body string) capabilities.Resource {
		return capabilities.Resource{URI: uri, Name: name, MIMEType: mime, Description: name,
			Read: func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
				return []capabilities.ResourceContents{{URI: uri, MIMEType: mime, Text: body}}, nil
			}}
	}
	return reg.RegisterResource(
		static("test://static-text", "Static text resource", "text/plain", "This is the content of the static text resource."),
		static("test://watched-resource", "Watched resource", "text/plain", "Watched resource content."),
		capabilities.Resource{URI: "test://static-binary", Name: "Static binary resource", MIMEType: "image/png",
			Read: func(context.Context, *capabilities.Call, string, map[string]string) ([]capabilities.ResourceContents, error) {
				return []capabilities.ResourceContents{{URI: "test://static-binary", MIMEType: "image/png", Blob: redPixel()}}, nil
			}},
		capabilities.Resource{Template: "test://template/{id}/data", Name: "Template resource", MIMEType: "application/json",
			Description: "Data for one id",
			Read: func(_ context.Context, _ *capabilities.Call, uri string, p map[string]string) ([]capabilities.ResourceContents, error) {
				body, _ := json.Marshal(map[string]any{"id": p["id"], "templateTest": true, "data": "Data for ID: " + p["id"]})
				return []capabilities.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(body)}}, nil
			}},
	)
}

func registerPrompts(reg *capabilities.Registry) error {
	user := func(c capabilities.Content) capabilities.PromptMessage {
		return capabilities.PromptMessage{Role: "user", Content: c}
	}
	text := func(s string) capabilities.Content { return capabilities.Text{Text: s} }
	return reg.RegisterPrompt(
		capabilities.Prompt{Name: "test_simple_prompt", Description: "A simple prompt without arguments",
			Get: func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
				return capabilities.PromptResult{Messages: []capabilities.PromptMessage{user(text("This is a simple prompt for testing."))}}, nil
			}},
		capabilities.Prompt{Name: "test_prompt_with_arguments", Description: "A prompt with two arguments",
			Arguments: []capabilities.PromptArgument{
				{Name: "arg1", Description: "First test argument", Required: true},
				{Name: "arg2", Description: "Second test argument", Required: true},
			},
			Get: func(_ context.Context, _ *capabilities.Call, a map[string]string) (capabilities.PromptResult, error) {
				return capabilities.PromptResult{Messages: []capabilities.PromptMessage{
					user(text(fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"]))),
				}}, nil
			},
			Complete: func(_ context.Context, _ *capabilities.Call, _, prefix string) ([]string, error) {
				var out []string
				for _, v := range []string{"paris", "park", "party"} {
					if strings.HasPrefix(v, prefix) {
						out = append(out, v)
					}
				}
				return out, nil
			}},
		capabilities.Prompt{Name: "test_prompt_with_embedded_resource", Description: "A prompt embedding a resource",
			Arguments: []capabilities.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}},
			Get: func(_ context.Context, _ *capabilities.Call, a map[string]string) (capabilities.PromptResult, error) {
				return capabilities.PromptResult{Messages: []capabilities.PromptMessage{
					user(capabilities.EmbeddedResource{Contents: capabilities.ResourceContents{
						URI: a["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing.",
					}}),
					user(text("Please process the embedded resource above.")),
				}}, nil
			}},
		capabilities.Prompt{Name: "test_prompt_with_image", Description: "A prompt with an image",
			Get: func(context.Context, *capabilities.Call, map[string]string) (capabilities.PromptResult, error) {
				return capabilities.PromptResult{Messages: []capabilities.PromptMessage{
					user(capabilities.Image{Data: redPixel(), MIMEType: "image/png"}),
					user(text("Please analyze the image above.")),
				}}, nil
			}},
	)
}
