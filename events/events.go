// Package events publishes admin events: what happened to accounts, roles,
// platform feedback and security, plus any event an embedder defines.
//
// An event is published inside the transaction of the change it reports
// (Bus.Publish with that bun.Tx): it is written to the outbox as a job, so
// it exists exactly when the change commits and never when it rolls back.
// After the commit the job relay dispatches it. Dispatch chooses the
// recipients at that moment: every in-process subscriber registered with
// Bus.Subscribe for the event's type, and every enabled webhook
// subscription whose owner is, right then, an active admin. Each recipient
// gets its own delivery job, retried with backoff on its own, so a failing
// webhook never delays or repeats another recipient's delivery. Delivery
// is at least once: a recipient may see an event id twice and should
// ignore repeats.
//
// Payloads carry identifiers and the fields that changed, never secrets,
// tokens, credential hashes or unrelated account content.
package events

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/storage"
)

// The built-in event types.
const (
	UserCreated         = "user.created"
	UserDeleted         = "user.deleted"
	UserSuspended       = "user.suspended"
	UserUnsuspended     = "user.unsuspended"
	RoleAssigned        = "role.assigned"
	RoleRemoved         = "role.removed"
	FeedbackSubmitted   = "feedback.submitted"
	FeedbackUpdated     = "feedback.updated"
	SecurityDenialBurst = "security.denial_burst"
)

// BuiltinTypes lists the built-in event types.
var BuiltinTypes = []string{
	UserCreated, UserDeleted, UserSuspended, UserUnsuspended,
	RoleAssigned, RoleRemoved, FeedbackSubmitted, FeedbackUpdated, SecurityDenialBurst,
}

// Job kinds the bus registers on the job queue.
const (
	kindDispatch   = "enclave.event"
	kindSubscriber = "enclave.event.subscriber"
	kindWebhook    = "enclave.event.webhook"
)

// Event is one published event, as subscribers and webhooks receive it.
type Event struct {
	// ID is unique per event ("evt_" and 26 random characters); a
	// recipient that sees an id twice ignores the repeat.
	ID string `json:"id"`
	// Type is the event type, such as "user.created".
	Type string `json:"type"`
	// CreatedAt is when the event was published (UTC).
	CreatedAt time.Time `json:"createdAt"`
	// Data is the event's payload: identifiers and changed fields.
	Data json.RawMessage `json:"data"`
}

// Enricher completes the data of an event at each delivery, from the
// current state: an event recorded with identifiers only gains the
// content its recipients may see, read fresh, so that content deleted
// meanwhile is never delivered. ok false drops the delivery (what the
// event is about is gone); an error retries it.
type Enricher func(ctx context.Context, e Event) (data json.RawMessage, ok bool, err error)

// Subscriber receives events in process. An error retries the delivery
// later (with backoff), for this subscriber only.
type Subscriber func(ctx context.Context, e Event) error

// typeName is the shape of an event type: dot-separated lowercase words.
var typeName = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// subscriberName is the shape of a subscriber's name.
var subscriberName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// ValidType reports whether t is a well-formed event type: at most 64
// characters, two or more dot-separated lowercase words ("invoice.paid").
func ValidType(t string) bool { return len(t) <= 64 && typeName.MatchString(t) }

// Options configure a Bus.
type Options struct {
	// Store is the server's store (required).
	Store *storage.Store
	// Jobs is the server's job queue (required): events ride it.
	Jobs *jobs.Queue
	// Ring seals webhook secrets at rest (required).
	Ring *envelope.Ring
	// Client sends webhook requests. It must refuse non-public addresses
	// at connect time; default an internal/egress client following no
	// redirects (the server builds its own with Config.WebhookRootCAs).
	Client *http.Client
	// AllowPrivate accepts webhook URLs naming private, loopback or
	// link-local addresses (the server's --webhook-allow-private; the
	// Client must then allow them too). https is required regardless.
	AllowPrivate bool
	// MaxFailures is how many failed delivery attempts in a row disable a
	// webhook subscription. Default 15.
	MaxFailures int
	// Logger receives delivery warnings. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// DefaultMaxFailures is the default of Options.MaxFailures.
const DefaultMaxFailures = 15

// Bus publishes events and delivers them. It is safe for concurrent use.
type Bus struct {
	opts Options
	log  *slog.Logger

	mu     sync.RWMutex
	subs   map[string]subscription
	enrich map[string]Enricher

	turnsMu sync.Mutex
	turns   map[int64]*turn // deliveries holding or waiting for a subscription
}

type subscription struct {
	types   []string // empty: every type
	handler Subscriber
}

// New returns a bus and registers its job kinds on opts.Jobs.
func New(opts Options) (*Bus, error) {
	if opts.Store == nil || opts.Jobs == nil || opts.Ring == nil {
		return nil, errors.New("events: new: Store, Jobs and Ring are required")
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = DefaultMaxFailures
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Client == nil {
		opts.Client = egress.NewClient(egress.Options{AllowPrivate: opts.AllowPrivate, MaxRedirects: -1})
	}
	b := &Bus{opts: opts, log: opts.Logger, subs: map[string]subscription{}, enrich: map[string]Enricher{}, turns: map[int64]*turn{}}
	err := errors.Join(
		opts.Jobs.Register(kindDispatch, b.dispatch),
		opts.Jobs.Register(kindSubscriber, b.deliverSubscriber),
		opts.Jobs.Register(kindWebhook, b.deliverWebhook),
	)
	if err != nil {
		return nil, fmt.Errorf("events: new: %w", err)
	}
	return b, nil
}

func (b *Bus) now() time.Time { return b.opts.Now().UTC().Truncate(time.Microsecond) }

// Subscribe registers an in-process subscriber under a unique name
// (lowercase letters, digits, '_', '-', '.'; at most 64 characters) for
// the given event types (none: every type). Register subscribers before
// the server runs; a delivery to a name no longer registered (after a
// restart without it) is dropped.
func (b *Bus) Subscribe(name string, h Subscriber, types ...string) error {
	if !subscriberName.MatchString(name) {
		return fmt.Errorf("events: subscriber %q: want a lowercase name (letters, digits, _ - .)", name)
	}
	if h == nil {
		return fmt.Errorf("events: subscriber %q: nil handler", name)
	}
	for _, t := range types {
		if !ValidType(t) {
			return fmt.Errorf("events: subscriber %q: invalid event type %q", name, t)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[name]; ok {
		return fmt.Errorf("events: subscriber %q registered twice", name)
	}
	b.subs[name] = subscription{types: slices.Clone(types), handler: h}
	return nil
}

// Enrich registers the enricher of an event type (one per type; a second
// replaces the first). Register it before the server runs.
func (b *Bus) Enrich(typ string, f Enricher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.enrich[typ] = f
}

// enriched returns e with its data completed by the type's enricher, or
// ok false when the delivery is to be dropped.
func (b *Bus) enriched(ctx context.Context, e Event) (Event, bool, error) {
	b.mu.RLock()
	f := b.enrich[e.Type]
	b.mu.RUnlock()
	if f == nil {
		return e, true, nil
	}
	data, ok, err := f(ctx, e)
	if err != nil || !ok {
		return e, false, err
	}
	e.Data = data
	return e, true, nil
}

// Publish records an event of type typ with data (marshalled to JSON)
// inside db, which should be the transaction of the change the event
// reports: the event is dispatched after that transaction commits and
// never if it rolls back. data should hold identifiers and the changed
// fields only: never secrets, tokens or unrelated content.
func (b *Bus) Publish(ctx context.Context, db bun.IDB, typ string, data any) (Event, error) {
	if !ValidType(typ) {
		return Event{}, fmt.Errorf("events: publish: invalid event type %q", typ)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("events: publish %s: encode data: %w", typ, err)
	}
	if data == nil {
		raw = json.RawMessage("{}")
	}
	e := Event{ID: "evt_" + rand.Text(), Type: typ, CreatedAt: b.now(), Data: raw}
	if err := b.opts.Jobs.Enqueue(ctx, db, kindDispatch, "", e); err != nil {
		return Event{}, fmt.Errorf("events: publish %s: %w", typ, err)
	}
	return e, nil
}

// Record is Publish without the event: the shape of the hooks through
// which other domains record an event in their own transaction.
func (b *Bus) Record(ctx context.Context, db bun.IDB, typ string, data any) error {
	_, err := b.Publish(ctx, db, typ, data)
	return err
}

// PublishNow is Publish in a transaction of its own, for an event that
// reports no database change (a denial burst, for example).
func (b *Bus) PublishNow(ctx context.Context, typ string, data any) (Event, error) {
	var e Event
	err := b.opts.Store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var err error
		e, err = b.Publish(ctx, tx, typ, data)
		return err
	})
	return e, err
}

func matches(types []string, t string) bool {
	return len(types) == 0 || slices.Contains(types, t)
}

// subscriberJob is the payload of one in-process delivery.
type subscriberJob struct {
	Name  string `json:"name"`
	Event Event  `json:"event"`
}

// webhookJob is the payload of one webhook delivery.
type webhookJob struct {
	Subscription int64 `json:"subscription"`
	// SubscriptionID is the subscription's public id: row ids come back
	// (SQLite hands out the highest rowid again once its row is deleted),
	// public ids never do, so a delivery waiting for a deleted
	// subscription never reaches a newer one that took its row id.
	SubscriptionID string `json:"subscriptionId,omitempty"`
	Event          Event  `json:"event"`
}

// dispatch chooses the recipients of one event, now, and queues a delivery
// for each in one transaction.
func (b *Bus) dispatch(ctx context.Context, job jobs.Job) error {
	var e Event
	if err := job.Decode(&e); err != nil {
		b.log.ErrorContext(ctx, "events: undecodable event dropped", "err", err)
		return nil
	}
	b.mu.RLock()
	var names []string
	for name, s := range b.subs {
		if matches(s.types, e.Type) {
			names = append(names, name)
		}
	}
	b.mu.RUnlock()
	slices.Sort(names)
	return b.opts.Store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		for _, name := range names {
			if err := b.opts.Jobs.Enqueue(ctx, tx, kindSubscriber, "", subscriberJob{Name: name, Event: e}); err != nil {
				return err
			}
		}
		targets, err := activeSubscriptions(ctx, tx)
		if err != nil {
			return err
		}
		for _, t := range targets {
			if !matches(splitTypes(t.EventTypes), e.Type) {
				continue
			}
			// Owned by the admin: their account's deletion removes the
			// delivery still waiting.
			if err := b.opts.Jobs.Enqueue(ctx, tx, kindWebhook, t.OwnerStableID, webhookJob{Subscription: t.ID, SubscriptionID: t.PublicID, Event: e}); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *Bus) deliverSubscriber(ctx context.Context, job jobs.Job) error {
	var p subscriberJob
	if err := job.Decode(&p); err != nil {
		return nil
	}
	b.mu.RLock()
	s, ok := b.subs[p.Name]
	b.mu.RUnlock()
	if !ok {
		b.log.WarnContext(ctx, "events: delivery to a subscriber no longer registered dropped", "subscriber", p.Name, "event", p.Event.ID)
		return nil
	}
	e, ok, err := b.enriched(ctx, p.Event)
	if err != nil {
		return fmt.Errorf("events: subscriber %s: %w", p.Name, err)
	}
	if !ok {
		return nil
	}
	if err := s.handler(ctx, e); err != nil {
		return fmt.Errorf("events: subscriber %s: %w", p.Name, err)
	}
	return nil
}
