// Package verifiers holds the bearer token verifiers of /mcp
// (mcp.TokenVerifier), next to what they verify: enclave's own OAuth
// access tokens (OAuth, through the revocation-aware caller cache),
// workspace API keys (WorkspaceKeys), and the audit of refused tokens
// (Audited), which wraps any verifier, enclave's own or an embedder's.
package verifiers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/internal/callercache"
	"github.com/enclave-mcp/enclave/internal/clientnet"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/workspaces"
)

// OAuth checks /mcp bearer tokens against enclave's own authorization
// server, through the revocation-aware cache of verified callers (nil
// Cache: no cache).
type OAuth struct {
	Server *oauth.Server
	Cache  *callercache.Cache[mcp.TokenInfo]
}

// VerifyToken implements mcp.TokenVerifier.
func (v OAuth) VerifyToken(ctx context.Context, token string) (mcp.TokenInfo, error) {
	if info, ok := v.Cache.Get(token); ok {
		return CachedToken(info), nil
	}
	ticket := v.Cache.Begin() // before the read: a change meanwhile voids the Put
	a, err := v.Server.VerifyAccessToken(ctx, token)
	// A token that matched a grant names its user next to the refusal, for
	// the audit log; one that matched nothing names no one.
	var refused mcp.TokenInfo
	if ref := (*oauth.TokenRefusal)(nil); errors.As(err, &ref) {
		refused.UserID = ref.StableUserID
	}
	if errors.Is(err, oauth.ErrAccountSuspended) {
		// 403, not 401: a new token would not help.
		return refused, &capabilities.Error{Code: capabilities.CodeAccountSuspended, Message: "account suspended", Err: err}
	}
	if errors.Is(err, oauth.ErrInvalidToken) {
		return refused, fmt.Errorf("%w: %w", mcp.ErrInvalidToken, err)
	}
	if err != nil {
		// Not a refusal: the token could not be checked (503 at /mcp). A
		// client cannot cause this: the token passed its HMAC check before
		// any SQL, and the lookup is by the token's signature.
		return mcp.TokenInfo{}, fmt.Errorf("%w: %w", mcp.ErrTokenUnavailable, err)
	}
	// The token check loaded the account's state, roles and permissions in
	// its one query: hand them over instead of loading the account again.
	caller := a.Caller()
	info := mcp.TokenInfo{UserID: a.StableUserID, Scopes: a.Scopes, Audience: a.Audience, ExpiresAt: a.ExpiresAt, Caller: &caller,
		Grant: a.GrantID}
	v.Cache.Put(ticket, token, a.UserID, a.GrantID, a.ExpiresAt, CachedToken(info))
	return info, nil
}

// CachedToken returns a copy of a cached verification: the caller's
// slices are not shared with later requests.
func CachedToken(info mcp.TokenInfo) mcp.TokenInfo {
	info.Scopes = slices.Clone(info.Scopes)
	info.Audience = slices.Clone(info.Audience)
	if info.Caller != nil {
		c := *info.Caller
		c.Roles = slices.Clone(c.Roles)
		c.Permissions = slices.Clone(c.Permissions)
		c.Scopes = slices.Clone(c.Scopes)
		info.Caller = &c
	}
	return info
}

// CallerLoader loads an account's caller by stable user id
// (accounts.Service.LoadCaller).
type CallerLoader interface {
	LoadCaller(ctx context.Context, stableUserID string) (capabilities.Caller, error)
}

// WorkspaceKeys accepts workspace API keys (workspaces.KeyPrefix) as
// bearer tokens at /mcp and hands every other token to Next. A key's
// caller is its maker's account, loaded fresh (state, so a suspended or
// deleting account is refused as for a token), confined to the workspace
// capabilities (Caller.Only) and carrying the key (Caller.Credential),
// which the workspaces service looks up again on every call: a revoked
// key stops at once, and a key never reaches another workspace. Keys are
// never held in the caller cache: each request reads the key in SQL, so a
// key revoked on one replica (by its owner, or with the password) is
// refused at its next request on every replica.
type WorkspaceKeys struct {
	Next     mcp.TokenVerifier
	Keys     *workspaces.Service
	Accounts CallerLoader
	// Resource is the /mcp resource a key is good for (the token
	// audience), read at each verification.
	Resource func() string
}

// VerifyToken implements mcp.TokenVerifier.
func (v WorkspaceKeys) VerifyToken(ctx context.Context, token string) (mcp.TokenInfo, error) {
	if !strings.HasPrefix(token, workspaces.KeyPrefix) {
		return v.Next.VerifyToken(ctx, token)
	}
	g, err := v.Keys.VerifyKey(ctx, token)
	if errors.Is(err, workspaces.ErrInvalidKey) {
		return mcp.TokenInfo{}, fmt.Errorf("%w: workspace key", mcp.ErrInvalidToken)
	}
	if err != nil {
		return mcp.TokenInfo{}, fmt.Errorf("%w: %w", mcp.ErrTokenUnavailable, err)
	}
	caller, err := v.Accounts.LoadCaller(ctx, g.UserID)
	if errors.Is(err, capabilities.ErrUnknownUser) {
		return mcp.TokenInfo{}, fmt.Errorf("%w: workspace key of a removed account", mcp.ErrInvalidToken)
	}
	if err != nil {
		return mcp.TokenInfo{}, fmt.Errorf("%w: %w", mcp.ErrTokenUnavailable, err)
	}
	// The account's own roles and permissions do not ride on a key.
	caller.Roles, caller.Permissions = nil, nil
	caller.Only, caller.Credential = g.Only, g.Credential
	return mcp.TokenInfo{UserID: g.UserID, Audience: []string{v.Resource()}, Caller: &caller}, nil
}

// Audited records refused tokens in the audit log, with the hash of the
// user the token was issued to and of the client's address (the same
// schemes as every other row). Only a token that resolved to a grant is
// recorded (the verifier then names its user next to the error): anyone
// can send made-up tokens, and logging those would let them flood the
// log. Every refusal, named or not, is counted through Refused.
type Audited struct {
	Next  mcp.TokenVerifier
	Audit *audit.Log
	// Refused, when set, counts a refusal by reason (metrics).
	Refused func(reason string)
	// ClientIP returns the client's address of a request's context.
	ClientIP func(ctx context.Context) string
}

// VerifyToken implements mcp.TokenVerifier.
func (v Audited) VerifyToken(ctx context.Context, token string) (mcp.TokenInfo, error) {
	info, err := v.Next.VerifyToken(ctx, token)
	if err == nil {
		return info, nil
	}
	if errors.Is(err, mcp.ErrTokenUnavailable) {
		return info, err // not a refusal, an outage: nothing to audit
	}
	reason := RefusalReason(err)
	if v.Refused != nil {
		v.Refused(reason)
	}
	if info.UserID == "" {
		return info, err
	}
	ip := ""
	if v.ClientIP != nil {
		ip = v.ClientIP(ctx)
	}
	_ = v.Audit.Record(ctx, audit.Event{
		Category: audit.CategoryMCP, Action: "token", Result: audit.ResultDenied, Reason: reason,
		UserHash: v.Audit.HashUser(info.UserID),
		IPHash:   v.Audit.HashIP(ip),
	})
	return info, err
}

// RefusalReason names why a token was refused, from the verifier's error:
// the reason of the audit row and the metric's label.
func RefusalReason(err error) string {
	for _, r := range []struct {
		err    error
		reason string
	}{
		{oauth.ErrTokenMalformed, "malformed"},
		{oauth.ErrTokenExpired, "expired"},
		{oauth.ErrWrongAudience, "wrong_audience"},
		{oauth.ErrClientBlocked, "client_blocked"},
		{oauth.ErrTokenUnknown, "unknown_or_revoked"},
		{oauth.ErrPasswordChanged, "revoked_by_password_change"},
		{oauth.ErrAccountSuspended, "account_suspended"},
		{oauth.ErrAccountDeleting, "account_deleting"},
		{oauth.ErrEmailNotVerified, "email_not_verified"},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "invalid"
}

// Bursts counts every /mcp token refusal of Next (made-up, expired,
// revoked, wrong audience, …) for the denial-burst alert: per client
// network, and per user when the verifier named the token's user
// (mcp.RefusalObserver). The wrapped verifier's own observer, if any,
// hears of the refusal first.
type Bursts struct {
	mcp.TokenVerifier
	// Bursts returns the publisher counting denials (nil: none yet).
	Bursts func() *events.BurstPublisher
}

// TokenRefused implements mcp.RefusalObserver.
func (v Bursts) TokenRefused(ctx context.Context, info mcp.TokenInfo, err error) {
	if o, ok := v.TokenVerifier.(mcp.RefusalObserver); ok {
		o.TokenRefused(ctx, info, err)
	}
	if b := v.Bursts(); b != nil {
		b.Observe(ctx, time.Now(), info.UserID, clientnet.Addr(ctx))
	}
}
