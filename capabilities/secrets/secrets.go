// Package secrets keeps per-user named secrets (API keys, tokens) sealed
// with AES-256-GCM under keeper-wrapped data keys. A secret's value is bound
// to its owner and name ("secret:user:<stable user id>:<name>"), so a
// ciphertext moved to another row or another user does not open.
//
// Agents set, list (metadata only) and delete secrets; only the owner's
// session-authenticated account page reveals a value (Reveal). Exports carry
// metadata, never values.
//
// Each secret carries a use policy that only its owner sets, on the account
// page: the hosts it may be sent to (AllowedHosts, see NormalizeHost) and
// when it stops being usable (ExpiresAt). The outbound gateway
// (capabilities/outbound) fills a secret into a request only through Use,
// which refuses an expired secret; a secret with no allowed host is never
// sent anywhere.
package secrets

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/storage"
)

// Limits on names, descriptions and values.
const (
	MaxValueBytes       = 64 << 10
	MaxDescriptionRunes = 500
)

var (
	// ErrNotFound: the caller has no secret of that name.
	ErrNotFound = errors.New("secrets: no such secret")
	// ErrInvalid: a name, description or value breaks the rules.
	ErrInvalid = errors.New("secrets: invalid secret")
	// ErrExpired: the secret's ExpiresAt has passed; it is never used.
	ErrExpired = errors.New("secrets: secret expired")
)

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Secret is a secret's metadata.
type Secret struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// AllowedHosts are the hosts the owner approved the secret for (see
	// NormalizeHost); empty: it is sent nowhere.
	AllowedHosts []string `json:"allowedHosts"`
	// ExpiresAt is when the secret stops being usable; nil: never.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
}

// Expired reports whether the secret's expiry has passed at now.
func (s Secret) Expired(now time.Time) bool {
	return s.ExpiresAt != nil && !now.Before(*s.ExpiresAt)
}

// Policy is a secret's use policy, set by its owner.
type Policy struct {
	AllowedHosts []string
	ExpiresAt    *time.Time
}

func (p Policy) normalize() (Policy, error) {
	hosts, err := NormalizeHosts(p.AllowedHosts)
	if err != nil {
		return Policy{}, err
	}
	out := Policy{AllowedHosts: hosts}
	if p.ExpiresAt != nil {
		t := p.ExpiresAt.UTC().Truncate(time.Second)
		out.ExpiresAt = &t
	}
	return out, nil
}

type row struct {
	bun.BaseModel `bun:"table:user_secrets"`
	ID            int64      `bun:"id,pk,autoincrement"`
	UserID        int64      `bun:"user_id,notnull"`
	Name          string     `bun:"name,notnull"`
	Description   string     `bun:"description,notnull"`
	KeyID         int64      `bun:"key_id,notnull"`
	Ciphertext    string     `bun:"ciphertext,notnull"`
	AllowedHosts  string     `bun:"allowed_hosts,notnull"`
	ExpiresAt     *time.Time `bun:"expires_at"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	UpdatedAt     time.Time  `bun:"updated_at,notnull"`
}

func (r row) meta() Secret {
	hosts := []string{}
	if r.AllowedHosts != "" {
		// A column this package wrote; a damaged value approves nothing.
		_ = json.Unmarshal([]byte(r.AllowedHosts), &hosts)
	}
	var exp *time.Time
	if r.ExpiresAt != nil {
		t := r.ExpiresAt.UTC()
		exp = &t
	}
	return Secret{Name: r.Name, Description: r.Description, AllowedHosts: hosts, ExpiresAt: exp,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

func (r *row) setPolicy(p Policy) {
	hosts := p.AllowedHosts
	if hosts == nil {
		hosts = []string{}
	}
	b, _ := json.Marshal(hosts)
	r.AllowedHosts, r.ExpiresAt = string(b), p.ExpiresAt
}

// Service stores secrets.
type Service struct {
	store *storage.Store
	ring  *envelope.Ring
}

// New opens the data-key ring (creating the first data key if needed).
func New(ctx context.Context, store *storage.Store) (*Service, error) {
	ring, err := envelope.Open(ctx, store.DB, store.Keeper)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return NewWithRing(store, ring), nil
}

// NewWithRing returns a Service on an already open data-key ring.
func NewWithRing(store *storage.Store, ring *envelope.Ring) *Service {
	return &Service{store: store, ring: ring}
}

// RegisterInventory records the secrets table: exported as metadata, its
// ciphertext redacted; deleted with the account.
func RegisterInventory(inv *storage.Inventory) error {
	if err := inv.AddTable(storage.Table{Name: "user_secrets", Redact: []string{"ciphertext", "key_id"}}); err != nil {
		return err
	}
	return nil
}

func additionalData(o storage.Owner, name string) string {
	return "secret:user:" + o.StableID + ":" + name
}

func validate(name, description string, value []byte) error {
	switch {
	case !validName.MatchString(name):
		return fmt.Errorf("%w: name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid)
	case utf8.RuneCountInString(description) > MaxDescriptionRunes:
		return fmt.Errorf("%w: description is longer than %d characters", ErrInvalid, MaxDescriptionRunes)
	case len(value) == 0:
		return fmt.Errorf("%w: value is empty", ErrInvalid)
	case len(value) > MaxValueBytes:
		return fmt.Errorf("%w: value is larger than %d bytes", ErrInvalid, MaxValueBytes)
	}
	return nil
}

// Set stores (or replaces) the owner's secret called name. created reports
// whether it is new. A replaced secret keeps its policy; a new one has none
// (it is sent nowhere until its owner approves hosts).
func (s *Service) Set(ctx context.Context, o storage.Owner, name, description string, value []byte) (_ Secret, created bool, err error) {
	return s.Put(ctx, o, name, description, value, nil)
}

// Put is Set with a policy: a non-nil policy replaces the secret's
// allowed hosts and expiry (only the owner's own web session may do that).
func (s *Service) Put(ctx context.Context, o storage.Owner, name, description string, value []byte, policy *Policy) (_ Secret, created bool, err error) {
	if err := validate(name, description, value); err != nil {
		return Secret{}, false, err
	}
	var pol Policy
	if policy != nil {
		if pol, err = policy.normalize(); err != nil {
			return Secret{}, false, err
		}
	}
	keyID, sealed, err := s.ring.Seal(additionalData(o, name), value)
	if err != nil {
		return Secret{}, false, err
	}
	now := time.Now().UTC()
	r := row{UserID: o.ID, Name: name, Description: description, KeyID: keyID, Ciphertext: sealed, CreatedAt: now, UpdatedAt: now}
	r.setPolicy(pol)
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var existing row
		err := tx.NewSelect().Model(&existing).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
			_, err = tx.NewInsert().Model(&r).Returning("NULL").Exec(ctx)
			return err
		case err != nil:
			return err
		}
		r.CreatedAt = existing.CreatedAt
		cols := []string{"description", "key_id", "ciphertext", "updated_at"}
		if policy != nil {
			cols = append(cols, "allowed_hosts", "expires_at")
		} else {
			r.AllowedHosts, r.ExpiresAt = existing.AllowedHosts, existing.ExpiresAt
		}
		_, err = tx.NewUpdate().Model(&r).Column(cols...).
			Where("id = ? AND user_id = ?", existing.ID, o.ID).Exec(ctx)
		return err
	})
	if err != nil {
		return Secret{}, false, fmt.Errorf("secrets: set: %w", err)
	}
	return r.meta(), created, nil
}

// List pages through the owner's secrets by name: metadata only.
func (s *Service) List(ctx context.Context, o storage.Owner, req storage.PageRequest) (storage.Page[Secret], error) {
	q := s.store.Reader.NewSelect().Model((*row)(nil)).
		Column("name", "description", "allowed_hosts", "expires_at", "created_at", "updated_at").Where("user_id = ?", o.ID)
	page, err := storage.Paginate(ctx, q, storage.Keyset[row]{
		Kind: "secrets", Column: "name", Key: func(r *row) any { return r.Name },
	}, req)
	if err != nil {
		return storage.Page[Secret]{}, err
	}
	out := storage.Page[Secret]{Next: page.Next, Items: make([]Secret, len(page.Items))}
	for i, r := range page.Items {
		out.Items[i] = r.meta()
	}
	return out, nil
}

// SetPolicy replaces the allowed hosts and expiry of the owner's secret
// called name, leaving its value alone. Only the owner's own web session
// may call it (see Capabilities).
func (s *Service) SetPolicy(ctx context.Context, o storage.Owner, name string, policy Policy) (Secret, error) {
	pol, err := policy.normalize()
	if err != nil {
		return Secret{}, err
	}
	var r row
	r.setPolicy(pol)
	r.UpdatedAt = time.Now().UTC()
	res, err := s.store.DB.NewUpdate().Model(&r).Column("allowed_hosts", "expires_at", "updated_at").
		Where("user_id = ? AND name = ?", o.ID, name).Exec(ctx)
	if err != nil {
		return Secret{}, fmt.Errorf("secrets: set policy: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Secret{}, ErrNotFound
	}
	var out row
	if err := s.store.DB.NewSelect().Model(&out).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx); err != nil {
		return Secret{}, fmt.Errorf("secrets: set policy: %w", err)
	}
	return out.meta(), nil
}

// Usable is a secret ready to be filled into an outbound request: its
// value and the policy that decides where it may go.
type Usable struct {
	Secret
	Value []byte
}

// Use opens the owner's secret called name for the outbound gateway. It
// returns ErrNotFound when the owner has no such secret and ErrExpired
// when its expiry has passed at now (the value is then never opened). The
// caller must check the destination against AllowedHosts (HostAllowed)
// before sending the value anywhere, and must never show it to an agent.
func (s *Service) Use(ctx context.Context, o storage.Owner, name string, now time.Time) (Usable, error) {
	var r row
	err := s.store.Reader.NewSelect().Model(&r).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return Usable{}, ErrNotFound
	}
	if err != nil {
		return Usable{}, fmt.Errorf("secrets: use: %w", err)
	}
	meta := r.meta()
	if meta.Expired(now) {
		return Usable{Secret: meta}, ErrExpired
	}
	v, err := s.ring.Open(ctx, r.KeyID, r.Ciphertext, additionalData(o, name))
	if err != nil {
		return Usable{}, fmt.Errorf("secrets: use %s: %w", name, err)
	}
	return Usable{Secret: meta, Value: v}, nil
}

// Reveal returns the value of the owner's secret. Call it only for the
// owner's own session-authenticated request; never from an agent.
func (s *Service) Reveal(ctx context.Context, o storage.Owner, name string) ([]byte, error) {
	var r row
	err := s.store.Reader.NewSelect().Model(&r).Where("user_id = ? AND name = ?", o.ID, name).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: reveal: %w", err)
	}
	v, err := s.ring.Open(ctx, r.KeyID, r.Ciphertext, additionalData(o, name))
	if err != nil {
		return nil, fmt.Errorf("secrets: reveal %s: %w", name, err)
	}
	return v, nil
}

// Delete removes the owner's secret; false when there was none.
func (s *Service) Delete(ctx context.Context, o storage.Owner, name string) (bool, error) {
	res, err := s.store.DB.NewDelete().Model((*row)(nil)).Where("user_id = ? AND name = ?", o.ID, name).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("secrets: delete: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// RotateResult says what RotateKeys did.
type RotateResult struct {
	KeyID       int64 // the new current data key
	Reencrypted int
	Failed      int // rows that did not open; left intact
}

// RotateKeys makes a new data key and re-seals every secret under it, in
// batches. A row that does not open is counted and left as it was; a row
// changed concurrently keeps its newer value.
func (s *Service) RotateKeys(ctx context.Context) (RotateResult, error) {
	keyID, err := s.ring.Rotate(ctx)
	if err != nil {
		return RotateResult{}, fmt.Errorf("secrets: rotate: %w", err)
	}
	res := RotateResult{KeyID: keyID}
	type item struct {
		row
		StableID string `bun:"stable_user_id"`
	}
	var after int64
	for {
		var batch []item
		err := s.store.Reader.NewSelect().TableExpr("user_secrets AS s").
			ColumnExpr("s.id, s.user_id, s.name, s.key_id, s.ciphertext, u.stable_user_id").
			Join("JOIN users AS u ON u.id = s.user_id").
			Where("s.id > ? AND s.key_id <> ?", after, keyID).OrderExpr("s.id").Limit(500).Scan(ctx, &batch)
		if err != nil {
			return res, fmt.Errorf("secrets: rotate: %w", err)
		}
		if len(batch) == 0 {
			return res, nil
		}
		for _, it := range batch {
			after = it.ID
			o := storage.Owner{ID: it.UserID, StableID: it.StableID}
			plain, err := s.ring.Open(ctx, it.KeyID, it.Ciphertext, additionalData(o, it.Name))
			if err != nil {
				res.Failed++
				continue
			}
			newKey, sealed, err := s.ring.Seal(additionalData(o, it.Name), plain)
			if err != nil {
				return res, err
			}
			// Only if unchanged since read: a concurrent Set wins.
			up, err := s.store.DB.NewUpdate().Model((*row)(nil)).
				Set("key_id = ?, ciphertext = ?", newKey, sealed).
				Where("id = ? AND key_id = ? AND ciphertext = ?", it.ID, it.KeyID, it.Ciphertext).Exec(ctx)
			if err != nil {
				return res, fmt.Errorf("secrets: rotate: %w", err)
			}
			if n, _ := up.RowsAffected(); n == 1 {
				res.Reencrypted++
			}
		}
	}
}
