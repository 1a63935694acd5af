// Package rrproxy is a round-robin reverse proxy without stickiness, for
// testing several replicas behind one address: each request goes to the
// next replica in turn. Like a load balancer with health checks, a replica
// that refuses connections is skipped (the request was never sent, so
// sending it to the next one is safe); a request cut off in flight is
// answered 502. Incoming X-Forwarded-For is kept and the client's address
// appended, as a proxy behind a trusted one does.
package rrproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
)

// Proxy is the handler.
type Proxy struct {
	backends []*url.URL
	next     atomic.Uint64
	hits     []atomic.Int64
	rt       http.RoundTripper
	handler  http.Handler
}

// New returns a proxy over the backends (base URLs such as
// "http://127.0.0.1:8081").
func New(backends []string) (*Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("rrproxy: no backends")
	}
	p := &Proxy{hits: make([]atomic.Int64, len(backends)), rt: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("rrproxy: backend %q: want http://host:port", b)
		}
		p.backends = append(p.backends, u)
	}
	p.handler = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Rewrite drops the incoming X-Forwarded-For; keep it.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "replica"
		},
		Transport:     p,
		FlushInterval: -1, // stream SSE as it comes
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return p, nil
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.handler.ServeHTTP(w, r) }

// Hits returns how many requests each backend served.
func (p *Proxy) Hits() []int64 {
	out := make([]int64, len(p.hits))
	for i := range p.hits {
		out[i] = p.hits[i].Load()
	}
	return out
}

// RoundTrip sends r to the next backend that accepts the connection.
func (p *Proxy) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		r.Body.Close()
	}
	var lastErr error
	// Try each backend once, from the next in turn: taking a fresh turn
	// per attempt could land on the same dead backend again while other
	// requests move the counter.
	start := p.next.Add(1)
	for k := range uint64(len(p.backends)) {
		i := int((start + k) % uint64(len(p.backends)))
		out := r.Clone(r.Context())
		out.URL.Host = p.backends[i].Host
		out.Body = io.NopCloser(bytes.NewReader(body))
		// With GetBody, the transport resends a request that failed on a
		// reused connection before any byte was written (a pooled
		// connection to a replica that just died).
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		if r.Body == nil {
			out.Body, out.GetBody = nil, nil
		}
		resp, err := p.rt.RoundTrip(out)
		if err == nil {
			p.hits[i].Add(1)
			return resp, nil
		}
		lastErr = err
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			return nil, err // sent, perhaps served: not repeated
		}
	}
	return nil, lastErr
}
