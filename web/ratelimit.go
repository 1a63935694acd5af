package web

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/enclave-mcp/enclave/internal/ratelimit"
	"github.com/enclave-mcp/enclave/storage"
)

// Limit is a rate limit: at most Requests in any Window. Zero fields take
// DefaultCredentialRequests per DefaultCredentialWindow.
type Limit = ratelimit.Limit

// Decision is the outcome of one rate-limit check.
type Decision = ratelimit.Decision

// Limiter counts requests per bucket in SQL, shared by every replica (see
// package internal/ratelimit, which owns the table).
type Limiter = ratelimit.Limiter

// Defaults of the shared credential bucket.
const (
	DefaultCredentialRequests = ratelimit.DefaultRequests
	DefaultCredentialWindow   = ratelimit.DefaultWindow
)

// NewLimiter returns a limiter on store's SQL database. now is the clock
// (nil: time.Now).
func NewLimiter(store *storage.Store, now func() time.Time) *Limiter {
	return ratelimit.New(store, now)
}

// credentialBucketPrefix prefixes the shared credential bucket of a client.
const credentialBucketPrefix = "credential:ip:"

// LimitCredentials wraps next, a credential endpoint (one that accepts a
// password, a token or a reset code), in the shared per-client credential
// bucket. Only non-safe methods are counted: showing a login form is free.
// A refused request gets 429 with Retry-After, before next reads the body.
// If the limiter's database fails, the request is refused with 503 (fail
// closed).
func (h *Handler) LimitCredentials(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if h.allowCredential(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// allowCredential counts r against its client's credential bucket. When
// the request is refused it answers it (429 with Retry-After, or 503 when
// the limiter fails: fail closed) and returns false.
func (h *Handler) allowCredential(w http.ResponseWriter, r *http.Request) bool {
	bucket := credentialBucketPrefix + clientBucket(h.ipOf.Addr(r))
	d, err := h.limiter.Allow(r.Context(), bucket, h.opts.CredentialLimit)
	if err != nil {
		h.log.ErrorContext(r.Context(), "web: rate limit check failed", "err", err)
		w.Header().Set("Retry-After", "5")
		h.renderError(w, r, http.StatusServiceUnavailable, "The service is briefly unavailable. Please try again in a moment.")
		return false
	}
	if !d.Allowed {
		secs := int64(math.Ceil(d.RetryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		h.renderError(w, r, http.StatusTooManyRequests, fmt.Sprintf("Too many attempts from your network. Try again in %s.", humanSeconds(secs)))
		return false
	}
	return true
}

func humanSeconds(s int64) string {
	if s == 1 {
		return "1 second"
	}
	if s < 120 {
		return strconv.FormatInt(s, 10) + " seconds"
	}
	return strconv.FormatInt((s+59)/60, 10) + " minutes"
}
