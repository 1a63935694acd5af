package mcp

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// normalOrigin turns "https://Example.com:443/" into the form a browser
// sends in Origin ("https://example.com"), or reports that o is not an
// origin.
func normalOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); port == "443" && u.Scheme == "https" || port == "80" && u.Scheme == "http" {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return strings.ToLower(u.Scheme) + "://" + host, true
}

// originAllowed applies the MCP transport's Origin rule: a request without
// Origin (not from a browser) passes; one from a browser must come from
// this server's own origin (BaseURL's, or the one naming the Host the
// request was sent to, which the DNS-rebinding check has already vetted)
// or from an origin listed in AllowedOrigins. "null" and malformed
// origins are refused.
func (s *Server) originAllowed(r *http.Request) bool {
	values := r.Header.Values("Origin")
	if len(values) == 0 {
		return true
	}
	if len(values) > 1 {
		return false
	}
	o, ok := normalOrigin(values[0])
	if !ok {
		return false
	}
	if s.origins[o] {
		return true
	}
	if base, _ := normalOrigin(s.origin); o == base {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	own, _ := normalOrigin(scheme + "://" + r.Host)
	return own != "" && o == own
}

// accountOpen checks, for a token that verified, that its account may
// still be served (as authenticate does per request): a verifier need not
// check the account, so a suspended or removed account ends the stream
// too. A load failure other than an unknown user leaves the stream open
// (the next check tries again).
func (s *Server) accountOpen(ctx context.Context, info TokenInfo) error {
	var caller capabilities.Caller
	if info.Caller != nil {
		caller = *info.Caller
	} else {
		var err error
		caller, err = s.opts.Loader.LoadCaller(ctx, info.UserID)
		if errors.Is(err, capabilities.ErrUnknownUser) {
			return err
		} else if err != nil {
			return nil
		}
	}
	if caller.State == capabilities.AccountSuspended {
		return errSuspended
	}
	return nil
}

// watchToken ends a long-lived stream (through cancel) once the token that
// opened it no longer verifies, or its account is suspended or gone: it is
// checked again every recheck interval
// and at its expiry time, never per event. The returned func stops the
// watch.
func (s *Server) watchToken(ctx context.Context, st *reqState, cancel context.CancelFunc) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			wait := s.recheck
			if !st.expires.IsZero() {
				wait = min(wait, max(st.expires.Sub(s.now())+time.Millisecond, 0))
			}
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			info, err := s.verify(ctx, st.token)
			if err == nil && info.UserID != st.caller.UserID {
				err = ErrInvalidToken
			}
			if err == nil {
				err = s.accountOpen(ctx, info)
			}
			if err != nil {
				s.log.DebugContext(ctx, "mcp: ending stream: token no longer valid", "err", err, "request_id", st.requestID)
				cancel()
				return
			}
			st.expires = info.ExpiresAt
			if st.sessionID == "" || !s.sharedSessions() {
				continue
			}
			// A store that cannot answer now (outage) does not end the
			// stream; a session the store says is gone does.
			if own, err := s.ownSession(ctx, st.sessionID, st.caller.UserID); err == nil && !own {
				// Ended on another replica and the notice was lost: a
				// stream holds no request, so this is where it learns.
				s.log.DebugContext(ctx, "mcp: ending stream: session ended", "request_id", st.requestID)
				cancel()
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
