package capabilities

import (
	"context"
	"encoding/json"
)

// LogLevel is a log message severity, in the syslog order MCP uses.
type LogLevel string

// The log levels, least severe first.
const (
	LogDebug     LogLevel = "debug"
	LogInfo      LogLevel = "info"
	LogNotice    LogLevel = "notice"
	LogWarning   LogLevel = "warning"
	LogError     LogLevel = "error"
	LogCritical  LogLevel = "critical"
	LogAlert     LogLevel = "alert"
	LogEmergency LogLevel = "emergency"
)

// ElicitRequest asks the user, through the client, for structured input.
type ElicitRequest struct {
	Message string
	// Schema is the requested schema: a flat JSON object schema with
	// primitive properties.
	Schema json.RawMessage
}

// ElicitResult is the user's answer. Action is "accept" (Content holds the
// values), "decline" or "cancel".
type ElicitResult struct {
	Action  string
	Content map[string]any
}

// SampleRequest asks the client's model for a completion.
type SampleRequest struct {
	Messages     []SampleMessage
	SystemPrompt string
	MaxTokens    int
}

// SampleMessage is one message of a sampling conversation.
type SampleMessage struct {
	Role string // "user" or "assistant"
	Text string
}

// SampleResult is the model's answer.
type SampleResult struct {
	Role, Text, Model, StopReason string
}

// Client is the transport's side of a call: it reaches the client that made
// this request and nothing else. Progress and log messages go only to the
// request that carries them; the transport drops them when the client did
// not ask (no progress token, a log level above the message's).
type Client interface {
	Progress(ctx context.Context, progress, total float64, message string) error
	Log(ctx context.Context, level LogLevel, logger string, data any) error
	Elicit(ctx context.Context, req ElicitRequest) (ElicitResult, error)
	Sample(ctx context.Context, req SampleRequest) (SampleResult, error)
}

type clientKey struct{}

// WithClient returns ctx carrying the transport's Client for one request.
func WithClient(ctx context.Context, c Client) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

func clientFrom(ctx context.Context) Client {
	c, _ := ctx.Value(clientKey{}).(Client)
	return c
}

// Call is what a handler knows about the request it serves.
type Call struct {
	Caller     Caller
	Capability string
	client     Client
}

// Progress reports progress on this request. It is a no-op when the client
// did not ask for progress or the transport has none.
func (c *Call) Progress(ctx context.Context, progress, total float64, message string) error {
	if c.client == nil {
		return nil
	}
	return c.client.Progress(ctx, progress, total, message)
}

// Log sends a log message to the client, if its level is enabled there.
func (c *Call) Log(ctx context.Context, level LogLevel, logger string, data any) error {
	if c.client == nil {
		return nil
	}
	return c.client.Log(ctx, level, logger, data)
}

// Elicit asks the user for input. It returns an error with CodeUnsupported
// when the client cannot.
func (c *Call) Elicit(ctx context.Context, req ElicitRequest) (ElicitResult, error) {
	if c.client == nil {
		return ElicitResult{}, ErrUnsupported
	}
	return c.client.Elicit(ctx, req)
}

// Sample asks the client's model for a completion. It returns an error with
// CodeUnsupported when the client cannot.
func (c *Call) Sample(ctx context.Context, req SampleRequest) (SampleResult, error) {
	if c.client == nil {
		return SampleResult{}, ErrUnsupported
	}
	return c.client.Sample(ctx, req)
}
