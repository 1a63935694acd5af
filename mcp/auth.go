package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// TokenInfo is what a verified access token says.
type TokenInfo struct {
	UserID    string    // the subject: a stable user id
	Scopes    []string  // granted scopes
	Audience  []string  // resources the token is for (RFC 8707)
	ExpiresAt time.Time // zero means the verifier already checked expiry
	// Grant identifies the authorization behind the token, the same across
	// its refreshes (enclave's verifier: the OAuth grant). The 2026-07-28
	// protocol's per-call state (a requestState, notifications/cancelled)
	// is bound to it, so another credential of the same user can neither
	// replay nor cancel it. Empty binds that state to the user alone.
	Grant string
	// Caller, when set, is the subject's caller loaded by the verifier in
	// this same request, with fresh roles, permissions and account state
	// (for example in the query that checked the token). The server then
	// skips its Loader. Leave it nil unless it was loaded now or is kept
	// current by a revocation-aware cache (enclave's own verifier caches
	// it until anything it depends on changes; see internal/callercache).
	Caller *capabilities.Caller
}

// TokenVerifier checks a bearer token. It returns ErrInvalidToken (or any
// error) for a token it does not accept, and the server answers 401; an
// error carrying capabilities.CodeAccountSuspended is answered 403 instead.
type TokenVerifier interface {
	VerifyToken(ctx context.Context, token string) (TokenInfo, error)
}

// TokenVerifierFunc adapts a function to TokenVerifier.
type TokenVerifierFunc func(ctx context.Context, token string) (TokenInfo, error)

// VerifyToken calls f.
func (f TokenVerifierFunc) VerifyToken(ctx context.Context, token string) (TokenInfo, error) {
	return f(ctx, token)
}

// ErrInvalidToken is the error verifiers return for a token they refuse
// (wrap it to give a reason). Every error that does not wrap
// ErrTokenUnavailable is a refusal: 401 with the challenge.
var ErrInvalidToken = errors.New("mcp: invalid token")

// ErrTokenUnavailable is the error verifiers return (wrapped) when the
// token could not be checked at all, such as during a database outage: the
// request gets 503 with Retry-After instead of a 401 that would make the
// client drop its token, and no refusal is audited. Only an error of the
// verifier's own infrastructure may wrap it, never one a client's input
// can cause: an unrecognised error stays a refusal.
var ErrTokenUnavailable = errors.New("mcp: token check unavailable")

// bearer extracts the token of an "Authorization: Bearer …" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// RefusalObserver is implemented by a TokenVerifier that wants to hear of
// every token the server refuses: the verifier's own refusals and the
// server's checks after it (no subject, wrong audience, expired). info is
// what the verifier returned (its UserID names the token's user when the
// verifier knows it, e.g. for a revoked token; "" otherwise). Outages
// (ErrTokenUnavailable) and cancelled requests are not refusals.
// TokenRefused runs before the answer is written; keep it short.
type RefusalObserver interface {
	TokenRefused(ctx context.Context, info TokenInfo, err error)
}

// verify checks the token's audience and expiry after the verifier.
func (s *Server) verify(ctx context.Context, token string) (TokenInfo, error) {
	info, err := s.opts.Verifier.VerifyToken(ctx, token)
	if err != nil {
		s.refused(ctx, info, err)
		return TokenInfo{}, fmt.Errorf("mcp: verify token: %w", err)
	}
	switch {
	case info.UserID == "":
		err = fmt.Errorf("%w: no subject", ErrInvalidToken)
	case !slices.Contains(info.Audience, s.resource):
		err = fmt.Errorf("%w: audience %v is not %s", ErrInvalidToken, info.Audience, s.resource)
	case !info.ExpiresAt.IsZero() && !s.now().Before(info.ExpiresAt):
		err = fmt.Errorf("%w: expired", ErrInvalidToken)
	default:
		return info, nil
	}
	s.refused(ctx, info, err)
	return TokenInfo{}, err
}

// refused tells a RefusalObserver verifier of a refusal.
func (s *Server) refused(ctx context.Context, info TokenInfo, err error) {
	o, ok := s.opts.Verifier.(RefusalObserver)
	if !ok || errors.Is(err, ErrTokenUnavailable) || errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return
	}
	o.TokenRefused(ctx, info, err)
}

// challenge answers 401 with the RFC 9728 pointer to the resource metadata.
// invalid is true when a token was presented and refused.
func (s *Server) challenge(w http.ResponseWriter, invalid bool, requestID string) {
	v := fmt.Sprintf(`Bearer resource_metadata=%q`, s.metadataURL)
	if invalid {
		v = fmt.Sprintf(`Bearer error="invalid_token", resource_metadata=%q`, s.metadataURL)
	}
	w.Header().Set("WWW-Authenticate", v)
	writeHTTPError(w, http.StatusUnauthorized, "authentication required", requestID)
}

// insufficientScope answers 403 for a token lacking the scopes missing
// (RFC 6750 §3.1). The challenge's scope is what to ask for next: the
// token's own scopes and the missing ones, since a client replaces its
// scope with it on the new authorization and must not lose what it had
// (asking for "admin" alone would drop "mcp"). The JSON error names only
// the missing scopes.
func (s *Server) insufficientScope(w http.ResponseWriter, have, missing []string, requestID string) {
	want := slices.Clone(have)
	for _, sc := range missing {
		if !slices.Contains(want, sc) {
			want = append(want, sc)
		}
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata=%q`,
		strings.Join(want, " "), s.metadataURL))
	refuse(w, &capabilities.Error{Code: capabilities.CodeInsufficientScope, Message: "the access token lacks a required scope", Scopes: missing}, requestID)
}
