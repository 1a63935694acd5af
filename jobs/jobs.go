// Package jobs runs an embedder's durable post-commit work.
//
// A job is enqueued inside the caller's own transaction (Queue.Enqueue with
// the bun.Tx of the change that needs it), so it exists exactly when the
// change commits. After the commit a background relay, running on every
// replica, hands each job to the handler registered for its kind: once per
// lease across replicas, retried with exponential backoff (2 s doubled per
// attempt, at most an hour) on error, and after the last attempt (8) kept
// as a dead letter, which retention removes after Config.JobRetention.
// Delivery is at least once: make handlers idempotent.
//
// A job may concern a user (Enqueue with the user's stable id): its row
// then carries the owner, the account's export lists it (payload redacted)
// and the account's deletion removes it. A handler acts for that user only
// through Job.Invoke, which runs a capability through the registry as a
// non-interactive caller: Registry.Invoke loads the account's roles fresh,
// refuses a suspended or deleting account, and refuses capabilities marked
// InteractiveOnly.
//
// Jobs share the outbox table and relay with enclave's own mail, so there
// is one mechanism to operate. Get the Queue from enclave.Server.Jobs and
// register every kind before Run.
package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
)

// TopicPrefix starts the outbox topic of every job kind.
const TopicPrefix = "job:"

// Handler does one job. An error retries it later (with backoff) until the
// last attempt, after which the job is kept as a dead letter.
type Handler func(ctx context.Context, job Job) error

// InvokeFunc runs a capability for a user as a non-interactive caller. The
// server provides it (see enclave.Server.InvokeBackground).
type InvokeFunc func(ctx context.Context, userID, capability string, args json.RawMessage) (capabilities.Result, error)

// Writer records outbox rows in a transaction; the server provides it.
type Writer interface {
	AddOwned(ctx context.Context, db bun.IDB, topic string, ownerID int64, payload []byte) error
}

// Job is one unit of work handed to a Handler.
type Job struct {
	// Kind is the registered kind.
	Kind string
	// UserID is the stable id of the user the job concerns, or "".
	UserID string
	// Payload is the JSON the job was enqueued with.
	Payload json.RawMessage

	invoke InvokeFunc
}

// Decode unmarshals the payload into v.
func (j Job) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

// Invoke runs a capability as the job's user, through the registry, as a
// non-interactive caller. args is marshalled to JSON (nil means no
// arguments). A job that concerns no user cannot invoke capabilities.
func (j Job) Invoke(ctx context.Context, capability string, args any) (capabilities.Result, error) {
	if j.UserID == "" {
		return capabilities.Result{}, errors.New("jobs: a job without a user cannot invoke capabilities")
	}
	if j.invoke == nil {
		return capabilities.Result{}, errors.New("jobs: no invoker configured")
	}
	raw, err := marshalArgs(args)
	if err != nil {
		return capabilities.Result{}, err
	}
	return j.invoke(ctx, j.UserID, capability, raw)
}

func marshalArgs(args any) (json.RawMessage, error) {
	switch a := args.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return a, nil
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode arguments: %w", err)
	}
	return raw, nil
}

// ErrUnknownKind is returned by Enqueue for a kind nobody registered.
var ErrUnknownKind = errors.New("jobs: unknown job kind")

// ErrUnknownUser is returned by Enqueue for a user id with no account.
var ErrUnknownUser = errors.New("jobs: unknown user")

var kindName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// Queue registers job kinds and enqueues jobs. It is safe for concurrent
// use.
type Queue struct {
	w      Writer
	invoke InvokeFunc

	mu    sync.RWMutex
	kinds map[string]Handler
}

// New returns a queue writing through w and invoking capabilities through
// invoke. Embedders do not call it: enclave.New builds the server's queue.
func New(w Writer, invoke InvokeFunc) *Queue {
	return &Queue{w: w, invoke: invoke, kinds: map[string]Handler{}}
}

// Register adds the handler of a kind: a lowercase name of letters,
// digits, '_', '-' and '.', at most 64 characters. Register every kind
// before the server runs; a kind registered twice is refused.
func (q *Queue) Register(kind string, h Handler) error {
	if !kindName.MatchString(kind) {
		return fmt.Errorf("jobs: kind %q: want a lowercase name (letters, digits, _ - .)", kind)
	}
	if h == nil {
		return fmt.Errorf("jobs: kind %q: nil handler", kind)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.kinds[kind]; ok {
		return fmt.Errorf("jobs: kind %q registered twice", kind)
	}
	q.kinds[kind] = h
	return nil
}

// envelope is the sealed outbox payload of a job.
type envelope struct {
	User    string          `json:"user,omitempty"`
	Payload json.RawMessage `json:"payload"`
}

// Enqueue records a job of kind inside db, which should be the transaction
// of the change that needs it: the job runs after that transaction commits
// and never if it rolls back. userID is the stable id of the user the job
// concerns ("" for none); payload is marshalled to JSON. The payload is
// sealed at rest.
func (q *Queue) Enqueue(ctx context.Context, db bun.IDB, kind, userID string, payload any) error {
	q.mu.RLock()
	_, ok := q.kinds[kind]
	q.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownKind, kind)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("jobs: encode payload: %w", err)
	}
	var owner int64
	if userID != "" {
		err := db.NewSelect().Table("users").Column("id").Where("stable_user_id = ?", userID).Scan(ctx, &owner)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrUnknownUser
		}
		if err != nil {
			return fmt.Errorf("jobs: find owner: %w", err)
		}
	}
	env, err := json.Marshal(envelope{User: userID, Payload: raw})
	if err != nil {
		return fmt.Errorf("jobs: encode: %w", err)
	}
	if err := q.w.AddOwned(ctx, db, TopicPrefix+kind, owner, env); err != nil {
		return fmt.Errorf("jobs: enqueue %s: %w", kind, err)
	}
	return nil
}

// Topics returns, for the server's relay, the outbox handler of every
// registered kind, keyed by topic.
func (q *Queue) Topics() map[string]func(ctx context.Context, payload []byte) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	out := make(map[string]func(context.Context, []byte) error, len(q.kinds))
	for kind, h := range q.kinds {
		out[TopicPrefix+kind] = func(ctx context.Context, payload []byte) error {
			var env envelope
			if err := json.Unmarshal(payload, &env); err != nil {
				return fmt.Errorf("jobs: %s: decode: %w", kind, err)
			}
			return h(ctx, Job{Kind: kind, UserID: env.User, Payload: env.Payload, invoke: q.invoke})
		}
	}
	return out
}
