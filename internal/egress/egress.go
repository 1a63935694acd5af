// Package egress is the HTTP client for requests to destinations that
// somebody other than the operator chose: webhook targets, the outbound
// gateway's URLs. Such a destination must never let a caller reach the
// server's own network, so the client
//
//   - speaks https only, on the first request and on every redirect;
//   - checks the address it actually connects to, after DNS resolution,
//     so a name that resolves to 127.0.0.1 (or is rebound to it between a
//     check and the connection) is refused: loopback, private, link-local
//     (cloud metadata included), unspecified, multicast, shared (CGNAT),
//     documentation, benchmark and reserved ranges, and IPv6 forms that
//     embed such an IPv4 address;
//   - never uses a proxy from the environment, which would move the
//     connection out of the check's sight;
//   - bounds the whole request in time, the number of redirects and the
//     size of the response body.
//
// Options.AllowPrivate lifts the address check for tests and for operators
// whose targets live on their own network; nothing else changes.
package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxRedirects     = 3
	DefaultMaxResponseBytes = 1 << 20
)

// Errors a request can fail with; test them with errors.Is (they arrive
// wrapped in *url.Error by http.Client).
var (
	// ErrForbiddenAddress: the destination resolved to an address outside
	// the public internet.
	ErrForbiddenAddress = errors.New("egress: destination address is not public")
	// ErrScheme: the URL (or a redirect) is not https.
	ErrScheme = errors.New("egress: only https destinations are allowed")
	// ErrTooManyRedirects: more redirects than Options.MaxRedirects.
	ErrTooManyRedirects = errors.New("egress: too many redirects")
	// ErrResponseTooLarge: the response body is longer than
	// Options.MaxResponseBytes. It is returned by the body's Read.
	ErrResponseTooLarge = errors.New("egress: response body too large")
)

// Options configure a client. The zero value is a safe client with the
// defaults above.
type Options struct {
	// AllowPrivate lifts the address check (tests; operators whose targets
	// are on their own network). https is still required.
	AllowPrivate bool
	// Timeout bounds the whole exchange, redirects and body included.
	// Default DefaultTimeout.
	Timeout time.Duration
	// MaxRedirects is how many redirects are followed; negative follows
	// none (the redirect response is returned as is). Default
	// DefaultMaxRedirects.
	MaxRedirects int
	// MaxResponseBytes bounds each response body. Default
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// TLSConfig replaces the default TLS configuration (tests use it to
	// trust an httptest server's certificate). Minimum TLS 1.2 is kept.
	TLSConfig *tls.Config
	// CheckRedirect, when set, is called after the built-in checks for
	// every redirect; an error stops the request. Use it to re-check a
	// redirect's host against an allowlist.
	CheckRedirect func(req *http.Request, via []*http.Request) error
}

// NewClient returns an http.Client applying o. Each call builds its own
// transport; keep the client and reuse it.
func NewClient(o Options) *http.Client {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxRedirects == 0 {
		o.MaxRedirects = DefaultMaxRedirects
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSConfig != nil {
		tlsConfig = o.TLSConfig.Clone()
		if tlsConfig.MinVersion < tls.VersionTLS12 {
			tlsConfig.MinVersion = tls.VersionTLS12
		}
	}
	dialer := &net.Dialer{
		Timeout:   5 * time.Second,
		KeepAlive: 30 * time.Second,
		Control:   control(o.AllowPrivate),
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsConfig,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    5 * time.Second,
		ResponseHeaderTimeout:  o.Timeout,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Timeout:   o.Timeout,
		Transport: &limitTransport{base: transport, max: o.MaxResponseBytes},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if o.MaxRedirects < 0 {
				return http.ErrUseLastResponse
			}
			if len(via) > o.MaxRedirects {
				return ErrTooManyRedirects
			}
			if err := CheckURL(req.URL); err != nil {
				return err
			}
			if o.CheckRedirect != nil {
				return o.CheckRedirect(req, via)
			}
			return nil
		},
	}
}

// CheckURL refuses what no request may be sent to, before any connection:
// a scheme other than https, a missing host, or credentials in the URL. A
// literal IP host is not judged here; the connection check sees it.
func CheckURL(u *url.URL) error {
	if u == nil || u.Scheme != "https" {
		return ErrScheme
	}
	if u.Hostname() == "" {
		return fmt.Errorf("egress: the URL has no host")
	}
	if u.User != nil {
		return fmt.Errorf("egress: credentials in the URL are not allowed")
	}
	return nil
}

// Public reports whether addr is an address on the public internet: not
// loopback, private, link-local, unspecified, multicast, shared, reserved
// or documentation space, in IPv4 or IPv6, including IPv6 forms that embed
// an IPv4 address (mapped, NAT64, 6to4); local-use NAT64 is never public.
func Public(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsLoopback() || addr.IsPrivate() ||
		addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() ||
		addr.IsMulticast() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(addr) {
			return false
		}
	}
	if addr.Is6() {
		b := addr.As16()
		switch {
		case nat64.Contains(addr):
			return Public(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(addr):
			return Public(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return true
}

var (
	blocked = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
		netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT, some metadata services)
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),    // documentation
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("198.51.100.0/24"), // documentation
		netip.MustParsePrefix("203.0.113.0/24"),  // documentation
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
		netip.MustParsePrefix("100::/64"),        // discard
		netip.MustParsePrefix("2001::/32"),       // Teredo
		netip.MustParsePrefix("2001:db8::/32"),   // documentation
		netip.MustParsePrefix("2001:10::/28"),    // ORCHID
		netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated)
		netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
		netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
		// Local-use NAT64 (RFC 8215): not globally reachable, and where
		// the IPv4 address sits depends on the local prefix length, so
		// it cannot be judged by its last 32 bits.
		netip.MustParsePrefix("64:ff9b:1::/48"),
		netip.MustParsePrefix("2001:2::/48"),    // benchmarking
		netip.MustParsePrefix("100:0:0:1::/64"), // dummy prefix (RFC 9780)
		netip.MustParsePrefix("3fff::/20"),      // documentation (RFC 9637)
		netip.MustParsePrefix("5f00::/16"),      // SRv6 SIDs (RFC 9602)
	}
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// control is the dialer hook: it runs for every connection attempt with the
// address actually dialled, after resolution.
func control(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if network != "tcp4" && network != "tcp6" {
			return fmt.Errorf("%w: network %s", ErrForbiddenAddress, network)
		}
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !Public(ap.Addr()) {
			return ErrForbiddenAddress
		}
		return nil
	}
}

// limitTransport bounds every response body it hands out.
type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := CheckURL(req.URL); err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, ErrResponseTooLarge
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n + int(b.left), ErrResponseTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// ReadAll reads resp's body whole (bounded by the client's
// MaxResponseBytes) and closes it.
func ReadAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
