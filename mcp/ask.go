package mcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Asking the client (elicitation, sampling, roots).
//
// A handler asks through capabilities.Call (Elicit, Sample, Roots, Ask)
// the same way whatever the protocol version:
//
//   - a session-based client gets a request on the calling request's own
//     event stream and answers with a POST of the same session; the
//     handler waits for it;
//   - protocol 2026-07-28 has no server-to-client requests: the call ends
//     with an input-required result naming the questions, and the client
//     calls again with the answers. The handler runs again from the start
//     and this time finds its answers. The answers of earlier rounds ride
//     in the result's requestState, which the server signs (HMAC-SHA256,
//     Options.RequestStateKey) and binds to the caller and the credential
//     that made the call (the OAuth grant, or the workspace key), the
//     method and name, and the arguments, with an expiry and a random id
//     spent on its first use (Options.States): a client cannot alter an
//     earlier answer, nor replay a state (its own, another credential's,
//     another user's), nor reuse it for another call. The state also names the questions it asked, each
//     with a digest of its content: an answer is taken only for a question
//     the previous round asked (a client cannot answer ahead and skip a
//     question), and only while the handler asks that same question (an
//     answer given to "delete A?" does not answer "delete B?" when the
//     retry finds B).

// requestStateTTL bounds how long an input-required round may take.
const requestStateTTL = 15 * time.Minute

// round is what a 2026-07-28 request carries into its handler.
type round struct {
	// what the state is bound to (see binding), worked out by bind when a
	// state is opened or signed, not for every call
	bindMethod, bindName string
	bindArgs             []byte
	binding              string
	answers              map[string]json.RawMessage // earlier rounds' (signed) and this round's
	answerQ              map[string]string          // the digest of the question each answer answers
	used                 map[string]json.RawMessage // answers the handler consumed this run
	usedQ                map[string]string
	pending              map[string]string // the questions this run asks: key → digest
	asked                int
	question             mcpgo.InputRequests
}

// bind returns the binding of r's call, working it out once.
func (r *round) bind() string {
	if r.binding == "" {
		r.binding = binding(r.bindMethod, r.bindName, r.bindArgs)
	}
	return r.binding
}

// ensure makes r's maps, which a call that neither retries nor asks never
// needs.
func (r *round) ensure() {
	if r.answers == nil {
		r.answers, r.answerQ = map[string]json.RawMessage{}, map[string]string{}
		r.used, r.usedQ, r.pending = map[string]json.RawMessage{}, map[string]string{}, map[string]string{}
	}
}

// errInputRequired stops a handler that asked a 2026-07-28 client
// something the retried call has not answered yet.
var errInputRequired = errors.New("mcp: input required")

// errBadState is a requestState that fails verification.
var errBadState = errors.New("mcp: invalid request state")

type signedState struct {
	V       int                        `json:"v"`
	User    string                     `json:"u"`
	Cred    string                     `json:"c,omitempty"` // reqState.credential
	ID      string                     `json:"n"`           // spent on first use
	Bind    string                     `json:"b"`
	Exp     int64                      `json:"e"`
	Answers map[string]json.RawMessage `json:"a,omitempty"`
	AnswerQ map[string]string          `json:"aq,omitempty"` // question digest per answer
	Pending map[string]string          `json:"p,omitempty"`  // questions asked: key → digest
}

// stateVersion is the signedState layout; states of another are refused.
const stateVersion = 3

// questionDigest identifies what was asked: the question's key and its
// content as sent to the client.
func questionDigest(key string, q capabilities.Question) string {
	b, _ := json.Marshal(inputRequest(q))
	sum := sha256.Sum256(append([]byte(key+"\x00"), b...))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// binding identifies one call: method, name and canonical arguments.
// Numbers keep their exact text (float64 would make 2^53 and 2^53+1 the
// same call), and arguments that are not JSON are bound as they are.
func binding(method, name string, args []byte) string {
	canon := []byte("null")
	if len(args) > 0 {
		canon = args
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil && dec.Decode(new(any)) == io.EOF {
			canon, _ = json.Marshal(v)
		}
	}
	sum := sha256.Sum256([]byte(method + "\x00" + name + "\x00" + string(canon)))
	return hex.EncodeToString(sum[:])
}

func (s *Server) signState(st *reqState, r *round) string {
	r.ensure()
	id := make([]byte, 16)
	rand.Read(id)
	payload, _ := json.Marshal(signedState{V: stateVersion, User: st.caller.UserID, Cred: st.credential, ID: base64.RawURLEncoding.EncodeToString(id),
		Bind: r.bind(), Exp: s.now().Add(requestStateTTL).Unix(), Answers: r.used, AnswerQ: r.usedQ, Pending: r.pending})
	mac := hmac.New(sha256.New, s.stateKey)
	mac.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// openState verifies a requestState for the request's caller and
// credential and the call's binding, and spends it: a state is good once.
func (s *Server) openState(ctx context.Context, st *reqState, bind, state string) (signedState, error) {
	p, m, ok := strings.Cut(state, ".")
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	sum, err2 := base64.RawURLEncoding.DecodeString(m)
	if !ok || err1 != nil || err2 != nil {
		return signedState{}, errBadState
	}
	mac := hmac.New(sha256.New, s.stateKey)
	mac.Write(payload)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return signedState{}, errBadState
	}
	var ss signedState
	if json.Unmarshal(payload, &ss) != nil || ss.V != stateVersion || ss.User != st.caller.UserID || ss.Cred != st.credential ||
		ss.Bind != bind || ss.ID == "" || s.now().Unix() > ss.Exp {
		return signedState{}, errBadState
	}
	fresh, err := s.states.Spend(ctx, ss.ID, time.Unix(ss.Exp, 0))
	if err != nil {
		return signedState{}, fmt.Errorf("mcp: spend request state: %w", err)
	}
	if !fresh {
		return signedState{}, errBadState
	}
	return ss, nil
}

// StateLedger remembers the requestStates (protocol 2026-07-28) that were
// used, so that each is accepted once. Replicas must share it.
type StateLedger interface {
	// Spend records id, which expires at exp, as used; it reports false
	// when id was used already. After exp the ledger may forget id (the
	// state's signature refuses it by then).
	Spend(ctx context.Context, id string, exp time.Time) (fresh bool, err error)
}

// memoryLedger is the StateLedger of a single process.
type memoryLedger struct {
	mu    sync.Mutex
	spent map[string]time.Time
	now   func() time.Time
}

func (l *memoryLedger) Spend(_ context.Context, id string, exp time.Time) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, used := l.spent[id]; used {
		return false, nil
	}
	if len(l.spent) >= 1024 && len(l.spent)&1023 == 0 {
		now := l.now()
		for k, e := range l.spent {
			if now.After(e) {
				delete(l.spent, k)
			}
		}
	}
	l.spent[id] = exp
	return true, nil
}

// newRound prepares the answers of a 2026-07-28 retry: those signed into
// requestState by earlier rounds, and this round's inputResponses to the
// questions that state says were asked (answers to anything else are
// ignored: without a state, nothing was asked).
func (s *Server) newRound(ctx context.Context, st *reqState, method, name string, args []byte, p mcpgo.MultiRoundTripParams) (*round, error) {
	r := &round{bindMethod: method, bindName: name, bindArgs: args}
	if p.RequestState == "" {
		return r, nil
	}
	r.ensure()
	earlier, err := s.openState(ctx, st, r.bind(), p.RequestState)
	if err != nil {
		return nil, err
	}
	for k, v := range p.InputResponses {
		digest, asked := earlier.Pending[k]
		if !asked {
			continue
		}
		if raw, err := json.Marshal(v); err == nil {
			r.answers[k], r.answerQ[k] = raw, digest
		}
	}
	for k, v := range earlier.Answers {
		r.answers[k], r.answerQ[k] = v, earlier.AnswerQ[k] // earlier answers are signed: they win
	}
	return r, nil
}

func questionMethod(q capabilities.Question) mcpgo.MCPMethod {
	switch {
	case q.Elicit != nil:
		return mcpgo.MethodElicitationCreate
	case q.Sample != nil:
		return mcpgo.MethodSamplingCreateMessage
	case q.Roots:
		return mcpgo.MethodListRoots
	}
	return ""
}

// capabilityName is the client capability a method needs.
func capabilityName(m mcpgo.MCPMethod) string {
	switch m {
	case mcpgo.MethodElicitationCreate:
		return "elicitation"
	case mcpgo.MethodSamplingCreateMessage:
		return "sampling"
	}
	return "roots"
}

func inputRequest(q capabilities.Question) mcpgo.InputRequest {
	switch {
	case q.Elicit != nil:
		params := mcpgo.ElicitationParams{Message: q.Elicit.Message}
		if len(q.Elicit.Schema) > 0 {
			params.RequestedSchema = q.Elicit.Schema
		}
		return mcpgo.NewElicitationInputRequest(params)
	case q.Sample != nil:
		params := mcpgo.CreateMessageParams{SystemPrompt: q.Sample.SystemPrompt, MaxTokens: q.Sample.MaxTokens}
		for _, m := range q.Sample.Messages {
			params.Messages = append(params.Messages, mcpgo.SamplingMessage{Role: mcpgo.Role(m.Role), Content: mcpgo.NewTextContent(m.Text)})
		}
		return mcpgo.NewSamplingInputRequest(params)
	}
	return mcpgo.NewRootsInputRequest()
}

func decodeAnswer(q capabilities.Question, raw json.RawMessage) (capabilities.Answer, error) {
	var a capabilities.Answer
	switch {
	case q.Elicit != nil:
		var res struct {
			Action  string         `json:"action"`
			Content map[string]any `json:"content"`
		}
		if err := json.Unmarshal(raw, &res); err != nil || res.Action == "" {
			return a, capabilities.Errorf(capabilities.CodeInvalidInput, "the elicitation answer is not an elicitation result")
		}
		a.Elicit = capabilities.ElicitResult{Action: res.Action, Content: res.Content}
	case q.Sample != nil:
		var res struct {
			Role       string `json:"role"`
			Model      string `json:"model"`
			StopReason string `json:"stopReason"`
			Content    struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return a, capabilities.Errorf(capabilities.CodeInvalidInput, "the sampling answer is not a sampling result")
		}
		a.Sample = capabilities.SampleResult{Role: res.Role, Text: res.Content.Text, Model: res.Model, StopReason: res.StopReason}
	default:
		var res struct {
			Roots []struct {
				URI  string `json:"uri"`
				Name string `json:"name"`
			} `json:"roots"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return a, capabilities.Errorf(capabilities.CodeInvalidInput, "the roots answer is not a roots list")
		}
		a.Roots = []capabilities.Root{}
		for _, r := range res.Roots {
			a.Roots = append(a.Roots, capabilities.Root{URI: r.URI, Name: r.Name})
		}
	}
	return a, nil
}

func (c *client) Elicit(ctx context.Context, req capabilities.ElicitRequest) (capabilities.ElicitResult, error) {
	ans, err := c.Ask(ctx, []capabilities.Question{{Elicit: &req}})
	if err != nil {
		return capabilities.ElicitResult{}, err
	}
	return ans[0].Elicit, nil
}

func (c *client) Sample(ctx context.Context, req capabilities.SampleRequest) (capabilities.SampleResult, error) {
	ans, err := c.Ask(ctx, []capabilities.Question{{Sample: &req}})
	if err != nil {
		return capabilities.SampleResult{}, err
	}
	return ans[0].Sample, nil
}

// CanAsk reports whether the client declared the capability q needs.
func (c *client) CanAsk(ctx context.Context, q capabilities.Question) bool {
	m := questionMethod(q)
	if mcpserver.IsModernRequest(ctx) {
		if c.round == nil {
			return false
		}
		var caps mcpgo.ClientCapabilities
		if info := mcpserver.RequestProtocolInfoFromContext(ctx); info != nil && info.ClientCapabilities != nil {
			caps = *info.ClientCapabilities
		}
		switch m {
		case mcpgo.MethodElicitationCreate:
			return caps.Elicitation != nil
		case mcpgo.MethodSamplingCreateMessage:
			return caps.Sampling != nil
		}
		return caps.Roots != nil
	}
	sample, elicit, roots := c.s.sessions.clientCan(c.st.sessionID)
	switch m {
	case mcpgo.MethodElicitationCreate:
		return elicit
	case mcpgo.MethodSamplingCreateMessage:
		return sample
	}
	return roots
}

// Ask puts questions to the client (see the comment at the top).
func (c *client) Ask(ctx context.Context, qs []capabilities.Question) ([]capabilities.Answer, error) {
	for _, q := range qs {
		if questionMethod(q) == "" {
			return nil, fmt.Errorf("mcp: ask: a question sets none of Elicit, Sample and Roots")
		}
		if !c.CanAsk(ctx, q) {
			return nil, &capabilities.Error{Code: capabilities.CodeUnsupported, Message: "the client cannot answer this request",
				Err: mcpgo.MissingRequiredClientCapabilityError{Capability: capabilityName(questionMethod(q))}}
		}
	}
	if c.task != nil && c.task.isTask.Load() {
		return c.askTask(ctx, qs)
	}
	if mcpserver.IsModernRequest(ctx) {
		return c.askAgain(qs)
	}
	out := make([]capabilities.Answer, len(qs))
	for i, q := range qs {
		raw, err := c.askStream(ctx, inputRequest(q))
		if err != nil {
			return nil, err
		}
		if out[i], err = decodeAnswer(q, raw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// askAgain is Ask for protocol 2026-07-28: answered questions are
// returned; otherwise every unanswered one of this Ask becomes the
// input-required result and the handler is stopped.
func (c *client) askAgain(qs []capabilities.Question) ([]capabilities.Answer, error) {
	r := c.round
	r.ensure()
	out := make([]capabilities.Answer, len(qs))
	missing := mcpgo.InputRequests{}
	for i, q := range qs {
		r.asked++
		key := q.Key
		if key == "" {
			key = fmt.Sprintf("%s-%d", questionMethod(q), r.asked)
		}
		digest := questionDigest(key, q)
		raw, ok := r.answers[key]
		if !ok || r.answerQ[key] != digest {
			// Not answered, or answered when something else was asked.
			missing[key], r.pending[key] = inputRequest(q), digest
			continue
		}
		a, err := decodeAnswer(q, raw)
		if err != nil {
			missing[key], r.pending[key] = inputRequest(q), digest // ask again rather than fail
			continue
		}
		r.used[key], r.usedQ[key] = raw, digest
		out[i] = a
	}
	if len(missing) > 0 {
		r.question = missing
		return nil, errInputRequired
	}
	return out, nil
}

// askStream asks a session-based client on the calling request's own
// event stream, and waits for the answer a POST of the same session
// brings.
func (c *client) askStream(ctx context.Context, q mcpgo.InputRequest) (json.RawMessage, error) {
	if c.st.sessionID == "" || c.st.out == nil || !c.st.out.streams() {
		return nil, capabilities.ErrUnsupported
	}
	id, answer, done := c.s.pending.add(c.st.sessionID)
	defer done()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": q.Method}
	switch {
	case q.Elicitation != nil:
		msg["params"] = q.Elicitation
	case q.Sampling != nil:
		msg["params"] = q.Sampling
	default:
		msg["params"] = map[string]any{}
	}
	if err := c.st.out.send(msg); err != nil {
		return nil, fmt.Errorf("mcp: %s: %w", q.Method, err)
	}
	select {
	case a := <-answer:
		if a.Error != nil {
			return nil, &capabilities.Error{Code: capabilities.CodeUnsupported, Message: "the client declined the request",
				Err: fmt.Errorf("mcp: %s: client error %d: %s", q.Method, a.Error.Code, a.Error.Message)}
		}
		return a.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("mcp: %s: %w", q.Method, ctx.Err())
	}
}

// protocolError turns the errors that 2026-07-28 answers as JSON-RPC errors
// (a missing client capability, a bad requestState) into one, replacing
// whatever mcp-go writes for the handler's error. It reports whether err
// was one of them.
func (s *Server) protocolError(ctx context.Context, st *reqState, err error) bool {
	if !mcpserver.IsModernRequest(ctx) || st.out == nil {
		return false
	}
	var missing mcpgo.MissingRequiredClientCapabilityError
	switch {
	case errors.As(err, &missing) && missing.Capability == errTaskRequired.Capability:
		st.refuseCall(http.StatusBadRequest, mcpgo.MISSING_REQUIRED_CLIENT_CAPABILITY, "this tool runs only as a task: declare the "+tasksExtension+" extension",
			map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}})
	case errors.As(err, &missing):
		st.refuseCall(http.StatusBadRequest, mcpgo.MISSING_REQUIRED_CLIENT_CAPABILITY, missing.Error(),
			map[string]any{"requiredCapabilities": map[string]any{missing.Capability: map[string]any{}}})
	case errors.Is(err, errBadState):
		st.refuseCall(http.StatusBadRequest, mcpgo.INVALID_PARAMS, "requestState is invalid, expired, or not for this call", nil)
	default:
		return false
	}
	return true
}
