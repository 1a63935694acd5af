package capabilities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// MetaIdempotencyKey is the request _meta field that carries an idempotency
// key: a string of 1 to MaxIdempotencyKeyLength characters.
//
// A call of a capability not annotated Idempotent that carries a key runs
// at most once per caller, capability and key within IdempotencyWindow:
// a repeat with the same arguments gets the first call's result without
// running the handler again; a repeat with other arguments is refused
// (CodeConflict); a repeat while the first still runs waits for it, and is
// refused (CodeConflict, "still running") if it does not finish soon. A
// capability annotated Idempotent or ReadOnly ignores the key (a read is
// never stored).
const MetaIdempotencyKey = "enclave/idempotencyKey"

// MaxIdempotencyKeyLength is the longest idempotency key, in characters.
const MaxIdempotencyKeyLength = 128

// IdempotencyWindow is how long a keyed result is replayed.
const IdempotencyWindow = 24 * time.Hour

// idempotencyWait is how long a repeat waits for a first call still
// running, and how often it looks.
const (
	idempotencyWait = 5 * time.Second
	idempotencyPoll = 50 * time.Millisecond
)

// IdempotencyStale is how long a running claim lives without being renewed.
// While a keyed handler runs, the registry renews its claim every
// idempotencyRenew (when the store is an IdempotencyRenewer); a claim not
// renewed for this long belongs to a call whose replica died, and the next
// call with its key runs instead of being told "still running" until the
// key expires.
const IdempotencyStale = 2 * time.Minute

// idempotencyRenew is how often a running claim is renewed.
var idempotencyRenew = 30 * time.Second

// IdempotencyRenewer is an IdempotencyStore whose running claims expire
// when not renewed (see IdempotencyStale).
type IdempotencyRenewer interface {
	// Renew records that the claimed record id is still running.
	Renew(ctx context.Context, id int64) error
}

// IdempotencyKey names one keyed call.
type IdempotencyKey struct {
	UserID     string // the caller's stable user id
	OwnerID    int64  // the caller's users.id when known, else 0
	Capability string // the capability's name
	KeyHash    string // hex SHA-256 of the caller's key
	ArgsHash   string // hex SHA-256 of the canonical arguments
}

// IdempotencyRecord is a stored keyed call.
type IdempotencyRecord struct {
	ID       int64
	ArgsHash string
	// Done is false while the first call runs.
	Done bool
	// Result is the stored outcome (opaque to the store).
	Result []byte
}

// IdempotencyStore keeps keyed calls for IdempotencyWindow. It must be
// safe for concurrent use across replicas: Claim decides atomically.
type IdempotencyStore interface {
	// Claim records that the keyed call k starts, and reports claimed=true;
	// when a record of k younger than IdempotencyWindow exists, it
	// returns that record and claimed=false instead.
	Claim(ctx context.Context, k IdempotencyKey) (rec IdempotencyRecord, claimed bool, err error)
	// Complete stores the outcome of the claimed record id.
	Complete(ctx context.Context, id int64, result []byte) error
	// Release forgets the claimed record id (the call failed in a way a
	// retry may repair), so the next call with the key runs.
	Release(ctx context.Context, id int64) error
}

type requestMetaKey struct{}

// WithRequestMeta returns ctx carrying the _meta fields of the request a
// transport is serving; Invoke reads MetaIdempotencyKey from it.
func WithRequestMeta(ctx context.Context, meta map[string]any) context.Context {
	if len(meta) == 0 {
		return ctx
	}
	return context.WithValue(ctx, requestMetaKey{}, meta)
}

// withoutRequestMeta returns ctx without the request's _meta fields.
func withoutRequestMeta(ctx context.Context) context.Context {
	if ctx.Value(requestMetaKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, requestMetaKey{}, map[string]any(nil))
}

// idempotencyKeyFrom returns the request's idempotency key ("" when none),
// or an invalid-input error for a malformed one.
func idempotencyKeyFrom(ctx context.Context) (string, error) {
	meta, _ := ctx.Value(requestMetaKey{}).(map[string]any)
	v, ok := meta[MetaIdempotencyKey]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	n := utf8.RuneCountInString(s)
	if !ok || !utf8.ValidString(s) || n < 1 || n > MaxIdempotencyKeyLength || hasControl(s) {
		return "", &Error{Code: CodeInvalidInput, Message: fmt.Sprintf("_meta %q must be a string of 1 to %d printable characters", MetaIdempotencyKey, MaxIdempotencyKeyLength), Err: ErrInvalidRequestMeta}
	}
	return s, nil
}

// ErrInvalidRequestMeta marks an error about a request's _meta fields (a
// transport may answer it as invalid parameters).
var ErrInvalidRequestMeta = errors.New("capabilities: invalid request _meta")

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// canonicalHash is the hex SHA-256 of args in canonical form: object keys
// sorted, no insignificant space, numbers as written. No arguments and an
// empty object are the same.
func canonicalHash(args json.RawMessage) (string, error) {
	var v any = map[string]any{}
	if len(bytes.TrimSpace(args)) > 0 {
		d := json.NewDecoder(bytes.NewReader(args))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return "", err
		}
		if v == nil {
			v = map[string]any{}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// invokeOnce runs a keyed call: claim first (its own statement, committed
// before the handler starts), then run, then store the outcome.
func (r *Registry) invokeOnce(ctx context.Context, c *Capability, caller Caller, key string, args json.RawMessage, run func(context.Context) (Result, error)) (Result, error) {
	if caller.UserID == "" {
		return Result{}, &Error{Code: CodeInvalidInput, Message: "idempotency keys need a signed-in caller", Err: ErrInvalidRequestMeta}
	}
	argsHash, err := canonicalHash(args)
	if err != nil {
		return Result{}, Errorf(CodeInvalidInput, "arguments are not valid JSON")
	}
	keySum := sha256.Sum256([]byte(key))
	k := IdempotencyKey{UserID: caller.UserID, OwnerID: caller.OwnerID, Capability: c.Name, KeyHash: hex.EncodeToString(keySum[:]), ArgsHash: argsHash}
	store := r.opts.Idempotency
	deadline := time.Now().Add(idempotencyWait)
	for {
		rec, claimed, err := store.Claim(ctx, k)
		if err != nil {
			return Result{}, fmt.Errorf("capabilities: idempotency claim: %w", err)
		}
		if claimed {
			return r.runClaimed(ctx, rec.ID, run)
		}
		if rec.ArgsHash != k.ArgsHash {
			return Result{}, Errorf(CodeConflict, "this idempotency key was already used with different arguments; use a new key for a different call")
		}
		if rec.Done {
			return decodeOutcome(rec.Result)
		}
		if time.Now().After(deadline) {
			return Result{}, Errorf(CodeConflict, "a call with this idempotency key is still running; retry later to get its result")
		}
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(idempotencyPoll):
		}
	}
}

// ErrCallStopped is the cancellation cause (context.WithCancelCause) a
// transport gives a call it stops on purpose: the caller cancelled a task,
// the caller's access ended, the server is shutting down. A keyed call
// outlives an ordinary cancellation (the client went away or timed out),
// but not this one.
var ErrCallStopped = errors.New("capabilities: call stopped")

// keyedContext is the context a keyed handler runs in: it keeps ctx's
// values and does not end when the client goes away, but ends when ctx is
// cancelled with cause ErrCallStopped.
func keyedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), ErrCallStopped) {
			cancel(ErrCallStopped)
		}
	})
	return hctx, func() { stop(); cancel(nil) }
}

// runClaimed runs the handler of a claimed call and stores its outcome.
// The handler's context does not end when the client goes away: a retry
// after a client timeout then finds the result instead of a half-done
// call. It does end when the transport stops the call on purpose
// (ErrCallStopped: a cancelled task, access revoked, shutdown). An
// internal error (or a panic, or a handler that ended with its stopped
// context's error) or a refusal such as an exhausted quota releases the
// claim, so a retry runs again; a result, or another domain error, is what
// every retry gets.
func (r *Registry) runClaimed(ctx context.Context, id int64, run func(context.Context) (Result, error)) (Result, error) {
	hctx, stop := keyedContext(ctx)
	store := r.opts.Idempotency
	renewed, done := make(chan struct{}), make(chan struct{})
	if rn, ok := store.(IdempotencyRenewer); ok {
		go func() {
			defer close(renewed)
			t := time.NewTicker(idempotencyRenew)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if err := rn.Renew(context.WithoutCancel(ctx), id); err != nil {
						r.log.WarnContext(ctx, "capabilities: idempotency renew failed", "err", err)
					}
				}
			}
		}()
	} else {
		close(renewed)
	}
	res, err := run(hctx)
	stop()
	close(done)
	<-renewed
	// Store even if the client left.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err != nil && releasesKey(CodeOf(err)) {
		if rerr := store.Release(sctx, id); rerr != nil {
			r.log.ErrorContext(ctx, "capabilities: idempotency release failed", "err", rerr)
		}
		return res, err
	}
	b, eerr := encodeOutcome(res, err)
	if eerr != nil {
		// The call ran but its result cannot be kept: the key is spent,
		// and a retry is told so rather than running the call again.
		r.log.ErrorContext(ctx, "capabilities: idempotency result cannot be stored", "err", eerr)
		b, eerr = encodeOutcome(Result{}, errResultNotKept)
	}
	if eerr == nil {
		eerr = store.Complete(sctx, id, b)
	}
	if eerr != nil {
		// Nothing could be written (the store is failing): the claim is
		// left unrenewed, and a store that expires stale claims frees it.
		r.log.ErrorContext(ctx, "capabilities: idempotency result not stored", "err", eerr)
	}
	return res, err
}

// releasesKey reports whether a call that ended with code leaves its key
// free: an internal error (a retry may succeed), and a refusal that says
// the call did not happen and may later (a quota or scope refusal, an
// account state): storing those would refuse every retry for a day, even
// after the quota resets.
func releasesKey(code Code) bool {
	switch code {
	case CodeInternal, CodeQuotaExceeded, CodeInsufficientScope, CodeAccountSuspended, CodeAccountDeleting:
		return true
	}
	return false
}

// errResultNotKept is what a retry gets when the first call ran but its
// result could not be stored.
var errResultNotKept = Errorf(CodeConflict, "a call with this idempotency key already ran, but its result could not be kept; use a new key to run it again")

// outcome is a stored result or domain error.
type outcome struct {
	Content    []storedContent `json:"content,omitempty"`
	Structured json.RawMessage `json:"structured,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	ErrCode    Code            `json:"errCode,omitempty"`
	ErrMessage string          `json:"errMessage,omitempty"`
}

type storedContent struct {
	Type        string `json:"type"`
	Text        string `json:"text,omitempty"`
	Data        []byte `json:"data,omitempty"`
	MIMEType    string `json:"mimeType,omitempty"`
	URI         string `json:"uri,omitempty"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	Blob        []byte `json:"blob,omitempty"`
	HasBlob     bool   `json:"hasBlob,omitempty"`
}

func encodeOutcome(res Result, err error) ([]byte, error) {
	var o outcome
	if err != nil {
		o.ErrCode = CodeOf(err)
		o.ErrMessage = err.Error()
		if e, ok := errors.AsType[*Error](err); ok {
			o.ErrMessage = e.Message
		}
		return json.Marshal(o)
	}
	o.IsError = res.IsError
	if res.Structured != nil {
		b, err := json.Marshal(res.Structured)
		if err != nil {
			return nil, err
		}
		o.Structured = b
	}
	for _, c := range res.Content {
		var s storedContent
		switch v := c.(type) {
		case Text:
			s = storedContent{Type: "text", Text: v.Text}
		case Image:
			s = storedContent{Type: "image", Data: v.Data, MIMEType: v.MIMEType}
		case Audio:
			s = storedContent{Type: "audio", Data: v.Data, MIMEType: v.MIMEType}
		case EmbeddedResource:
			s = storedContent{Type: "resource", URI: v.Contents.URI, MIMEType: v.Contents.MIMEType, Text: v.Contents.Text, Blob: v.Contents.Blob, HasBlob: v.Contents.Blob != nil}
		case ResourceLink:
			s = storedContent{Type: "link", URI: v.URI, Name: v.Name, Description: v.Description, MIMEType: v.MIMEType}
		default:
			return nil, fmt.Errorf("capabilities: content %T cannot be stored", c)
		}
		o.Content = append(o.Content, s)
	}
	return json.Marshal(o)
}

func decodeOutcome(b []byte) (Result, error) {
	var o outcome
	if err := json.Unmarshal(b, &o); err != nil {
		return Result{}, fmt.Errorf("capabilities: stored idempotent result: %w", err)
	}
	if o.ErrCode != "" {
		return Result{}, &Error{Code: o.ErrCode, Message: o.ErrMessage}
	}
	res := Result{IsError: o.IsError}
	if len(o.Structured) > 0 {
		res.Structured = o.Structured
	}
	for _, s := range o.Content {
		switch s.Type {
		case "text":
			res.Content = append(res.Content, Text{Text: s.Text})
		case "image":
			res.Content = append(res.Content, Image{Data: s.Data, MIMEType: s.MIMEType})
		case "audio":
			res.Content = append(res.Content, Audio{Data: s.Data, MIMEType: s.MIMEType})
		case "resource":
			rc := ResourceContents{URI: s.URI, MIMEType: s.MIMEType, Text: s.Text}
			if s.HasBlob {
				rc.Blob = s.Blob
				if rc.Blob == nil {
					rc.Blob = []byte{}
				}
			}
			res.Content = append(res.Content, EmbeddedResource{Contents: rc})
		case "link":
			res.Content = append(res.Content, ResourceLink{URI: s.URI, Name: s.Name, Description: s.Description, MIMEType: s.MIMEType})
		}
	}
	return res, nil
}
