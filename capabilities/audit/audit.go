// Package audit keeps the security audit log: who was refused, signed in,
// changed a password or a role, and when. Identifiers are keyed hashes, so
// the log can be searched for one user (hash their stable id the same way)
// without holding anyone's id, email or address in clear.
//
// Log implements capabilities.Auditor for the registry's choke point; the
// transports record token rejections and browser authentication events with
// Record. Rows older than the retention window (default 180 days) are
// removed by Purge. Admins read the log through the adminAuditLogQuery
// capability (see Register).
package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/internal/tracing"
	"github.com/enclave-mcp/enclave/storage"
)

// DefaultRetention is how long events are kept.
const DefaultRetention = 180 * 24 * time.Hour

// Categories of events.
const (
	CategoryMCP        = "mcp"        // token checks at /mcp
	CategoryCapability = "capability" // the registry's choke point
	CategoryAuth       = "auth"       // browser sign-in, sign-up, passwords
	CategoryAccount    = "account"    // roles, suspension, deletion
	CategoryOutbound   = "outbound"   // secrets filled into outbound requests
)

// Results.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
	ResultDenied  = "denied"
)

// Event is one audit row. UserHash and IPHash hold keyed hashes (HashUser,
// HashIP), never raw values.
type Event struct {
	bun.BaseModel `bun:"table:audit_events"`
	ID            int64     `bun:"id,pk,autoincrement" json:"id"`
	At            time.Time `bun:"at,notnull" json:"at"`
	Category      string    `bun:"category,notnull" json:"category" jsonschema:"mcp, capability, auth, account or outbound (an embedder may record its own)"`
	Action        string    `bun:"action,notnull" json:"action"`
	Result        string    `bun:"result,notnull" json:"result" schema:"enum=success|failure|denied"`
	Reason        string    `bun:"reason,notnull" json:"reason,omitempty"`
	UserHash      string    `bun:"user_hash,notnull" json:"userHash,omitempty"`
	IPHash        string    `bun:"ip_hash,notnull" json:"ipHash,omitempty"`
	ClientID      string    `bun:"client_id,notnull" json:"clientId,omitempty"`
	// TraceID is the trace the event was recorded in (Record fills it
	// from the context's span when tracing is on), for finding the
	// request's trace; a caller sending a traceparent chooses it.
	TraceID string `bun:"trace_id,notnull" json:"traceId,omitempty" jsonschema:"the W3C trace id of the request the event was recorded in, when the server traces requests"`
}

// Log writes and reads audit events.
type Log struct {
	store *storage.Store
	key   []byte
	log   *slog.Logger
	now   func() time.Time
}

// New returns a log that hashes identifiers with key (32 random bytes kept
// by the platform; the same key must be used by every replica).
func New(store *storage.Store, key []byte, logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	return &Log{store: store, key: key, log: logger, now: func() time.Time { return time.Now().UTC() }}
}

func (l *Log) hash(kind, v string) string {
	if v == "" {
		return ""
	}
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(kind + ":" + v))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// HashUser hashes a stable user id for the log. It is the one scheme of
// every row's UserHash (web events, capability denials, token refusals),
// and the one adminAuditLogQuery applies to its userId.
func (l *Log) HashUser(stableUserID string) string { return l.hash("user", stableUserID) }

// HashIP hashes a client's address for the log by its client network
// (clientnet.Network: the IPv4 /24, the IPv6 /64), so the address itself
// is never recorded and every row of one network carries the same hash. It
// is the one network scheme of every row's IPHash and of the denial-burst
// alert's network subject, so an alert's subject finds the audit rows of
// its network. A value that is no address is hashed as it is.
func (l *Log) HashIP(ip string) string {
	if n := clientnet.Network(ip); n != "" {
		ip = n
	}
	return l.hash("ip", ip)
}

// Record writes e, stamping the time when e.At is zero. A failure is
// returned and logged; auditing never blocks the request it describes.
func (l *Log) Record(ctx context.Context, e Event) error {
	if e.At.IsZero() {
		e.At = l.now()
	}
	if e.TraceID == "" {
		e.TraceID = tracing.TraceID(ctx)
	}
	e.ID = 0
	if _, err := l.store.DB.NewInsert().Model(&e).Returning("NULL").Exec(ctx); err != nil {
		l.log.Error("audit: write failed", "category", e.Category, "action", e.Action, "err", err)
		return fmt.Errorf("audit: record: %w", err)
	}
	return nil
}

// RecordDenial implements capabilities.Auditor: every refusal at the
// registry's choke point. The caller's id is hashed with HashUser, like
// every other row's, so one user's denials, token refusals and web events
// are found with the same hash.
func (l *Log) RecordDenial(ctx context.Context, d capabilities.Denial) {
	_ = l.Record(ctx, Event{
		At:       d.At.UTC(),
		Category: CategoryCapability,
		Action:   d.Surface + ":" + d.Name,
		Result:   ResultDenied,
		Reason:   string(d.Reason),
		UserHash: l.HashUser(d.UserID),
	})
}

// ActorOperator is the Reason of a row recording a call of the server's
// operator (the command line), and the start of it when the call failed
// ("operator: conflict").
const ActorOperator = "operator"

// RecordOperatorCall implements capabilities.OperatorAuditor: every call
// of the operator's command line that the choke point let run, as a
// capability row ("tool:<name>") whose Reason names the actor, the
// operator (with the failure's code after a colon when it failed), and
// whose UserHash is the account the call acted on (HashUser of its stable
// id; empty when it named none). The operator has no user id of its own.
func (l *Log) RecordOperatorCall(ctx context.Context, c capabilities.OperatorCall) {
	e := Event{At: c.At.UTC(), Category: CategoryCapability, Action: "tool:" + c.Name, Result: ResultSuccess,
		Reason: ActorOperator, UserHash: l.HashUser(c.Subject)}
	if c.Outcome != "ok" {
		e.Result, e.Reason = ResultFailure, ActorOperator+": "+c.Outcome
	}
	_ = l.Record(ctx, e)
}

// Purge removes events older than retention (DefaultRetention when zero).
func (l *Log) Purge(ctx context.Context, retention time.Duration) (int64, error) {
	if retention <= 0 {
		retention = DefaultRetention
	}
	res, err := l.store.DB.NewDelete().Model((*Event)(nil)).Where("at < ?", l.now().Add(-retention)).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("audit: purge: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Filter narrows a query; zero fields match everything.
type Filter struct {
	Category string
	Action   string
	Result   string
	UserHash string
	TraceID  string
	Since    time.Time
	Until    time.Time
}

// Query pages through events, newest first.
func (l *Log) Query(ctx context.Context, f Filter, req storage.PageRequest) (storage.Page[Event], error) {
	q := l.store.Reader.NewSelect().Model((*Event)(nil))
	for col, v := range map[string]string{"category": f.Category, "action": f.Action, "result": f.Result, "user_hash": f.UserHash, "trace_id": f.TraceID} {
		if v != "" {
			q = q.Where("? = ?", bun.Ident(col), v)
		}
	}
	if !f.Since.IsZero() {
		q = q.Where("at >= ?", f.Since.UTC())
	}
	if !f.Until.IsZero() {
		q = q.Where("at < ?", f.Until.UTC())
	}
	return storage.Paginate(ctx, q, storage.Keyset[Event]{
		Kind: "audit", Column: "id", Key: func(e *Event) any { return e.ID }, Desc: true,
	}, req)
}

var (
	_ capabilities.Auditor         = (*Log)(nil)
	_ capabilities.OperatorAuditor = (*Log)(nil)
)
