package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/internal/egress"
	"github.com/enclave-mcp/enclave/jobs"
	"github.com/enclave-mcp/enclave/storage"
)

// The headers of a webhook request.
const (
	HeaderEventID   = "Enclave-Event-Id"
	HeaderTimestamp = "Enclave-Timestamp"
	HeaderSignature = "Enclave-Signature"
)

// Limits of webhook subscriptions.
const (
	MaxWebhooksPerAdmin = 20
	MaxWebhookURLBytes  = 2048
	MaxWebhookTypes     = 32
	MaxDescriptionBytes = 200
)

// WebhookTable is the webhook subscriptions' registration in the ownership
// inventory: owned by the admin who made it, the sealed secret redacted
// from exports.
var WebhookTable = storage.Table{Name: "webhook_subscriptions", Redact: []string{"key_id", "secret_sealed"}}

type webhookRow struct {
	bun.BaseModel       `bun:"table:webhook_subscriptions"`
	ID                  int64      `bun:"id,pk,autoincrement"`
	PublicID            string     `bun:"public_id,notnull"`
	UserID              int64      `bun:"user_id,notnull"`
	URL                 string     `bun:"url,notnull"`
	EventTypes          string     `bun:"event_types,notnull"`
	Description         string     `bun:"description,notnull"`
	KeyID               int64      `bun:"key_id,notnull"`
	SecretSealed        string     `bun:"secret_sealed,notnull"`
	ConsecutiveFailures int        `bun:"consecutive_failures,notnull"`
	LastError           string     `bun:"last_error,notnull"`
	LastAttemptAt       *time.Time `bun:"last_attempt_at"`
	LastSuccessAt       *time.Time `bun:"last_success_at"`
	DisabledAt          *time.Time `bun:"disabled_at"`
	DisabledReason      string     `bun:"disabled_reason,notnull"`
	CreatedAt           time.Time  `bun:"created_at,notnull"`
}

// Webhook is what an admin sees of one of their subscriptions: never the
// secret.
type Webhook struct {
	ID                  string     `json:"id"`
	URL                 string     `json:"url"`
	Events              []string   `json:"events"`
	Description         string     `json:"description,omitempty"`
	State               string     `json:"state" jsonschema:"disabled after repeated failed deliveries" schema:"enum=active|disabled"`
	DisabledReason      string     `json:"disabledReason,omitempty"`
	DisabledAt          *time.Time `json:"disabledAt,omitempty"`
	ConsecutiveFailures int        `json:"consecutiveFailures"`
	LastError           string     `json:"lastError,omitempty"`
	LastAttemptAt       *time.Time `json:"lastAttemptAt,omitempty"`
	LastSuccessAt       *time.Time `json:"lastSuccessAt,omitempty"`
	CreatedAt           time.Time  `json:"createdAt"`
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.UTC()
	return &v
}

func (r webhookRow) view() Webhook {
	w := Webhook{
		ID: r.PublicID, URL: r.URL, Events: splitTypes(r.EventTypes), Description: r.Description,
		State: "active", ConsecutiveFailures: r.ConsecutiveFailures, LastError: r.LastError,
		LastAttemptAt: utcPtr(r.LastAttemptAt), LastSuccessAt: utcPtr(r.LastSuccessAt),
		DisabledAt: utcPtr(r.DisabledAt), CreatedAt: r.CreatedAt.UTC(),
	}
	if r.DisabledAt != nil {
		w.State, w.DisabledReason = "disabled", r.DisabledReason
	}
	if w.Events == nil {
		w.Events = []string{}
	}
	return w
}

func splitTypes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// secretAD binds a sealed secret to its subscription and owner: a
// ciphertext copied into another row fails to open.
func secretAD(publicID string, owner int64) string {
	return "webhook-secret:" + publicID + ":" + strconv.FormatInt(owner, 10)
}

// ErrWebhookNotFound is returned for a subscription that does not exist or
// belongs to another admin.
var ErrWebhookNotFound = errors.New("events: no such webhook subscription")

// InputError is a webhook request refused for its input; the message is
// safe to show.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// CheckTarget validates a webhook URL: https, a host, no credentials, no
// fragment, at most MaxWebhookURLBytes; a literal IP address must be
// public unless allowPrivate. (Names are checked again on the address
// actually dialled, at every delivery.)
func CheckTarget(raw string, allowPrivate bool) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", &InputError{"url is required"}
	}
	if len(raw) > MaxWebhookURLBytes {
		return "", &InputError{fmt.Sprintf("url must be at most %d bytes", MaxWebhookURLBytes)}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", &InputError{"url is not a valid URL"}
	}
	if err := egress.CheckURL(u); err != nil {
		if errors.Is(err, egress.ErrScheme) {
			return "", &InputError{"url must use https"}
		}
		return "", &InputError{"url must name a host and carry no credentials"}
	}
	if u.Fragment != "" {
		return "", &InputError{"url must not have a fragment"}
	}
	if !allowPrivate {
		host := u.Hostname()
		if a, err := netip.ParseAddr(host); err == nil && !egress.Public(a) {
			return "", &InputError{"url must not point to a private, loopback or link-local address"}
		}
		if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
			return "", &InputError{"url must not point to a private, loopback or link-local address"}
		}
	}
	return u.String(), nil
}

func normalizeTypes(types []string) (string, error) {
	if len(types) > MaxWebhookTypes {
		return "", &InputError{fmt.Sprintf("at most %d event types", MaxWebhookTypes)}
	}
	var out []string
	for _, t := range types {
		t = strings.TrimSpace(t)
		if t == "" || t == "*" {
			continue
		}
		if !ValidType(t) {
			return "", &InputError{fmt.Sprintf("event type %q is not a valid type (dot-separated lowercase words, such as user.created)", t)}
		}
		if !contains(out, t) {
			out = append(out, t)
		}
	}
	return strings.Join(out, ","), nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// NewWebhookSecret returns a fresh signing secret.
func newWebhookSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}

// CreateWebhook makes a subscription owned by the admin ownerID (users.id)
// and returns it with its signing secret, which is never shown again.
// allowPrivate is the server's --webhook-allow-private.
func (b *Bus) CreateWebhook(ctx context.Context, ownerID int64, rawURL string, types []string, description string) (Webhook, string, error) {
	target, err := CheckTarget(rawURL, b.opts.AllowPrivate)
	if err != nil {
		return Webhook{}, "", err
	}
	joined, err := normalizeTypes(types)
	if err != nil {
		return Webhook{}, "", err
	}
	description = strings.TrimSpace(description)
	if len(description) > MaxDescriptionBytes {
		return Webhook{}, "", &InputError{fmt.Sprintf("description must be at most %d bytes", MaxDescriptionBytes)}
	}
	secret := newWebhookSecret()
	row := webhookRow{PublicID: "wh_" + strings.ToLower(rand.Text()), UserID: ownerID, URL: target,
		EventTypes: joined, Description: description, CreatedAt: b.now()}
	if row.KeyID, row.SecretSealed, err = b.opts.Ring.Seal(secretAD(row.PublicID, ownerID), []byte(secret)); err != nil {
		return Webhook{}, "", fmt.Errorf("events: create webhook: %w", err)
	}
	err = b.opts.Store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if b.opts.Store.Dialect() == storage.Postgres {
			// One creation at a time per admin, so the count below
			// sees the others' rows and the limit holds. (SQLite
			// writes are serial already.)
			var id int64
			if err := tx.NewSelect().Table("users").Column("id").Where("id = ?", ownerID).For("UPDATE").Scan(ctx, &id); err != nil {
				return err
			}
		}
		n, err := tx.NewSelect().Model((*webhookRow)(nil)).Where("user_id = ?", ownerID).Count(ctx)
		if err != nil {
			return err
		}
		if n >= MaxWebhooksPerAdmin {
			return &InputError{fmt.Sprintf("at most %d webhook subscriptions per admin; delete one first", MaxWebhooksPerAdmin)}
		}
		_, err = tx.NewInsert().Model(&row).Returning("id").Exec(ctx)
		return err
	})
	if err != nil {
		if ie := (*InputError)(nil); errors.As(err, &ie) {
			return Webhook{}, "", ie
		}
		return Webhook{}, "", fmt.Errorf("events: create webhook: %w", err)
	}
	return row.view(), secret, nil
}

// Webhooks lists the subscriptions of the admin ownerID, oldest first.
func (b *Bus) Webhooks(ctx context.Context, ownerID int64) ([]Webhook, error) {
	var rows []webhookRow
	if err := b.opts.Store.DB.NewSelect().Model(&rows).Where("user_id = ?", ownerID).Order("id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("events: list webhooks: %w", err)
	}
	out := make([]Webhook, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.view())
	}
	return out, nil
}

// DeleteWebhook removes the admin ownerID's subscription publicID;
// ErrWebhookNotFound when they have none of that id.
func (b *Bus) DeleteWebhook(ctx context.Context, ownerID int64, publicID string) error {
	res, err := b.opts.Store.DB.NewDelete().Model((*webhookRow)(nil)).
		Where("public_id = ? AND user_id = ?", publicID, ownerID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("events: delete webhook: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrWebhookNotFound
	}
	return nil
}

// adminOwner is the condition that a subscription's owner (users AS u) is
// an active admin right now.
const adminOwner = `u.suspended_at IS NULL AND u.deleting_at IS NULL
	AND EXISTS (SELECT 1 FROM user_roles AS r WHERE r.user_id = u.id AND r.role_name = 'admin')`

type target struct {
	ID            int64  `bun:"id"`
	PublicID      string `bun:"public_id"`
	EventTypes    string `bun:"event_types"`
	OwnerStableID string `bun:"stable_user_id"`
}

// activeSubscriptions lists the enabled subscriptions whose owner is an
// active admin now.
func activeSubscriptions(ctx context.Context, db bun.IDB) ([]target, error) {
	var out []target
	err := db.NewSelect().TableExpr("webhook_subscriptions AS w").
		ColumnExpr("w.id, w.public_id, w.event_types, u.stable_user_id").
		Join("JOIN users AS u ON u.id = w.user_id").
		Where("w.disabled_at IS NULL").Where(adminOwner).Order("w.id").Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("events: webhook recipients: %w", err)
	}
	return out, nil
}

// Sign returns the Enclave-Signature value of body sent at timestamp (unix
// seconds) with secret: "v1=" and the hex HMAC-SHA256 of
// "<timestamp>.<body>".
func Sign(secret string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// deliverWebhook sends one event to one subscription. The subscription and
// its owner's admin role are read fresh at every attempt: a subscription
// deleted or disabled, or whose owner is no longer an active admin, gets
// nothing.
func (b *Bus) deliverWebhook(ctx context.Context, job jobs.Job) error {
	var p webhookJob
	if err := job.Decode(&p); err != nil {
		return nil
	}
	// One delivery at a time per subscription (on this replica): the
	// relay runs a topic's jobs side by side, and a failing target is
	// disabled after MaxFailures attempts, not after as many as were in
	// flight. The row is read after the turn comes, so a delivery that
	// waited behind the one that disabled it sends nothing.
	unlock := b.lockSubscription(p.Subscription)
	defer unlock()
	var row webhookRow
	sel := b.opts.Store.DB.NewSelect().Model(&row).
		Join("JOIN users AS u ON u.id = webhook_row.user_id").
		Where("webhook_row.id = ? AND webhook_row.disabled_at IS NULL", p.Subscription).Where(adminOwner)
	if p.SubscriptionID != "" {
		// The very subscription chosen at dispatch, not a newer one
		// that took its row id after it was deleted.
		sel = sel.Where("webhook_row.public_id = ?", p.SubscriptionID)
	}
	err := sel.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // gone, disabled, or its owner is no longer an admin
	}
	if err != nil {
		return fmt.Errorf("events: load webhook: %w", err)
	}
	if !matches(splitTypes(row.EventTypes), p.Event.Type) {
		return nil // not a type this subscription asked for
	}
	e, ok, err := b.enriched(ctx, p.Event)
	if err != nil {
		return fmt.Errorf("events: webhook %s: %w", row.PublicID, err)
	}
	if !ok {
		return nil // what the event is about is gone
	}
	p.Event = e
	secret, err := b.opts.Ring.Open(ctx, row.KeyID, row.SecretSealed, secretAD(row.PublicID, row.UserID))
	if err != nil {
		return fmt.Errorf("events: open webhook secret: %w", err)
	}
	body, err := json.Marshal(p.Event)
	if err != nil {
		return nil
	}
	status, sendErr := b.send(ctx, row.URL, string(secret), p.Event.ID, body)
	now := b.now()
	if sendErr == nil {
		_, err := b.opts.Store.DB.NewUpdate().Model((*webhookRow)(nil)).
			Set("consecutive_failures = 0").Set("last_error = ''").
			Set("last_attempt_at = ?", now).Set("last_success_at = ?", now).
			Where("id = ?", row.ID).Exec(ctx)
		if err != nil {
			b.log.WarnContext(ctx, "events: record webhook success", "err", err)
		}
		return nil
	}
	reason := sendErr.Error()
	// The count is the row's own, incremented in place (other replicas
	// may be recording failures of the same subscription).
	failures := row.ConsecutiveFailures + 1
	var counted []int
	err = b.opts.Store.DB.NewUpdate().Model((*webhookRow)(nil)).
		Set("consecutive_failures = consecutive_failures + 1").Set("last_error = ?", reason).
		Set("last_attempt_at = ?", now).Where("id = ? AND disabled_at IS NULL", row.ID).
		Returning("consecutive_failures").Scan(ctx, &counted)
	if err != nil {
		b.log.WarnContext(ctx, "events: record webhook failure", "err", err)
	} else if len(counted) == 1 {
		failures = counted[0]
	}
	disable := failures >= b.opts.MaxFailures
	if disable {
		_, err := b.opts.Store.DB.NewUpdate().Model((*webhookRow)(nil)).Set("disabled_at = ?", now).
			Set("disabled_reason = ?", fmt.Sprintf("disabled after %d failed deliveries in a row; last: %s", failures, reason)).
			Where("id = ? AND disabled_at IS NULL", row.ID).Exec(ctx)
		if err != nil {
			b.log.WarnContext(ctx, "events: disable webhook", "err", err)
		}
	}
	b.log.WarnContext(ctx, "events: webhook delivery failed", "subscription", row.PublicID, "event", p.Event.ID, "status", status, "reason", reason, "disabled", disable)
	if disable {
		return nil // nothing more goes to a disabled subscription
	}
	return fmt.Errorf("events: webhook %s: %s", row.PublicID, reason)
}

// lockSubscription waits for the turn of subscription id on this bus and
// returns the function that ends it.
func (b *Bus) lockSubscription(id int64) func() {
	b.turnsMu.Lock()
	t := b.turns[id]
	if t == nil {
		t = &turn{}
		b.turns[id] = t
	}
	t.users++
	b.turnsMu.Unlock()
	t.mu.Lock()
	return func() {
		t.mu.Unlock()
		b.turnsMu.Lock()
		if t.users--; t.users == 0 {
			delete(b.turns, id)
		}
		b.turnsMu.Unlock()
	}
}

// turn serializes the deliveries of one subscription; users counts the
// deliveries holding or waiting for it.
type turn struct {
	mu    sync.Mutex
	users int
}

// deliveryError is a failed attempt, described for the admin.
type deliveryError struct{ msg string }

func (e *deliveryError) Error() string { return e.msg }

// send POSTs one signed request and returns the response status.
func (b *Bus) send(ctx context.Context, target, secret, eventID string, body []byte) (int, error) {
	ts := b.opts.Now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, &deliveryError{"invalid target URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "enclave-webhooks/1")
	req.Header.Set(HeaderEventID, eventID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(secret, ts, body))
	resp, err := b.opts.Client.Do(req)
	if err != nil {
		return 0, describe(err)
	}
	defer resp.Body.Close()
	_, _ = egress.ReadAll(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, &deliveryError{fmt.Sprintf("HTTP %d", resp.StatusCode)}
	}
	return resp.StatusCode, nil
}

// describe turns a transport error into a short reason an admin can act
// on, without internal detail.
func describe(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, egress.ErrForbiddenAddress):
		return &deliveryError{"the target resolved to a private, loopback or link-local address"}
	case errors.Is(err, egress.ErrScheme):
		return &deliveryError{"the target (or a redirect) is not https"}
	case errors.Is(err, egress.ErrTooManyRedirects):
		return &deliveryError{"too many redirects"}
	case errors.As(err, &ne) && ne.Timeout():
		return &deliveryError{"timed out"}
	case errors.Is(err, context.Canceled):
		return &deliveryError{"cancelled"}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return &deliveryError{"the target's host name did not resolve"}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &deliveryError{"could not connect to the target"}
	}
	if strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "x509") || strings.Contains(err.Error(), "certificate") {
		return &deliveryError{"TLS handshake with the target failed"}
	}
	return &deliveryError{"the request failed"}
}
