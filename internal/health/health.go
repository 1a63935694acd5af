// Package health answers a server's liveness and readiness probes:
// /healthz (the process serves; no I/O) and /readyz (the database
// answers, the schema is current, the keeper encrypts and decrypts, and
// the server is not shutting down), a readiness result shared by every
// prober for a second.
package health

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/storage"
)

// Probe checks a server's readiness. Set its fields before use.
type Probe struct {
	Store *storage.Store
	// Sources are the embedder's migrations, checked with enclave's.
	Sources []migrations.Source
	// Version is named in /readyz's answers.
	Version string
	Log     *slog.Logger

	draining atomic.Bool
	mu       sync.Mutex
	at       time.Time
	reason   string
}

// Drain marks the server as shutting down: from now on it is not ready.
func (p *Probe) Drain() { p.draining.Store(true) }

// Ready reports whether the server can serve. The error is a short
// reason fit for a probe's answer.
func (p *Probe) Ready(ctx context.Context) error {
	if p.draining.Load() {
		return errors.New("shutting down")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.at) > time.Second {
		// The result is shared for a second by every prober, so it must
		// not depend on this caller: a client that hangs up (ending its
		// request context) would otherwise make the server look unready
		// to the load balancer. check bounds the check itself.
		p.reason = p.check(context.WithoutCancel(ctx))
		p.at = time.Now()
	}
	if p.reason != "" {
		return errors.New(p.reason)
	}
	return nil
}

func (p *Probe) check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := p.Store.Ping(ctx); err != nil {
		p.Log.Warn("readiness: database unreachable", "err", err)
		return "database unreachable"
	}
	behind, err := migrations.Pending(ctx, p.Store.DB, p.Sources)
	if err != nil {
		p.Log.Warn("readiness: migration status", "err", err)
		return "database unreachable"
	}
	if behind != "" {
		return "migrations pending (run enclave migrate)"
	}
	probe := []byte("enclave readiness probe")
	ct, err := p.Store.Keeper.Encrypt(ctx, probe)
	if err == nil {
		var pt []byte
		pt, err = p.Store.Keeper.Decrypt(ctx, ct)
		if err == nil && !bytes.Equal(pt, probe) {
			err = errors.New("round trip changed the data")
		}
	}
	if err != nil {
		p.Log.Warn("readiness: keeper unusable", "err", err)
		return "keeper unusable"
	}
	return ""
}

// Healthz answers 200 while the process serves: no I/O, for a liveness
// probe (a database outage must not get the process restarted).
func (p *Probe) Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readyz answers 200 with the version when Ready, 503 with the reason
// otherwise: for a readiness probe and a load balancer.
func (p *Probe) Readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if err := p.Ready(r.Context()); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error(), "version": p.Version})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": p.Version})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
