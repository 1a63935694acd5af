package integrations

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/oauth2"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/storage"
)

type stateRow struct {
	bun.BaseModel `bun:"table:integration_states"`
	StateHash     string    `bun:"state_hash,pk"`
	UserID        int64     `bun:"user_id,notnull"`
	BindingHash   string    `bun:"binding_hash,notnull"`
	Provider      string    `bun:"provider,notnull"`
	AppID         *int64    `bun:"app_id"`
	Name          string    `bun:"name,notnull"`
	KeyID         int64     `bun:"key_id,notnull"`
	Verifier      string    `bun:"verifier_ciphertext,notnull"`
	CreatedAt     time.Time `bun:"created_at,notnull"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
}

func invalid(format string, args ...any) error {
	return capabilities.Errorf(capabilities.CodeInvalidInput, format, args...)
}

// Start begins connecting the owner's account at provider under the
// connection name (the provider's name when empty). binding is a secret
// the person's browser holds for the flow (the web shell keeps it in a
// cookie); Finish requires the same. It returns the URL to send the
// browser to: the provider's authorization endpoint with a single-use
// state and a PKCE (S256) challenge.
func (s *Service) Start(ctx context.Context, o storage.Owner, provider, name, binding string) (string, error) {
	p, ok := s.providers[provider]
	if !ok {
		return "", invalid("There is no provider named %q; connectionList names the providers you can connect.", provider)
	}
	return s.start(ctx, o, p, name, binding)
}

// StartApp is Start at the owner's own app called app (AddApp): the
// same flow, whose callback is the app's own redirect URI (AppRedirectURL).
func (s *Service) StartApp(ctx context.Context, o storage.Owner, app, name, binding string) (string, error) {
	a, err := s.getApp(ctx, s.store.DB, o, app)
	if errors.Is(err, ErrAppNotFound) {
		return "", invalid("You have no app named %q; connectionAppList names your apps.", app)
	}
	if err != nil {
		return "", err
	}
	p, err := s.appProvider(ctx, o, a)
	if err != nil {
		return "", err
	}
	return s.start(ctx, o, p, name, binding)
}

func (s *Service) start(ctx context.Context, o storage.Owner, p *providerState, name, binding string) (string, error) {
	if name == "" {
		name = p.Name
	}
	if !connectionName.MatchString(name) {
		return "", invalid("A connection name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.")
	}
	if len(binding) < 16 {
		return "", invalid("The connect flow must be started from the account's Connections page.")
	}
	eps, err := p.resolve(ctx, p.hc)
	if err != nil {
		s.log.WarnContext(ctx, "integrations: provider endpoints unavailable", "provider", p.Name, "err", redactErr(err))
		return "", &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf("Provider %s cannot be reached now; try again later.", p.Name)}
	}
	state := randomToken(32)
	verifier := oauth2.GenerateVerifier()
	sh := hash(state)
	keyID, sealed, err := s.ring.Seal(stateAD(o.StableID, sh), []byte(verifier))
	if err != nil {
		return "", fmt.Errorf("integrations: start: %w", err)
	}
	now := s.now().UTC()
	row := stateRow{StateHash: sh, UserID: o.ID, BindingHash: hash(binding), Provider: p.Name, AppID: p.appIDPtr(), Name: name,
		KeyID: keyID, Verifier: sealed, CreatedAt: now, ExpiresAt: now.Add(StateTTL)}
	err = s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// Expired flows and those beyond the bound go first.
		if _, err := tx.NewDelete().Model((*stateRow)(nil)).Where("user_id = ? AND expires_at < ?", o.ID, now).Exec(ctx); err != nil {
			return err
		}
		var keep []string
		if err := tx.NewSelect().Model((*stateRow)(nil)).Column("state_hash").Where("user_id = ?", o.ID).
			Order("created_at DESC", "state_hash").Limit(MaxPendingStates-1).Scan(ctx, &keep); err != nil {
			return err
		}
		if len(keep) == MaxPendingStates-1 {
			if _, err := tx.NewDelete().Model((*stateRow)(nil)).Where("user_id = ? AND state_hash NOT IN (?)", o.ID, bun.In(keep)).Exec(ctx); err != nil {
				return err
			}
		}
		_, err := tx.NewInsert().Model(&row).Returning("NULL").Exec(ctx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("integrations: start: %w", err)
	}
	return p.config(eps, s.redirectFor(p)).AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), nil
}

// redirectFor is the redirect URI of p's flows.
func (s *Service) redirectFor(p *providerState) string {
	if p.appID != 0 {
		return s.AppRedirectURL(p.Name)
	}
	return s.RedirectURL(p.Name)
}

// Callback is what the provider sent back to the callback URL.
type Callback struct {
	// Provider is the provider named by the callback's path (see
	// CallbackPath); it must be the one the flow was started for.
	Provider string
	// App is the person's own app named by the callback's path
	// (CallbackPath + "/app/" + its name), instead of Provider.
	App              string
	State            string
	Code             string
	Error            string
	ErrorDescription string
}

// Finish completes a connect flow: the state must be one Start issued to
// this owner, with the same browser binding, within StateTTL, and is used
// up whether or not the rest succeeds. The code is exchanged with the
// PKCE verifier; the tokens are sealed and the connection created or
// replaced.
func (s *Service) Finish(ctx context.Context, o storage.Owner, binding string, cb Callback) (Connection, error) {
	const stale = "This connect link is not valid (it was used already, expired, or was started in another browser or account). Start again from the Connections page."
	if cb.State == "" {
		return Connection{}, invalid(stale)
	}
	sh := hash(cb.State)
	var st stateRow
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.NewSelect().Model(&st).Where("state_hash = ?", sh).Scan(ctx); err != nil {
			return err
		}
		// Used once: gone whoever presents it.
		res, err := tx.NewDelete().Model((*stateRow)(nil)).Where("state_hash = ?", sh).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return sql.ErrNoRows
		}
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Connection{}, invalid(stale)
	}
	if err != nil {
		return Connection{}, fmt.Errorf("integrations: finish: %w", err)
	}
	now := s.now().UTC()
	if st.UserID != o.ID || subtle.ConstantTimeCompare([]byte(st.BindingHash), []byte(hash(binding))) != 1 || !now.Before(st.ExpiresAt) {
		s.record(ctx, o, "connection_connect", audit.ResultDenied, "provider="+st.Provider+" state not bound to this session")
		return Connection{}, invalid(stale)
	}
	// The flow's app, when it was started at one of the owner's own apps
	// (nil when the app was removed meanwhile: its flows are gone too).
	var app *appRow
	if st.AppID != nil {
		a, err := s.getAppByID(ctx, s.store.DB, o, *st.AppID)
		if err != nil && !errors.Is(err, ErrAppNotFound) {
			return Connection{}, err
		}
		if err == nil {
			app = &a
		}
	}
	if (st.AppID == nil && (cb.App != "" || cb.Provider != st.Provider)) ||
		(st.AppID != nil && (cb.Provider != "" || app == nil || cb.App != app.Name)) {
		// A code from another provider's (or app's) redirect: never send
		// it (nor the verifier) to this flow's token endpoint.
		s.record(ctx, o, "connection_connect", audit.ResultDenied, "provider="+st.Provider+" callback on another provider's path")
		return Connection{}, invalid(stale)
	}
	if cb.Error != "" {
		msg := "The provider did not grant access"
		if cb.Error == "access_denied" {
			msg = "You declined access at the provider"
		}
		return Connection{}, invalid("%s; nothing was connected.", msg)
	}
	if cb.Code == "" {
		return Connection{}, invalid("The provider sent no authorization code; nothing was connected.")
	}
	var p *providerState
	if app != nil {
		if p, err = s.appProvider(ctx, o, *app); err != nil {
			return Connection{}, err
		}
	} else if p = s.providers[st.Provider]; p == nil {
		return Connection{}, invalid("Provider %s is no longer configured.", st.Provider)
	}
	verifier, err := s.ring.Open(ctx, st.KeyID, st.Verifier, stateAD(o.StableID, sh))
	if err != nil {
		return Connection{}, invalid(stale)
	}
	eps, err := p.resolve(ctx, p.hc)
	if err != nil {
		return Connection{}, &capabilities.Error{Code: capabilities.CodeConflict, Message: fmt.Sprintf("Provider %s cannot be reached now; try again later.", p.Name)}
	}
	ctx2, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, p.hc), s.timeout)
	defer cancel()
	tok, err := p.config(eps, s.redirectFor(p)).Exchange(ctx2, cb.Code, oauth2.VerifierOption(string(verifier)))
	if err == nil {
		err = validateToken(tok)
	}
	if err != nil {
		s.log.WarnContext(ctx, "integrations: code exchange failed", "provider", p.Name, "err", exchangeError(err))
		s.record(ctx, o, "connection_connect", audit.ResultFailure, "provider="+p.Name+" exchange failed")
		return Connection{}, &capabilities.Error{Code: capabilities.CodeConflict,
			Message: fmt.Sprintf("Provider %s did not issue a usable token; nothing was connected. Try again.", p.Name)}
	}
	scopes := p.Scopes
	if granted, ok := tok.Extra("scope").(string); ok && granted != "" {
		scopes = splitScopes(granted, tok.AccessToken, tok.RefreshToken)
	}
	ts := tokenSet{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, TokenType: "Bearer", Expiry: tok.Expiry}
	c, err := s.save(ctx, o, st.Name, p.Name, p.appIDPtr(), scopes, ts)
	if err != nil {
		// No connection holds the tokens just issued: they are revoked,
		// not left live at the provider.
		if eps.revoke != "" {
			s.revokeTokens(context.WithoutCancel(ctx), o, p, eps, st.Name, ts)
		}
		if app != nil {
			if _, gerr := s.getAppByID(ctx, s.store.DB, o, app.ID); errors.Is(gerr, ErrAppNotFound) {
				return Connection{}, invalid("Your app %s was removed meanwhile; nothing was connected.", app.Name)
			}
		}
		return Connection{}, err
	}
	s.record(ctx, o, "connection_connect", audit.ResultSuccess, "provider="+p.Name+" connection="+c.Name)
	return c, nil
}

// exchangeError describes a failed exchange for the log: the OAuth error
// code when the provider sent a standard one, never its body nor any other
// text of the provider's (which may echo the code or refresh token it was
// sent).
func exchangeError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if !standardErrorCodes[code] {
			code = "(not a standard code)"
		}
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		return fmt.Sprintf("status %d error %q", status, code)
	}
	return redactErr(err)
}

// standardErrorCodes are the token endpoint's error codes of RFC 6749
// (5.2), RFC 7009 and RFC 8628: the only ones repeated in a log.
var standardErrorCodes = map[string]bool{
	"invalid_request": true, "invalid_client": true, "invalid_grant": true, "unauthorized_client": true,
	"unsupported_grant_type": true, "invalid_scope": true, "unsupported_token_type": true,
	"server_error": true, "temporarily_unavailable": true, "access_denied": true,
	"authorization_pending": true, "slow_down": true, "expired_token": true, "": true,
}

// splitScopes reads the scopes the provider says it granted, dropping any
// that holds one of the tokens (the scopes are shown; the tokens never are).
func splitScopes(s string, tokens ...string) []string {
	var out []string
	for _, f := range splitSpace(s) {
		if len(out) == 64 {
			break
		}
		if len(f) <= 256 && !slices.ContainsFunc(tokens, func(t string) bool { return t != "" && strings.Contains(f, t) }) {
			out = append(out, f)
		}
	}
	return out
}

func splitSpace(s string) []string {
	var out []string
	start := -1
	for i, c := range s {
		if c == ' ' || c == ',' {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// save creates or replaces the owner's connection called name.
func (s *Service) save(ctx context.Context, o storage.Owner, name, provider string, appID *int64, scopes []string, ts tokenSet) (Connection, error) {
	if scopes == nil {
		scopes = []string{}
	}
	sb, _ := json.Marshal(scopes)
	now := s.now().UTC()
	var out connRow
	err := s.store.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.store.Dialect() == storage.Postgres {
			// One save at a time per person, so the lookup and the count
			// below see the others' rows. (SQLite writes are serial.)
			var id int64
			if err := tx.NewSelect().Table("users").Column("id").Where("id = ?", o.ID).For("UPDATE").Scan(ctx, &id); err != nil {
				return err
			}
		}
		existing, err := s.get(ctx, tx, o, name)
		switch {
		case errors.Is(err, ErrNotFound):
			n, err := tx.NewSelect().Model((*connRow)(nil)).Where("user_id = ?", o.ID).Count(ctx)
			if err != nil {
				return err
			}
			if n >= MaxConnections {
				return invalid("You have %d connections, the most one account may keep; disconnect one first.", MaxConnections)
			}
			out = connRow{UserID: o.ID, PublicID: "con_" + randomToken(15), Name: name, Provider: provider, AppID: appID,
				Scopes: string(sb), Status: StatusActive, CreatedAt: now, UpdatedAt: now}
			if err := s.seal(o, &out, ts); err != nil {
				return err
			}
			_, err = tx.NewInsert().Model(&out).Returning("NULL").Exec(ctx)
			return err
		case err != nil:
			return err
		}
		out = existing
		out.Provider, out.AppID, out.Scopes, out.Status, out.LastError, out.UpdatedAt = provider, appID, string(sb), StatusActive, "", now
		if err := s.seal(o, &out, ts); err != nil {
			return err
		}
		_, err = tx.NewUpdate().Model(&out).Column("provider", "app_id", "scopes", "status", "last_error", "key_id", "token_ciphertext", "expires_at", "refresh_at", "updated_at").
			Where("id = ? AND user_id = ?", out.ID, o.ID).Exec(ctx)
		return err
	})
	if err != nil {
		if _, ok := errors.AsType[*capabilities.Error](err); ok {
			return Connection{}, err
		}
		return Connection{}, fmt.Errorf("integrations: save: %w", err)
	}
	return out.meta(), nil
}

// RedirectURL is the redirect URI of provider's connect flow: register it
// at the provider.
func (s *Service) RedirectURL(provider string) string {
	return s.redirect + "/" + url.PathEscape(provider)
}
