package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave/capabilities"
)

// toolOf describes a capability as an MCP tool, with every annotation set
// (mcp-go's defaults would call it destructive and open-world).
func toolOf(c capabilities.Capability) mcpgo.Tool {
	a := *c.Annotations
	destructive := !a.ReadOnly && a.Destructive
	return mcpgo.Tool{
		Name:            c.Name,
		Title:           c.Title,
		Description:     c.Description,
		RawInputSchema:  c.InputSchema,
		RawOutputSchema: c.OutputSchema,
		Annotations: mcpgo.ToolAnnotation{
			Title:           c.Title,
			ReadOnlyHint:    &a.ReadOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  &a.Idempotent,
			OpenWorldHint:   &a.OpenWorld,
		},
	}
}

func promptOf(p capabilities.Prompt) mcpgo.Prompt {
	out := mcpgo.Prompt{Name: p.Name, Title: p.Title, Description: p.Description}
	for _, a := range p.Arguments {
		out.Arguments = append(out.Arguments, mcpgo.PromptArgument{Name: a.Name, Description: a.Description, Required: a.Required})
	}
	return out
}

func resourceOf(r capabilities.Resource) mcpgo.Resource {
	return mcpgo.Resource{URI: r.URI, Name: r.Name, Title: r.Title, Description: r.Description, MIMEType: r.MIMEType}
}

func templateOf(r capabilities.Resource) mcpgo.ResourceTemplate {
	t := mcpgo.NewResourceTemplate(r.Template, r.Name,
		mcpgo.WithTemplateDescription(r.Description), mcpgo.WithTemplateMIMEType(r.MIMEType))
	t.Title = r.Title
	return t
}

// callTool runs tools/call through Registry.Invoke. It never returns a Go
// error, because mcp-go would send its text verbatim: failures become tool
// error results with a message safe to show.
func (s *Server) callTool(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
	st := stateFrom(ctx)
	if st == nil {
		return nil, safeError{"no caller"}
	}
	args := req.Params.RawArguments
	if len(args) == 0 && req.Params.Arguments != nil {
		var err error
		if args, err = json.Marshal(req.Params.Arguments); err != nil {
			return mcpgo.NewToolResultError("arguments are not a JSON object"), nil
		}
	}
	var token mcpgo.ProgressToken
	if req.Params.Meta != nil {
		token = req.Params.Meta.ProgressToken
		// The registry reads the idempotency key (and judges it) there.
		ctx = capabilities.WithRequestMeta(ctx, req.Params.Meta.AdditionalFields)
	}
	cl := &client{s: s, st: st, progressToken: token}
	if mcpserver.IsModernRequest(ctx) {
		var err error
		if cl.round, err = s.newRound(ctx, st, "tools/call", req.Params.Name, args, req.Params.MultiRoundTripParams); err != nil {
			s.protocolError(ctx, st, err)
			return nil, safeError{"invalid request state"}
		}
	}
	if mcpserver.IsModernRequest(ctx) {
		support := s.taskSupportOf(req.Params.Name)
		canTask := s.tasks != nil && negotiatedTasks(ctx)
		switch {
		case support == capabilities.TaskRequired && !canTask:
			s.protocolError(ctx, st, errTaskRequired)
			return nil, safeError{"this tool runs only as a task"}
		case support != capabilities.TaskNever && canTask:
			return s.callAsTask(ctx, st, cl, req.Params.Name, args)
		}
	}
	res, err := s.reg.Invoke(capabilities.WithClient(ctx, cl), st.caller, req.Params.Name, args)
	return s.toolResult(ctx, st, cl, req.Params.Name, res, err)
}

// toolResult turns what Invoke returned into the tools/call answer.
func (s *Server) toolResult(ctx context.Context, st *reqState, cl *client, name string, res capabilities.Result, err error) (*mcpgo.CallToolResult, error) {
	if errors.Is(err, errInputRequired) && cl.round != nil && cl.round.question != nil {
		return &mcpgo.CallToolResult{
			Result:               mcpgo.Result{ResultType: mcpgo.ResultTypeInputRequired},
			MultiRoundTripResult: mcpgo.MultiRoundTripResult{InputRequests: cl.round.question, RequestState: s.signState(st, cl.round)},
		}, nil
	}
	if s.protocolError(ctx, st, err) {
		return nil, safeError{"request refused"}
	}
	if retryError(st, err) {
		return nil, safeError{"quota exceeded"}
	}
	if metaError(st, err) {
		return nil, safeError{"invalid params"}
	}
	if err != nil {
		s.logIfInternal(ctx, st, "tools/call "+name, err)
		return mcpgo.NewToolResultError(publicMessage(err, st.requestID)), nil
	}
	out := &mcpgo.CallToolResult{Content: contents(res.Content), StructuredContent: res.Structured, IsError: res.IsError}
	if len(out.Content) == 0 {
		out.Content = []mcpgo.Content{}
	}
	return out, nil
}

func (s *Server) logIfInternal(ctx context.Context, st *reqState, what string, err error) {
	if capabilities.CodeOf(err) == capabilities.CodeInternal && !errors.Is(err, context.Canceled) {
		s.log.ErrorContext(ctx, "mcp: internal error", "op", what, "err", err, "request_id", st.requestID)
	}
}

func (s *Server) readResource(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
	st := stateFrom(ctx)
	if st == nil {
		return nil, safeError{"no caller"}
	}
	ctx = capabilities.WithClient(ctx, &client{s: s, st: st})
	got, err := s.reg.ReadResource(ctx, st.caller, req.Params.URI)
	if err != nil {
		s.logIfInternal(ctx, st, "resources/read", err)
		return nil, safeError{publicMessage(err, st.requestID)}
	}
	out := make([]mcpgo.ResourceContents, 0, len(got))
	for _, c := range got {
		out = append(out, resourceContents(c))
	}
	return out, nil
}

func (s *Server) getPrompt(ctx context.Context, req mcpgo.GetPromptRequest) (*mcpgo.GetPromptResult, error) {
	st := stateFrom(ctx)
	if st == nil {
		return nil, safeError{"no caller"}
	}
	cl := &client{s: s, st: st}
	if mcpserver.IsModernRequest(ctx) {
		args, _ := json.Marshal(req.Params.Arguments)
		var err error
		if cl.round, err = s.newRound(ctx, st, "prompts/get", req.Params.Name, args, req.Params.MultiRoundTripParams); err != nil {
			s.protocolError(ctx, st, err)
			return nil, safeError{"invalid request state"}
		}
	}
	ctx = capabilities.WithClient(ctx, cl)
	got, err := s.reg.GetPrompt(ctx, st.caller, req.Params.Name, req.Params.Arguments)
	if errors.Is(err, errInputRequired) && cl.round != nil && cl.round.question != nil {
		return &mcpgo.GetPromptResult{
			Result:               mcpgo.Result{ResultType: mcpgo.ResultTypeInputRequired},
			MultiRoundTripResult: mcpgo.MultiRoundTripResult{InputRequests: cl.round.question, RequestState: s.signState(st, cl.round)},
			Messages:             []mcpgo.PromptMessage{},
		}, nil
	}
	if s.protocolError(ctx, st, err) {
		return nil, safeError{"request refused"}
	}
	if err != nil {
		s.logIfInternal(ctx, st, "prompts/get", err)
		return nil, safeError{publicMessage(err, st.requestID)}
	}
	out := &mcpgo.GetPromptResult{Description: got.Description, Messages: []mcpgo.PromptMessage{}}
	for _, m := range got.Messages {
		out.Messages = append(out.Messages, mcpgo.PromptMessage{Role: mcpgo.Role(m.Role), Content: content(m.Content)})
	}
	return out, nil
}

// completer answers completion/complete for prompts and resource templates.
type completer struct{ s *Server }

func (c completer) CompletePromptArgument(ctx context.Context, name string, arg mcpgo.CompleteArgument, _ mcpgo.CompleteContext) (*mcpgo.Completion, error) {
	st := stateFrom(ctx)
	if st == nil {
		return nil, safeError{"no caller"}
	}
	values, err := c.s.reg.CompletePrompt(ctx, st.caller, name, arg.Name, arg.Value)
	return c.completion(ctx, st, values, err)
}

func (c completer) CompleteResourceArgument(ctx context.Context, uri string, arg mcpgo.CompleteArgument, _ mcpgo.CompleteContext) (*mcpgo.Completion, error) {
	st := stateFrom(ctx)
	if st == nil {
		return nil, safeError{"no caller"}
	}
	values, err := c.s.reg.CompleteResource(ctx, st.caller, uri, arg.Name, arg.Value)
	return c.completion(ctx, st, values, err)
}

func (c completer) completion(ctx context.Context, st *reqState, values []string, err error) (*mcpgo.Completion, error) {
	if err != nil {
		c.s.logIfInternal(ctx, st, "completion/complete", err)
		return nil, safeError{publicMessage(err, st.requestID)}
	}
	out := &mcpgo.Completion{Values: []string{}, Total: len(values)}
	out.Values = append(out.Values, values[:min(len(values), 100)]...)
	out.HasMore = len(values) > 100
	return out, nil
}

func contents(cs []capabilities.Content) []mcpgo.Content {
	out := make([]mcpgo.Content, 0, len(cs))
	for _, c := range cs {
		if mc := content(c); mc != nil {
			out = append(out, mc)
		}
	}
	return out
}

func content(c capabilities.Content) mcpgo.Content {
	switch c := c.(type) {
	case capabilities.Text:
		return mcpgo.NewTextContent(c.Text)
	case capabilities.Image:
		return mcpgo.NewImageContent(base64.StdEncoding.EncodeToString(c.Data), c.MIMEType)
	case capabilities.Audio:
		return mcpgo.NewAudioContent(base64.StdEncoding.EncodeToString(c.Data), c.MIMEType)
	case capabilities.EmbeddedResource:
		return mcpgo.NewEmbeddedResource(resourceContents(c.Contents))
	case capabilities.ResourceLink:
		return mcpgo.NewResourceLink(c.URI, c.Name, c.Description, c.MIMEType)
	}
	return nil
}

func resourceContents(c capabilities.ResourceContents) mcpgo.ResourceContents {
	if c.Blob != nil {
		return mcpgo.BlobResourceContents{URI: c.URI, MIMEType: c.MIMEType, Blob: base64.StdEncoding.EncodeToString(c.Blob)}
	}
	return mcpgo.TextResourceContents{URI: c.URI, MIMEType: c.MIMEType, Text: c.Text}
}

// client is capabilities.Client for one MCP request: everything it sends
// goes to the session mcp-go put in the request's context, which is the
// request's own.
type client struct {
	s             *Server
	st            *reqState
	progressToken mcpgo.ProgressToken

	// round is set for 2026-07-28 requests that may ask (see ask.go)
	round *round
	// task is set for calls that may continue as a task (see tasks.go)
	task *taskRun
}

func (c *client) Progress(ctx context.Context, progress, total float64, message string) error {
	if c.progressToken == nil {
		return nil
	}
	params := map[string]any{"progressToken": c.progressToken, "progress": progress}
	if total > 0 {
		params["total"] = total
	}
	if message != "" {
		params["message"] = message
	}
	return c.notify(ctx, string(mcpgo.MethodNotificationProgress), params)
}

func (c *client) Log(ctx context.Context, level capabilities.LogLevel, logger string, data any) error {
	threshold := mcpgo.LoggingLevelDebug
	if info := mcpserver.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		if info.LogLevel == "" {
			return nil // 2026-07-28: no level asked, no log messages
		}
		threshold = info.LogLevel
	} else if l := c.s.sessions.logLevel(c.st.sessionID); l != "" {
		threshold = mcpgo.LoggingLevel(l)
	}
	if !mcpgo.LoggingLevel(level).ShouldSendTo(threshold) {
		return nil
	}
	params := map[string]any{"level": string(level), "data": data}
	if logger != "" {
		params["logger"] = logger
	}
	return c.notify(ctx, "notifications/message", params)
}

// notify sends a notification on this request's stream, written here
// and now.
func (c *client) notify(_ context.Context, method string, params map[string]any) error {
	if c.task != nil && c.task.isTask.Load() {
		return nil // the request it belonged to has been answered
	}
	if c.st.out == nil {
		return fmt.Errorf("mcp: notify %s: %w", method, errAnswered)
	}
	if err := c.st.out.send(notification(method, params)); err != nil {
		return fmt.Errorf("mcp: notify %s: %w", method, err)
	}
	return nil
}
