package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/handler/pkce"
	fstorage "github.com/ory/fosite/storage"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// Token kinds in oauth_tokens.
const (
	kindCode    = "code"
	kindPKCE    = "pkce"
	kindAccess  = "access"
	kindRefresh = "refresh"
)

// pkcePrefix keeps a PKCE row's key apart from its code's: both are
// stored under the code's signature.
const pkcePrefix = "pkce:"

// store implements fosite's storage on bun. Inside a fosite transaction
// (BeginTX) every method uses that transaction; outside, reads go to the
// read pool and writes to the primary.
type store struct {
	db       *storage.Store
	now      func() time.Time
	clientTT time.Duration
	audience []string
	// noDocuments: client metadata documents are disabled, so clients
	// whose row came from one are unknown.
	noDocuments bool
}

var (
	_ fosite.Storage                = (*store)(nil)
	_ oauth2.CoreStorage            = (*store)(nil)
	_ oauth2.TokenRevocationStorage = (*store)(nil)
	_ pkce.PKCERequestStorage       = (*store)(nil)
	_ fstorage.Transactional        = (*store)(nil)
)

type txKey struct{}

// BeginTX implements storage.Transactional.
func (s *store) BeginTX(ctx context.Context) (context.Context, error) {
	if _, ok := ctx.Value(txKey{}).(*bun.Tx); ok {
		return ctx, errors.New("oauth: nested transaction")
	}
	tx, err := s.db.DB.BeginTx(ctx, nil)
	if err != nil {
		return ctx, fmt.Errorf("oauth: begin: %w", err)
	}
	return context.WithValue(ctx, txKey{}, &tx), nil
}

// Commit implements storage.Transactional.
func (s *store) Commit(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(*bun.Tx)
	if !ok {
		return errors.New("oauth: commit without a transaction")
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("oauth: commit: %w", err)
	}
	return nil
}

// Rollback implements storage.Transactional.
func (s *store) Rollback(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(*bun.Tx)
	if !ok {
		return errors.New("oauth: rollback without a transaction")
	}
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("oauth: rollback: %w", err)
	}
	return nil
}

// writer returns the transaction in ctx, or the primary handle.
func (s *store) writer(ctx context.Context) bun.IDB {
	if tx, ok := ctx.Value(txKey{}).(*bun.Tx); ok {
		return tx
	}
	return s.db.DB
}

// reader returns the transaction in ctx, or the read pool.
func (s *store) reader(ctx context.Context) bun.IDB {
	if tx, ok := ctx.Value(txKey{}).(*bun.Tx); ok {
		return tx
	}
	return s.db.Reader
}

// --- clients ---

type clientRow struct {
	bun.BaseModel `bun:"table:oauth_clients,alias:c"`

	ID                      string     `bun:"id,pk"`
	SecretHash              string     `bun:"secret_hash,nullzero"`
	Name                    string     `bun:"name"`
	RedirectURIs            string     `bun:"redirect_uris"`
	GrantTypes              string     `bun:"grant_types"`
	ResponseTypes           string     `bun:"response_types"`
	Scope                   string     `bun:"scope"`
	TokenEndpointAuthMethod string     `bun:"token_endpoint_auth_method"`
	Metadata                string     `bun:"metadata"`
	MetadataHash            string     `bun:"metadata_hash"`
	CreatedAt               time.Time  `bun:"created_at"`
	LastUsedAt              time.Time  `bun:"last_used_at"`
	BlockedAt               *time.Time `bun:"blocked_at"`
	// MetadataHost and MetadataExpiresAt are set for a client whose id is
	// the URL of its metadata document (cimd.go).
	MetadataHost      *string    `bun:"metadata_host"`
	MetadataExpiresAt *time.Time `bun:"metadata_expires_at"`
}

// clientUseDebounce limits how often a client's last use is written.
const clientUseDebounce = time.Hour

func (s *store) toClient(r *clientRow) (*Client, error) {
	c := &Client{
		ID:         r.ID,
		Name:       r.Name,
		Scopes:     strings.Fields(r.Scope),
		AuthMethod: r.TokenEndpointAuthMethod,
		CreatedAt:  r.CreatedAt,
		LastUsedAt: r.LastUsedAt,
		audience:   s.audience,
	}
	if r.MetadataHost != nil {
		c.MetadataHost = *r.MetadataHost
		if r.TokenEndpointAuthMethod == "private_key_jwt" {
			var md ClientMetadata
			if err := json.Unmarshal([]byte(r.Metadata), &md); err != nil {
				return nil, fmt.Errorf("oauth: client %s metadata: %w", r.ID, err)
			}
			c.jwksURI, c.signingAlg = md.JWKSURI, md.TokenEndpointAuthSigningAlg
		}
	}
	if r.SecretHash != "" {
		c.secretHash = []byte(r.SecretHash)
	}
	if err := json.Unmarshal([]byte(r.RedirectURIs), &c.RedirectURIs); err != nil {
		return nil, fmt.Errorf("oauth: client %s redirect URIs: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(r.GrantTypes), &c.GrantTypes); err != nil {
		return nil, fmt.Errorf("oauth: client %s grant types: %w", r.ID, err)
	}
	return c, nil
}

// GetClient implements fosite.ClientManager. A client idle for longer than
// the TTL is gone even before the reaper removes it; using a client renews
// it.
func (s *store) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	c, err := s.client(ctx, id)
	if err != nil {
		return nil, err
	}
	return withLoopbackPort(ctx, c), nil
}

// storable reports whether s can be a value of a text column, so that
// looking it up cannot fail in SQL: valid UTF-8 without NUL bytes
// (PostgreSQL refuses both; SQLite cuts the statement at a NUL).
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// loadClient reads a client row.
func (s *store) loadClient(ctx context.Context, id string) (*clientRow, error) {
	if !storable(id) {
		return nil, fosite.ErrNotFound // no client has such an id, and SQL cannot look it up
	}
	var row clientRow
	err := s.reader(ctx).NewSelect().Model(&row).Where("id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fosite.ErrNotFound
	}
	if err != nil {
		// Not "unknown client": fosite would answer invalid_client, and the
		// client would register again. writeError answers 503.
		return nil, fmt.Errorf("oauth: get client: %w: %w", errUnavailable, err)
	}
	return &row, nil
}

func (s *store) client(ctx context.Context, id string) (*Client, error) {
	row, err := s.loadClient(ctx, id)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	if now.Sub(row.LastUsedAt) > s.clientTT {
		return nil, fosite.ErrNotFound
	}
	if row.MetadataHost != nil && s.noDocuments {
		return nil, fosite.ErrNotFound
	}
	if row.BlockedAt != nil {
		// A blocked client can neither authorize nor refresh. The
		// authorization endpoint's page says why.
		return nil, fmt.Errorf("%w: %w", fosite.ErrNotFound, errClientBlocked)
	}
	if now.Sub(row.LastUsedAt) > clientUseDebounce {
		if _, err := s.writer(ctx).NewUpdate().Model((*clientRow)(nil)).
			Set("last_used_at = ?", now).Where("id = ?", id).Exec(ctx); err != nil {
			return nil, fmt.Errorf("oauth: renew client: %w", err)
		}
		row.LastUsedAt = now
	}
	return s.toClient(row)
}

// maxAssertionLifetime bounds how far in the future a client assertion
// may expire: its jti is remembered until then.
const maxAssertionLifetime = time.Hour

type assertionRow struct {
	bun.BaseModel `bun:"table:oauth_client_assertions,alias:a"`

	JTI       string    `bun:"jti,pk"`
	ExpiresAt time.Time `bun:"expires_at"`
}

// ClientAssertionJWTValid implements fosite.ClientManager: a jti seen in an
// unexpired private_key_jwt assertion is known.
func (s *store) ClientAssertionJWTValid(ctx context.Context, jti string) error {
	if len(jti) > 256 || !storable(jti) {
		return fosite.ErrJTIKnown.WithHint("The client_assertion's jti must be at most 256 bytes of UTF-8.")
	}
	known, err := s.reader(ctx).NewSelect().Model((*assertionRow)(nil)).
		Where("jti = ? AND expires_at > ?", jti, s.now().UTC()).Exists(ctx)
	if err != nil {
		return fmt.Errorf("oauth: read client assertion: %w: %w", errUnavailable, err)
	}
	if known {
		return fosite.ErrJTIKnown
	}
	return nil
}

// SetClientAssertionJWT implements fosite.ClientManager: it records jti
// until exp, and fails with ErrJTIKnown when another request recorded it
// first (the insert decides, so two replays racing cannot both pass).
func (s *store) SetClientAssertionJWT(ctx context.Context, jti string, exp time.Time) error {
	now := s.now().UTC()
	if exp.After(now.Add(maxAssertionLifetime)) {
		return fosite.ErrInvalidClient.WithHint("The client_assertion must expire within an hour.")
	}
	res, err := s.writer(ctx).NewInsert().Model(&assertionRow{JTI: jti, ExpiresAt: exp.UTC()}).
		On("CONFLICT (jti) DO UPDATE").Set("expires_at = EXCLUDED.expires_at").
		Where("a.expires_at <= ?", now).Returning("NULL").Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: record client assertion: %w: %w", errUnavailable, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fosite.ErrJTIKnown.WithHint("The client_assertion's jti was already used.")
	}
	return nil
}

// --- tokens ---

type tokenRow struct {
	bun.BaseModel `bun:"table:oauth_tokens,alias:t"`

	Signature       string     `bun:"signature,pk"`
	Kind            string     `bun:"kind"`
	RequestID       string     `bun:"request_id"`
	UserID          int64      `bun:"user_id"`
	ClientID        string     `bun:"client_id"`
	Scopes          string     `bun:"scopes"`
	Audience        string     `bun:"audience"`
	Request         string     `bun:"request"`
	Active          bool       `bun:"active"`
	RequestedAt     time.Time  `bun:"requested_at"`
	ExpiresAt       time.Time  `bun:"expires_at"`
	RotatedAt       *time.Time `bun:"rotated_at"`
	Successor       string     `bun:"successor,nullzero"`
	AccessSignature string     `bun:"access_signature,nullzero"`
}

// storedRequest is the part of a fosite request a token row keeps. Only
// whitelisted form fields are kept: the authorization endpoint's form may
// also hold the login form's password.
type storedRequest struct {
	ID              string              `json:"id"`
	RequestedAt     time.Time           `json:"at"`
	Scopes          []string            `json:"scopes,omitempty"`
	GrantedScopes   []string            `json:"granted_scopes,omitempty"`
	Audience        []string            `json:"audience,omitempty"`
	GrantedAudience []string            `json:"granted_audience,omitempty"`
	Form            map[string][]string `json:"form,omitempty"`
	Session         *session            `json:"session"`
}

// keptFormFields are the request parameters fosite reads back later.
var keptFormFields = []string{"redirect_uri", "code_challenge", "code_challenge_method", "resource", "scope", "grant_type", "response_type", "client_id", "nonce"}

var tokenKinds = map[string]fosite.TokenType{
	kindCode:    fosite.AuthorizeCode,
	kindPKCE:    fosite.AuthorizeCode,
	kindAccess:  fosite.AccessToken,
	kindRefresh: fosite.RefreshToken,
}

func sessionOf(r fosite.Requester) (*session, error) {
	sess, ok := r.GetSession().(*session)
	if !ok || sess == nil || sess.UserID == 0 {
		return nil, fmt.Errorf("oauth: request %s has no user session", r.GetID())
	}
	return sess, nil
}

// newTokenRow builds the row for a token of kind issued for r.
func (s *store) newTokenRow(kind, signature string, r fosite.Requester) (*tokenRow, error) {
	sess, err := sessionOf(r)
	if err != nil {
		return nil, err
	}
	form := map[string][]string{}
	for _, k := range keptFormFields {
		if v, ok := r.GetRequestForm()[k]; ok {
			form[k] = v
		}
	}
	sr := storedRequest{
		ID:              r.GetID(),
		RequestedAt:     r.GetRequestedAt().UTC(),
		Scopes:          r.GetRequestedScopes(),
		GrantedScopes:   r.GetGrantedScopes(),
		Audience:        r.GetRequestedAudience(),
		GrantedAudience: r.GetGrantedAudience(),
		Form:            form,
		Session:         sess,
	}
	body, err := json.Marshal(sr)
	if err != nil {
		return nil, fmt.Errorf("oauth: encode request: %w", err)
	}
	now := s.now().UTC()
	exp := sess.GetExpiresAt(tokenKinds[kind])
	if exp.IsZero() {
		// fosite sets every expiry it enforces; a token without one is
		// still bounded here, by the longest lifetime.
		exp = now.Add(AuthorizationCodeLifetime)
	}
	return &tokenRow{
		Signature:   signature,
		Kind:        kind,
		RequestID:   r.GetID(),
		UserID:      sess.UserID,
		ClientID:    r.GetClient().GetID(),
		Scopes:      strings.Join(r.GetGrantedScopes(), " "),
		Audience:    strings.Join(r.GetGrantedAudience(), " "),
		Request:     string(body),
		Active:      true,
		RequestedAt: now,
		ExpiresAt:   exp.UTC(),
	}, nil
}

func (s *store) createToken(ctx context.Context, kind, signature string, r fosite.Requester, accessSignature string) error {
	row, err := s.newTokenRow(kind, signature, r)
	if err != nil {
		return err
	}
	row.AccessSignature = accessSignature
	db := s.writer(ctx)
	if kind == kindAccess {
		// The first access token of a request (the code exchange) creates
		// its grant. Refreshes do not come here: they insert their pair
		// with insertToken under the existing grant's lock, and never
		// create a grant.
		if err := s.touchGrant(ctx, db, row); err != nil {
			return err
		}
	}
	return insertRow(ctx, db, row)
}

// insertToken stores a token row for r without touching its grant.
func (s *store) insertToken(ctx context.Context, db bun.IDB, kind, signature string, r fosite.Requester, accessSignature string) error {
	row, err := s.newTokenRow(kind, signature, r)
	if err != nil {
		return err
	}
	row.AccessSignature = accessSignature
	return insertRow(ctx, db, row)
}

func insertRow(ctx context.Context, db bun.IDB, row *tokenRow) error {
	if _, err := db.NewInsert().Model(row).Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("oauth: create %s token: %w", row.Kind, err)
	}
	return nil
}

// touchGrant creates the grant of row's request, or renews its last use.
func (s *store) touchGrant(ctx context.Context, db bun.IDB, row *tokenRow) error {
	g := &grantRow{
		ID:         row.RequestID,
		UserID:     row.UserID,
		ClientID:   row.ClientID,
		Scopes:     row.Scopes,
		Audience:   row.Audience,
		CreatedAt:  row.RequestedAt,
		LastUsedAt: row.RequestedAt,
	}
	_, err := db.NewInsert().Model(g).
		On("CONFLICT (id) DO UPDATE").Set("last_used_at = EXCLUDED.last_used_at").
		Returning("NULL").Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: record grant: %w", err)
	}
	return nil
}

// getToken loads a token row. A missing or expired row is fosite.ErrNotFound
// (expired rows wait for the purge; fosite checks expiry itself too).
func (s *store) getToken(ctx context.Context, db bun.IDB, kind, signature string) (*tokenRow, error) {
	if !storable(signature) {
		// A token's signature comes from what the client sent: one no
		// token can have is unknown, not a store failure (which would
		// answer 500, or 503 temporarily_unavailable at revocation).
		return nil, fosite.ErrNotFound
	}
	var row tokenRow
	err := db.NewSelect().Model(&row).Where("signature = ? AND kind = ?", signature, kind).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fosite.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("oauth: get %s token: %w", kind, err)
	}
	return &row, nil
}

// requester rebuilds the fosite request of row, with its client.
func (s *store) requester(ctx context.Context, row *tokenRow, into fosite.Session) (*fosite.Request, error) {
	crow, err := s.loadClient(ctx, row.ClientID)
	if err != nil {
		return nil, err
	}
	client, err := s.toClient(crow)
	if err != nil {
		return nil, err
	}
	var sr storedRequest
	if err := json.Unmarshal([]byte(row.Request), &sr); err != nil {
		return nil, fmt.Errorf("oauth: decode request: %w", err)
	}
	if sr.Session == nil {
		return nil, errors.New("oauth: stored request has no session")
	}
	// Like decoding JSON into into: stored fields overwrite, expiries fosite
	// has already set on into for the tokens being issued stay.
	var sess fosite.Session = sr.Session
	if dst, ok := into.(*session); ok && dst != nil {
		dst.UserID, dst.Subject = sr.Session.UserID, sr.Session.Subject
		for k, v := range sr.Session.ExpiresAt {
			dst.SetExpiresAt(k, v)
		}
		sess = dst
	}
	form := url.Values{}
	for k, v := range sr.Form {
		form[k] = v
	}
	return &fosite.Request{
		ID:                sr.ID,
		RequestedAt:       sr.RequestedAt,
		Client:            client,
		RequestedScope:    sr.Scopes,
		GrantedScope:      sr.GrantedScopes,
		RequestedAudience: sr.Audience,
		GrantedAudience:   sr.GrantedAudience,
		Form:              form,
		Session:           sess,
	}, nil
}

func (s *store) getSession(ctx context.Context, kind, signature string, into fosite.Session) (*fosite.Request, *tokenRow, error) {
	row, err := s.getToken(ctx, s.reader(ctx), kind, signature)
	if err != nil {
		return nil, nil, err
	}
	req, err := s.requester(ctx, row, into)
	if err != nil {
		return nil, nil, err
	}
	return req, row, nil
}

func (s *store) deleteToken(ctx context.Context, kind, signature string) error {
	_, err := s.writer(ctx).NewDelete().Model((*tokenRow)(nil)).
		Where("signature = ? AND kind = ?", signature, kind).Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: delete %s token: %w", kind, err)
	}
	return nil
}

// CreateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *store) CreateAuthorizeCodeSession(ctx context.Context, code string, r fosite.Requester) error {
	return s.createToken(ctx, kindCode, code, r, "")
}

// GetAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage: a used
// code returns its request together with fosite.ErrInvalidatedAuthorizeCode.
func (s *store) GetAuthorizeCodeSession(ctx context.Context, code string, sess fosite.Session) (fosite.Requester, error) {
	req, row, err := s.getSession(ctx, kindCode, code, sess)
	if err != nil {
		return nil, err
	}
	if !row.Active {
		return req, fosite.ErrInvalidatedAuthorizeCode
	}
	return req, nil
}

// InvalidateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage. It
// is a conditional update, so of two concurrent exchanges of one code only
// one succeeds; the other gets fosite.ErrInvalidatedAuthorizeCode.
func (s *store) InvalidateAuthorizeCodeSession(ctx context.Context, code string) error {
	res, err := s.writer(ctx).NewUpdate().Model((*tokenRow)(nil)).Set("active = ?", false).
		Where("signature = ? AND kind = ? AND active = ?", code, kindCode, true).Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: invalidate code: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fosite.ErrInvalidatedAuthorizeCode
	}
	return nil
}

// CreatePKCERequestSession implements pkce.PKCERequestStorage.
func (s *store) CreatePKCERequestSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.createToken(ctx, kindPKCE, pkcePrefix+signature, r, "")
}

// GetPKCERequestSession implements pkce.PKCERequestStorage.
func (s *store) GetPKCERequestSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	req, _, err := s.getSession(ctx, kindPKCE, pkcePrefix+signature, sess)
	if err != nil {
		return nil, err
	}
	return req, nil
}

// DeletePKCERequestSession implements pkce.PKCERequestStorage.
func (s *store) DeletePKCERequestSession(ctx context.Context, signature string) error {
	return s.deleteToken(ctx, kindPKCE, pkcePrefix+signature)
}

// CreateAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *store) CreateAccessTokenSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.createToken(ctx, kindAccess, signature, r, "")
}

// GetAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *store) GetAccessTokenSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	req, _, err := s.getSession(ctx, kindAccess, signature, sess)
	if err != nil {
		return nil, err
	}
	return req, nil
}

// DeleteAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *store) DeleteAccessTokenSession(ctx context.Context, signature string) error {
	return s.deleteToken(ctx, kindAccess, signature)
}

// CreateRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *store) CreateRefreshTokenSession(ctx context.Context, signature, accessSignature string, r fosite.Requester) error {
	return s.createToken(ctx, kindRefresh, signature, r, accessSignature)
}

// GetRefreshTokenSession implements oauth2.RefreshTokenStorage: a rotated
// token returns its request together with fosite.ErrInactiveToken.
func (s *store) GetRefreshTokenSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	req, row, err := s.getSession(ctx, kindRefresh, signature, sess)
	if err != nil {
		return nil, err
	}
	if !row.Active {
		return req, fosite.ErrInactiveToken
	}
	return req, nil
}

// DeleteRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *store) DeleteRefreshTokenSession(ctx context.Context, signature string) error {
	return s.deleteToken(ctx, kindRefresh, signature)
}

// RotateRefreshToken implements oauth2.RefreshTokenStorage: it marks the
// token rotated. Only one of two concurrent rotations of a token succeeds;
// the other gets fosite.ErrSerializationFailure.
func (s *store) RotateRefreshToken(ctx context.Context, requestID, signature string) error {
	res, err := s.writer(ctx).NewUpdate().Model((*tokenRow)(nil)).
		Set("active = ?", false).Set("rotated_at = ?", s.now().UTC()).
		Where("signature = ? AND kind = ? AND request_id = ? AND active = ?", signature, kindRefresh, requestID, true).
		Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: rotate refresh token: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fosite.ErrSerializationFailure
	}
	return nil
}

// RevokeRefreshToken implements oauth2.TokenRevocationStorage. Revoking a
// refresh token ends its grant: every token of the request and the grant
// row go, under the grant's lock (see lockGrants).
func (s *store) RevokeRefreshToken(ctx context.Context, requestID string) error {
	if tx, ok := ctx.Value(txKey{}).(*bun.Tx); ok {
		return revokeRequest(ctx, *tx, requestID)
	}
	return s.db.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		return revokeRequest(ctx, tx, requestID)
	})
}

// RevokeAccessToken implements oauth2.TokenRevocationStorage: every access
// token of the request goes.
func (s *store) RevokeAccessToken(ctx context.Context, requestID string) error {
	noteRevoked(ctx, requestID)
	_, err := s.writer(ctx).NewDelete().Model((*tokenRow)(nil)).
		Where("request_id = ? AND kind = ?", requestID, kindAccess).Exec(ctx)
	if err != nil {
		return fmt.Errorf("oauth: revoke access tokens: %w", err)
	}
	return nil
}

// revokeRequest locks a grant, then deletes it and every token of it. db
// must be a transaction for the lock to cover the deletes.
func revokeRequest(ctx context.Context, db bun.IDB, requestID string) error {
	if _, err := lockGrants(ctx, db, "id = ?", requestID); err != nil {
		return fmt.Errorf("oauth: revoke grant: %w", err)
	}
	return revokeLocked(ctx, db, requestID)
}

// revokeLocked deletes a grant the caller has locked and every token of it.
func revokeLocked(ctx context.Context, db bun.IDB, requestID string) error {
	noteRevoked(ctx, requestID)
	if _, err := db.NewDelete().Model((*tokenRow)(nil)).Where("request_id = ?", requestID).Exec(ctx); err != nil {
		return fmt.Errorf("oauth: revoke tokens: %w", err)
	}
	if _, err := db.NewDelete().Model((*grantRow)(nil)).Where("id = ?", requestID).Exec(ctx); err != nil {
		return fmt.Errorf("oauth: revoke grant: %w", err)
	}
	return nil
}

// revocationStore is the store as the RFC 7009 handler sees it: a rotated
// refresh token still names its grant, so revoking it ends the grant (the
// handler would otherwise take it for already revoked, and a client that
// revokes while its own refresh is in flight would leave the new pair
// working).
type revocationStore struct{ *store }

// GetRefreshTokenSession returns a rotated token's request without
// fosite.ErrInactiveToken.
func (s revocationStore) GetRefreshTokenSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	req, err := s.store.GetRefreshTokenSession(ctx, signature, sess)
	if errors.Is(err, fosite.ErrInactiveToken) && req != nil {
		return req, nil
	}
	return req, err
}

// secretHasher compares client secrets by SHA-256. Secrets are 256-bit
// random strings this server generated, so a slow hash adds nothing.
type secretHasher struct{}

var _ fosite.Hasher = secretHasher{}

func (secretHasher) Compare(_ context.Context, hash, data []byte) error {
	sum := hashSecret(string(data))
	if subtle.ConstantTimeCompare(hash, []byte(sum)) != 1 {
		return fosite.ErrInvalidClient
	}
	return nil
}

func (secretHasher) Hash(_ context.Context, data []byte) ([]byte, error) {
	return []byte(hashSecret(string(data))), nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return fmt.Sprintf("%x", sum)
}
