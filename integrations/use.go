package integrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/schedules"
	"github.com/enclave-mcp/enclave/storage"
)

// Usable is a connection ready to authorize an outbound request: its
// access token and the hosts it may be sent to.
type Usable struct {
	Name        string
	Provider    string
	AccessToken string
	// APIHosts are the provider's hosts (secrets.NormalizeHost patterns):
	// the only ones the token may be sent to.
	APIHosts []string
}

// Use opens the owner's connection called name for the outbound gateway,
// renewing its access token first when it expires within RefreshBefore
// and the provider issued a refresh token, and records when it was used.
// It returns ErrNotFound when the owner has no such connection (or its
// provider is no longer configured) and ErrExpired when its token expired
// and cannot be renewed. The caller must check the destination against
// APIHosts before sending the token, and never show it to anyone.
func (s *Service) Use(ctx context.Context, o storage.Owner, name string) (Usable, error) {
	r, err := s.get(ctx, s.store.DB, o, name)
	if err != nil {
		return Usable{}, err
	}
	p, err := s.providerFor(ctx, o, r)
	if err != nil {
		return Usable{}, err
	}
	if r.Status != StatusActive {
		return Usable{}, ErrExpired
	}
	ts, err := s.open(ctx, o, r)
	if err != nil {
		return Usable{}, err
	}
	now := s.now()
	if !ts.Expiry.IsZero() && now.Add(RefreshBefore).After(ts.Expiry) {
		if now.Sub(r.UpdatedAt) < MinRefreshInterval {
			// Renewed (or connected) moments ago: a token this short-lived
			// is used while it lasts, and the provider is not asked again.
			if !now.Before(ts.Expiry) {
				return Usable{}, ErrExpired
			}
		} else if ts, err = s.refresh(ctx, o, r, ts); err != nil {
			if errors.Is(err, ErrNotFound) {
				return Usable{}, ErrNotFound // disconnected meanwhile
			}
			if !now.Before(ts.Expiry) {
				return Usable{}, ErrExpired
			}
			// Not yet expired: use it while it lasts.
		}
	}
	_, _ = s.store.DB.NewUpdate().Model((*connRow)(nil)).Set("last_used_at = ?", now.UTC()).
		Where("id = ? AND user_id = ?", r.ID, o.ID).Exec(ctx)
	return Usable{Name: r.Name, Provider: r.Provider, AccessToken: ts.AccessToken, APIHosts: p.APIHosts}, nil
}

// refresh renews r's access token with its refresh token and stores the
// new token set. A refusal by the provider marks the connection expired.
// It returns the token set in effect after it (the old one on failure).
func (s *Service) refresh(ctx context.Context, o storage.Owner, r connRow, ts tokenSet) (tokenSet, error) {
	if ts.RefreshToken == "" {
		if !s.now().Before(ts.Expiry) {
			s.markExpired(ctx, o, r, "The access token expired and the provider issued no refresh token; connect again.")
		}
		return ts, ErrExpired
	}
	p, err := s.providerFor(ctx, o, r)
	if err != nil {
		return ts, err
	}
	eps, err := p.resolve(ctx, p.hc)
	if err != nil {
		return ts, err
	}
	ctx2, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, p.hc), s.timeout)
	defer cancel()
	old := &oauth2.Token{RefreshToken: ts.RefreshToken, Expiry: time.Unix(1, 0)} // force the refresh
	tok, err := p.config(eps, s.redirect).TokenSource(ctx2, old).Token()
	if err == nil {
		err = validateToken(tok)
	}
	// What the provider answered is stored even when the caller's time
	// (RefreshDue's budget) ran out meanwhile: a rotated refresh token
	// lost here would break the connection.
	ctx = context.WithoutCancel(ctx)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && (re.ErrorCode == "invalid_grant" || re.ErrorCode == "unauthorized_client") {
			s.markExpired(ctx, o, r, "The provider no longer accepts this connection; connect again.")
			s.record(ctx, o, "connection_refresh", audit.ResultFailure, "provider="+p.Name+" connection="+r.Name+" refused")
			return ts, ErrExpired
		}
		s.log.WarnContext(ctx, "integrations: token refresh failed", "provider", p.Name, "err", exchangeError(err))
		return ts, fmt.Errorf("integrations: refresh: %s", exchangeError(err))
	}
	next := tokenSet{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, TokenType: "Bearer", Expiry: tok.Expiry}
	if next.RefreshToken == "" {
		next.RefreshToken = ts.RefreshToken // not rotated
	}
	nr := r
	if err := s.seal(o, &nr, next); err != nil {
		return ts, err
	}
	nr.UpdatedAt = s.now().UTC()
	// Only over the token set read: a concurrent renewal wins.
	res, err := s.store.DB.NewUpdate().Model(&nr).Column("key_id", "token_ciphertext", "expires_at", "refresh_at", "updated_at").
		Where("id = ? AND user_id = ? AND token_ciphertext = ?", r.ID, o.ID, r.Ciphertext).Exec(ctx)
	if err != nil {
		return ts, fmt.Errorf("integrations: refresh: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		cur, err := s.get(ctx, s.store.DB, o, r.Name)
		if errors.Is(err, ErrNotFound) {
			// Disconnected (or the account deleted) while the provider
			// renewed: the new tokens have nowhere to go and are revoked,
			// not left live at the provider. (Not when a new connection of
			// the same name replaced it: at some providers revoking a
			// refresh token revokes the whole grant, the new one's too.)
			if eps.revoke != "" {
				s.revokeTokens(ctx, o, p, eps, r.Name, next)
			}
			return ts, ErrNotFound
		}
		if err != nil {
			return ts, err
		}
		return s.open(ctx, o, cur)
	}
	return next, nil
}

func (s *Service) markExpired(ctx context.Context, o storage.Owner, r connRow, why string) {
	_, _ = s.store.DB.NewUpdate().Model((*connRow)(nil)).
		Set("status = ?, last_error = ?, refresh_at = NULL, updated_at = ?", StatusExpired, why, s.now().UTC()).
		Where("id = ? AND user_id = ? AND token_ciphertext = ?", r.ID, o.ID, r.Ciphertext).Exec(ctx)
}

// RefreshLane names the lane renewing access tokens before they expire.
const RefreshLane = "integrations-refresh"

// RefreshRetry is how long the lane waits before it tries again a
// renewal that failed (a provider down, slow or hostile).
const RefreshRetry = 5 * time.Minute

// refreshPerTick bounds the connections one tick renews.
const refreshPerTick = 100

// RefreshDueBudget bounds one RefreshDue as a whole, under the lane's
// period.
const RefreshDueBudget = 45 * time.Second

var refreshDueBudget = RefreshDueBudget // a variable for tests

// RefreshDue renews up to limit active connections whose access token
// expires within RefreshBefore. It returns how many it renewed.
func (s *Service) RefreshDue(ctx context.Context, limit int) (int, error) {
	type item struct {
		connRow
		StableID string `bun:"stable_user_id"`
	}
	var due []item
	err := s.store.Reader.NewSelect().TableExpr("integration_connections AS c").
		ColumnExpr("c.*, u.stable_user_id").Join("JOIN users AS u ON u.id = c.user_id").
		Where("c.status = ? AND c.refresh_at IS NOT NULL AND c.refresh_at <= ?", StatusActive, s.now().UTC()).
		// Least recently renewed first: a connection whose tokens expire
		// at once (a hostile own app's) renewed at this tick waits behind
		// every other one due, instead of being first at every tick.
		OrderExpr("c.updated_at, c.refresh_at").Limit(int64(limit)).Scan(ctx, &due)
	if err != nil {
		return 0, fmt.Errorf("integrations: due refreshes: %w", err)
	}
	n := 0
	var errs []error
	// One tick's renewals share a budget: a provider that does not answer
	// holds the lane (every person's renewals) no longer.
	bctx, cancel := context.WithTimeout(ctx, refreshDueBudget)
	defer cancel()
	// A person whose provider failed (their own app may hang on purpose)
	// costs the tick one failure: their other renewals wait for the next.
	failed := map[int64]bool{}
	for _, it := range due {
		if bctx.Err() != nil {
			break // the rest are still due at the next tick
		}
		if failed[it.UserID] {
			continue
		}
		ctx := bctx
		o := storage.Owner{ID: it.UserID, StableID: it.StableID}
		ts, err := s.open(ctx, o, it.connRow)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := s.refresh(ctx, o, it.connRow, ts); err == nil {
			n++
		} else if !errors.Is(err, ErrExpired) && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			failed[it.UserID] = true
			// Tried again after RefreshRetry, behind the renewals due
			// meanwhile, not first in line at every tick.
			_, _ = s.store.DB.NewUpdate().Model((*connRow)(nil)).Set("refresh_at = ?", s.now().UTC().Add(RefreshRetry)).
				Where("id = ? AND user_id = ? AND token_ciphertext = ?", it.ID, it.UserID, it.Ciphertext).Exec(context.WithoutCancel(ctx))
		}
	}
	return n, errors.Join(errs...)
}

// Schedule is the lane renewing access tokens before they expire.
func (s *Service) Schedule() schedules.Schedule {
	return schedules.Schedule{Name: RefreshLane, Every: time.Minute, Run: func(ctx context.Context, _ schedules.Tick) error {
		_, err := s.RefreshDue(ctx, refreshPerTick)
		return err
	}}
}
