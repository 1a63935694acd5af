package oauth

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/uptrace/bun"

	"github.com/enclave-mcp/enclave/storage"
)

// codeHandler is fosite's authorization code grant with two additions: the
// account must still be allowed tokens, and losing a race against another
// exchange of the same code counts as a replay (everything the code issued
// is revoked).
type codeHandler struct {
	*oauth2.AuthorizeExplicitGrantHandler
	srv *Server
}

var (
	_ fosite.AuthorizeEndpointHandler = (*codeHandler)(nil)
	_ fosite.TokenEndpointHandler     = (*codeHandler)(nil)
)

func (h *codeHandler) HandleTokenEndpointRequest(ctx context.Context, r fosite.AccessRequester) error {
	if err := h.AuthorizeExplicitGrantHandler.HandleTokenEndpointRequest(ctx, r); err != nil {
		return err
	}
	sess, err := sessionOf(r)
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	return h.srv.checkAccount(ctx, sess.UserID, time.Time{})
}

func (h *codeHandler) PopulateTokenEndpointResponse(ctx context.Context, r fosite.AccessRequester, resp fosite.AccessResponder) error {
	err := h.AuthorizeExplicitGrantHandler.PopulateTokenEndpointResponse(ctx, r, resp)
	if errors.Is(err, fosite.ErrInvalidatedAuthorizeCode) {
		if rerr := h.srv.store.RevokeRefreshToken(ctx, r.GetID()); rerr != nil {
			return fosite.ErrServerError.WithWrap(rerr)
		}
		return fosite.ErrInvalidGrant.WithHint("The authorization code has already been used.")
	}
	if errors.Is(err, fosite.ErrNotFound) {
		// The code was deleted after HandleTokenEndpointRequest read it: a
		// revocation of the account's grants (a password change, deletion)
		// ran meanwhile. fosite would answer 500; the code is simply gone.
		return fosite.ErrInvalidGrant.WithHint("The authorization code is not valid.")
	}
	return err
}

// refreshHandler is the refresh token grant: rotation on every use, reuse
// detection, and a grace window for concurrent duplicates. The decision is
// one SQL transaction that holds the refresh token's row (FOR UPDATE on
// PostgreSQL, the write lock on SQLite), so it holds across replicas.
type refreshHandler struct {
	srv *Server
}

var _ fosite.TokenEndpointHandler = (*refreshHandler)(nil)

func (h *refreshHandler) CanSkipClientAuth(context.Context, fosite.AccessRequester) bool {
	return false
}

func (h *refreshHandler) CanHandleTokenEndpointRequest(_ context.Context, r fosite.AccessRequester) bool {
	return r.GetGrantTypes().ExactOne("refresh_token")
}

// signature validates a presented refresh token and returns its signature.
func (h *refreshHandler) signature(ctx context.Context, token string) (string, error) {
	if err := h.srv.strategy.Enigma.Validate(ctx, trimPrefix(token, "ory_rt_")); err != nil {
		return "", fosite.ErrInvalidGrant.WithHint("The refresh token is malformed or not valid.")
	}
	return h.srv.strategy.RefreshTokenSignature(ctx, token), nil
}

func (h *refreshHandler) HandleTokenEndpointRequest(ctx context.Context, r fosite.AccessRequester) error {
	if !h.CanHandleTokenEndpointRequest(ctx, r) {
		return fosite.ErrUnknownRequest
	}
	if !r.GetClient().GetGrantTypes().Has("refresh_token") {
		return fosite.ErrUnauthorizedClient.WithHint("The client may not use the refresh_token grant.")
	}
	sig, err := h.signature(ctx, r.GetRequestForm().Get("refresh_token"))
	if err != nil {
		return err
	}
	row, err := h.srv.store.getToken(ctx, h.srv.store.db.Reader, kindRefresh, sig)
	if errors.Is(err, fosite.ErrNotFound) {
		return fosite.ErrInvalidGrant.WithHint("The refresh token is malformed or not valid.")
	}
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	if row.ClientID != r.GetClient().GetID() {
		return fosite.ErrInvalidGrant.WithHint("The refresh token was issued to another client.")
	}
	now := h.srv.opts.Now().UTC()
	if !now.Before(row.ExpiresAt) {
		return fosite.ErrInvalidGrant.WithHint("The refresh token expired.")
	}
	orig, err := h.srv.store.requester(ctx, row, nil)
	if errors.Is(err, fosite.ErrNotFound) {
		return fosite.ErrInvalidGrant.WithHint("The refresh token is malformed or not valid.")
	}
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	sess := orig.Session.Clone().(*session)
	if err := h.srv.checkAccount(ctx, sess.UserID, time.Time{}); err != nil {
		return err
	}
	r.SetID(orig.GetID())
	sess.SetExpiresAt(fosite.AccessToken, now.Add(h.srv.opts.AccessTokenLifetime).Round(time.Second))
	sess.SetExpiresAt(fosite.RefreshToken, now.Add(h.srv.opts.RefreshTokenLifetime).Round(time.Second))
	r.SetSession(sess)
	r.SetRequestedScopes(orig.GetRequestedScopes())
	r.SetRequestedAudience(orig.GetRequestedAudience())
	for _, sc := range orig.GetGrantedScopes() {
		r.GrantScope(sc)
	}
	for _, a := range orig.GetGrantedAudience() {
		r.GrantAudience(a)
	}
	return nil
}

// tokenPair is what a refresh issued, sealed into the rotated token's row.
type tokenPair struct {
	Access        string    `json:"a"`
	Refresh       string    `json:"r"`
	AccessExpires time.Time `json:"e"`
}

type refreshOutcome int

const (
	refreshIssued refreshOutcome = iota + 1
	refreshReplayed
	refreshReused
	refreshGone
	refreshRefused
)

// grantRefusal says why the locked grant may not be refreshed by r: one
// of the account refusals (a key of accountRefusalHints), another error
// when the account could not be read, or nil. The grant, the token and the
// request must name the same account, and the account must be one that
// may hold tokens, created before the grant, with no password change since.
func (s *Server) grantRefusal(ctx context.Context, tx bun.Tx, grant *grantRow, row *tokenRow, r fosite.AccessRequester) error {
	acct, err := s.loadAccount(ctx, tx, grant.UserID)
	if err != nil {
		return err
	}
	sess, _ := r.GetSession().(*session)
	if row.UserID != grant.UserID || sess == nil || sess.UserID != grant.UserID ||
		(sess.Subject != "" && sess.Subject != acct.StableID) {
		return ErrNotThisAccount
	}
	if err := predates(acct, grant.CreatedAt); err != nil {
		return err
	}
	return s.refusal(acct, grant.CreatedAt)
}

func (h *refreshHandler) PopulateTokenEndpointResponse(ctx context.Context, r fosite.AccessRequester, resp fosite.AccessResponder) error {
	if !h.CanHandleTokenEndpointRequest(ctx, r) {
		return fosite.ErrUnknownRequest
	}
	presented := r.GetRequestForm().Get("refresh_token")
	sig, err := h.signature(ctx, presented)
	if err != nil {
		return err
	}
	var (
		outcome refreshOutcome
		pair    tokenPair
	)
	srv := h.srv
	var refused error
	err = srv.store.db.RunInTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		// Lock order, shared with every revocation path: the grant row
		// first, then the token row. A revocation holding the grant makes
		// this wait and then find the grant gone; one arriving later waits
		// for this commit and then deletes what it issued.
		var requestID string
		err := tx.NewSelect().Model((*tokenRow)(nil)).Column("request_id").
			Where("signature = ? AND kind = ?", sig, kindRefresh).Scan(ctx, &requestID)
		if errors.Is(err, sql.ErrNoRows) {
			outcome = refreshGone
			return nil
		}
		if err != nil {
			return fmt.Errorf("oauth: read refresh token: %w", err)
		}
		grants, err := lockGrants(ctx, tx, "id = ?", requestID)
		if err != nil {
			return fmt.Errorf("oauth: %w", err)
		}
		if len(grants) == 0 {
			// The grant was revoked. A refresh never re-creates it, and
			// tokens left without it are dead: delete them.
			outcome = refreshGone
			return revokeLocked(ctx, tx, requestID)
		}
		grant := grants[0]
		q := tx.NewSelect().Model((*tokenRow)(nil)).Where("signature = ? AND kind = ?", sig, kindRefresh)
		if srv.store.db.Dialect() == storage.Postgres {
			q = q.For("UPDATE")
		}
		var row tokenRow
		if err := q.Scan(ctx, &row); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				outcome = refreshGone
				return nil
			}
			return fmt.Errorf("oauth: lock refresh token: %w", err)
		}
		// The grant must be this account's, issued after the account was
		// created and after its last password change.
		if err := srv.grantRefusal(ctx, tx, &grant, &row, r); err != nil {
			if _, known := accountRefusalHints[err]; !known {
				return err
			}
			refused = err
			outcome = refreshRefused
			if errors.Is(refused, ErrPasswordChanged) || errors.Is(refused, ErrNotThisAccount) || errors.Is(refused, ErrAccountNotFound) {
				return revokeLocked(ctx, tx, requestID) // dead for good
			}
			return nil
		}
		now := srv.opts.Now().UTC()
		switch {
		case !now.Before(row.ExpiresAt):
			outcome = refreshGone
			return nil
		case row.Active:
			outcome = refreshIssued
			pair, err = h.rotate(ctx, tx, &row, presented, r, now)
			return err
		case row.RotatedAt != nil && row.Successor != "" && srv.opts.RefreshGracePeriod > 0 &&
			now.Sub(*row.RotatedAt) <= srv.opts.RefreshGracePeriod:
			// A duplicate inside the grace window gets the pair the first
			// exchange issued; its grant is locked and alive.
			p, err := openSuccessor(presented, sig, row.Successor)
			if err != nil {
				return err
			}
			outcome, pair = refreshReplayed, p
			return nil
		default:
			outcome = refreshReused
			return revokeLocked(ctx, tx, row.RequestID)
		}
	})
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	switch outcome {
	case refreshRefused:
		return refusalGrantError(refused)
	case refreshGone:
		return fosite.ErrInvalidGrant.WithHint("The refresh token is not valid.")
	case refreshReused:
		srv.opts.Logger.WarnContext(ctx, "oauth: refresh token reused after rotation; grant revoked", "grant", r.GetID(), "client", r.GetClient().GetID())
		return fosite.ErrInvalidGrant.WithHint("The refresh token was already used; its grant has been revoked.")
	}
	resp.SetAccessToken(pair.Access)
	resp.SetTokenType("bearer")
	resp.SetExpiresIn(pair.AccessExpires.Sub(srv.opts.Now()).Round(time.Second))
	resp.SetScopes(r.GetGrantedScopes())
	resp.SetExtra("refresh_token", pair.Refresh)
	return nil
}

// rotate issues a new pair for the active refresh token row inside tx and
// retires row, sealing the new pair into it for the grace window.
func (h *refreshHandler) rotate(ctx context.Context, tx bun.Tx, row *tokenRow, presented string, r fosite.AccessRequester, now time.Time) (tokenPair, error) {
	srv := h.srv
	access, accessSig, err := srv.strategy.GenerateAccessToken(ctx, r)
	if err != nil {
		return tokenPair{}, fmt.Errorf("oauth: generate access token: %w", err)
	}
	refresh, refreshSig, err := srv.strategy.GenerateRefreshToken(ctx, r)
	if err != nil {
		return tokenPair{}, fmt.Errorf("oauth: generate refresh token: %w", err)
	}
	stored := r.Sanitize(nil)
	stored.SetID(r.GetID())
	// The new pair joins the existing grant (locked by the caller); a
	// refresh never creates a grant.
	if err := srv.store.insertToken(ctx, tx, kindAccess, accessSig, stored, ""); err != nil {
		return tokenPair{}, err
	}
	if err := srv.store.insertToken(ctx, tx, kindRefresh, refreshSig, stored, accessSig); err != nil {
		return tokenPair{}, err
	}
	if _, err := tx.NewUpdate().Model((*grantRow)(nil)).Set("last_used_at = ?", now).
		Where("id = ?", row.RequestID).Exec(ctx); err != nil {
		return tokenPair{}, fmt.Errorf("oauth: renew grant: %w", err)
	}
	pair := tokenPair{Access: access, Refresh: refresh, AccessExpires: r.GetSession().GetExpiresAt(fosite.AccessToken)}
	sealed, err := sealSuccessor(presented, row.Signature, pair)
	if err != nil {
		return tokenPair{}, err
	}
	_, err = tx.NewUpdate().Model((*tokenRow)(nil)).
		Set("active = ?", false).Set("rotated_at = ?", now).Set("successor = ?", sealed).
		Where("signature = ? AND kind = ?", row.Signature, kindRefresh).Exec(ctx)
	if err != nil {
		return tokenPair{}, fmt.Errorf("oauth: retire refresh token: %w", err)
	}
	return pair, nil
}

// successorKey derives the key that seals a rotated token's successor pair
// from the rotated token itself: only whoever presents it again can open
// the pair, and the database alone cannot.
func successorKey(presented string) []byte {
	m := hmac.New(sha256.New, []byte(presented))
	m.Write([]byte("enclave oauth refresh successor v1"))
	return m.Sum(nil)
}

func sealSuccessor(presented, signature string, p tokenPair) (string, error) {
	plain, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("oauth: seal successor: %w", err)
	}
	aead, err := newAEAD(successorKey(presented))
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("oauth: seal successor: %w", err)
	}
	return base64.RawStdEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte(signature))), nil
}

func openSuccessor(presented, signature, sealed string) (tokenPair, error) {
	raw, err := base64.RawStdEncoding.DecodeString(sealed)
	if err != nil {
		return tokenPair{}, fmt.Errorf("oauth: open successor: %w", err)
	}
	aead, err := newAEAD(successorKey(presented))
	if err != nil {
		return tokenPair{}, err
	}
	if len(raw) < aead.NonceSize() {
		return tokenPair{}, errors.New("oauth: open successor: too short")
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(signature))
	if err != nil {
		return tokenPair{}, fmt.Errorf("oauth: open successor: %w", err)
	}
	var p tokenPair
	if err := json.Unmarshal(plain, &p); err != nil {
		return tokenPair{}, fmt.Errorf("oauth: open successor: %w", err)
	}
	return p, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("oauth: cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("oauth: cipher: %w", err)
	}
	return aead, nil
}

func trimPrefix(token, prefix string) string {
	if len(token) > len(prefix) && token[:len(prefix)] == prefix {
		return token[len(prefix):]
	}
	return token
}
