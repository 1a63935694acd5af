// Package clientnet names the client network of an address: the unit the
// audit log and the denial-burst alert record a client by (an IPv4 /24,
// an IPv6 /64), so that both name one client the same way.
package clientnet

import (
	"context"
	"net/netip"
)

// Network returns the client network of an address: the /24 of an IPv4
// address (an IPv4-mapped IPv6 address counts as IPv4), the /64 of an IPv6
// one, as a prefix ("203.0.113.0/24", "2001:db8::/64"); "" for "" or an
// unparsable value. A prefix counts as its address, so Network is
// idempotent: Network(Network(ip)) == Network(ip).
func Network(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		p, perr := netip.ParsePrefix(ip)
		if perr != nil {
			return ""
		}
		a = p.Addr()
	}
	a = a.Unmap().WithZone("")
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ""
	}
	return p.String()
}

type addrKey struct{}

// WithAddr returns ctx carrying its request's client address (as the web
// shell's rate limits record it): what the audit log hashes and the
// denial-burst alert counts, whatever the transport.
func WithAddr(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, addrKey{}, addr)
}

// Addr returns the client address WithAddr put in ctx, or "".
func Addr(ctx context.Context) string {
	a, _ := ctx.Value(addrKey{}).(string)
	return a
}
