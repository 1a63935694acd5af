package web

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP finds the address of the client behind a request.
//
// Without trusted proxies it is the TCP peer (Request.RemoteAddr). When the
// peer is a trusted proxy, X-Forwarded-For is read from the right: each
// proxy appends the address it received the request from, so the first
// entry from the right that is not a trusted proxy is the client. Entries
// to its left were written by the client and are never believed. A header
// that cannot be parsed stops the walk at the last trusted hop.
type ClientIP struct {
	// TrustedProxies lists the networks of reverse proxies in front of the
	// server. Empty: X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
}

// Addr returns the client address of r (unmapped from IPv4-in-IPv6), or
// the zero Addr when RemoteAddr is not an IP address.
func (c *ClientIP) Addr(r *http.Request) netip.Addr {
	peer := parseHostAddr(r.RemoteAddr)
	if !peer.IsValid() || !c.trusted(peer) {
		return peer
	}
	client := peer
	hops := forwardedFor(r.Header.Values("X-Forwarded-For"))
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(hops[i])
		if err != nil {
			break
		}
		client = a.Unmap()
		if !c.trusted(client) {
			break
		}
	}
	return client
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor splits every X-Forwarded-For header value into its entries,
// in order.
func forwardedFor(values []string) []string {
	var out []string
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			out = append(out, strings.TrimSpace(part))
		}
	}
	return out
}

// parseHostAddr parses "host:port" or a bare address.
func parseHostAddr(s string) netip.Addr {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// clientBucket names the rate-limit bucket of a client address. IPv6
// clients are grouped by /64, the smallest block a subscriber usually
// holds, so rotating through one's own addresses does not reset the limit.
func clientBucket(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is4():
		return a.String()
	default:
		p, _ := a.Prefix(64)
		return p.String()
	}
}
