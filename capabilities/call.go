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
	subject    string // SetSubject
}

// SetSubject names the account the call acts on (its stable user id), for
// the audit record of an operator's call (see OperatorCall): the operator
// has no user id of its own, so the row names the account it acted on.
// Other callers' calls ignore it.
func (c *Call) SetSubject(userID string) { c.subject = userID }

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
	if _, ok := c.client.(Asker); ok {
		ans, err := c.Ask(ctx, Question{Elicit: &req})
		if err != nil {
			return ElicitResult{}, err
		}
		return ans[0].Elicit, nil
	}
	return c.client.Elicit(ctx, req)
}

// Sample asks the client's model for a completion. It returns an error with
// CodeUnsupported when the client cannot.
func (c *Call) Sample(ctx context.Context, req SampleRequest) (SampleResult, error) {
	if c.client == nil {
		return SampleResult{}, ErrUnsupported
	}
	if _, ok := c.client.(Asker); ok {
		ans, err := c.Ask(ctx, Question{Sample: &req})
		if err != nil {
			return SampleResult{}, err
		}
		return ans[0].Sample, nil
	}
	return c.client.Sample(ctx, req)
}

// Root is one of the client's roots (a directory or location it exposes).
type Root struct {
	URI, Name string
}

// Question is one thing a handler asks the client; set exactly one of
// Elicit, Sample and Roots.
type Question struct {
	// Key names the question. Clients of protocol 2026-07-28 answer a
	// call's questions by key (see Call.Ask); keys must be unique within a
	// call. "" means "<method>-<n>" for the n-th question of the call.
	Key    string
	Elicit *ElicitRequest
	Sample *SampleRequest
	Roots  bool
}

// Answer is the client's answer to a Question: the field matching the
// question's kind is set.
type Answer struct {
	Elicit ElicitResult
	Sample SampleResult
	Roots  []Root
}

// Asker is implemented by transports that can put several questions to
// the client at once and tell what it can answer. The MCP transport
// implements it.
type Asker interface {
	Ask(ctx context.Context, qs []Question) ([]Answer, error)
	CanAsk(ctx context.Context, q Question) bool
}

// Ask puts questions to the client and returns their answers, in order.
// The handler is written the same way whatever the protocol version: a
// session-based client is asked on the request's stream and Ask waits; a
// protocol 2026-07-28 client gets the questions as an input-required
// result and calls again with the answers, and the handler then runs again
// from the start and gets them from Ask (so what a handler does before
// asking happens once per round: ask first, act after). Asking several
// questions in one Ask lets such a client answer them in one round trip.
// It returns an error with CodeUnsupported when the client cannot answer
// one of them.
func (c *Call) Ask(ctx context.Context, qs ...Question) ([]Answer, error) {
	if a, ok := c.client.(Asker); ok {
		return a.Ask(ctx, qs)
	}
	out := make([]Answer, len(qs))
	for i, q := range qs {
		var err error
		switch {
		case c.client == nil || q.Roots:
			err = ErrUnsupported
		case q.Elicit != nil:
			out[i].Elicit, err = c.client.Elicit(ctx, *q.Elicit)
		case q.Sample != nil:
			out[i].Sample, err = c.client.Sample(ctx, *q.Sample)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CanAsk reports whether the client declared it can answer q (elicitation,
// sampling or roots), so a handler can leave out what it cannot.
func (c *Call) CanAsk(ctx context.Context, q Question) bool {
	if a, ok := c.client.(Asker); ok {
		return a.CanAsk(ctx, q)
	}
	return c.client != nil && !q.Roots
}

// Roots asks the client for its roots.
func (c *Call) Roots(ctx context.Context) ([]Root, error) {
	ans, err := c.Ask(ctx, Question{Roots: true})
	if err != nil {
		return nil, err
	}
	return ans[0].Roots, nil
}

// Detacher is implemented by transports that can continue a call as a task.
type Detacher interface {
	Detach(ctx context.Context) (context.Context, error)
}

// Detach lets a long-running handler of a task-supporting capability
// (Capability.Task) continue as a task: when the client can follow tasks,
// the transport answers the call now with a task id and the handler goes
// on in the background under the returned context (ended by tasks/cancel);
// its result, or the questions it asks (Ask) later, reach the client
// through the task. Otherwise Detach does nothing and the handler goes on
// as an ordinary call. Ask what must be known before starting first, then
// Detach, then do the long work with the returned context.
func (c *Call) Detach(ctx context.Context) (context.Context, error) {
	if d, ok := c.client.(Detacher); ok {
		return d.Detach(ctx)
	}
	return ctx, nil
}
