package httpapi

import (
	"net/http"
	"net/netip"
	"strings"
)

// HeaderForwardedFor is the header through which trusted proxies name the
// client (Config.TrustedProxies).
const HeaderForwardedFor = "X-Forwarded-For"

// maxForwardedHops bounds the X-Forwarded-For entries looked at.
const maxForwardedHops = 32

// clientAddr returns the address of the client that sent r: the
// connection's peer, unless the peer is a trusted proxy; then the right-most
// X-Forwarded-For address that is not a trusted proxy (every proxy appends
// the address it got the request from, so entries left of the first
// untrusted one are whatever that client claimed). When every entry is
// trusted, the left-most is the client; a malformed entry ends the walk at
// the last good one. It returns the zero Addr when the peer address cannot
// be parsed.
//
// chi's RealIP is not used: it believes any client's X-Forwarded-For.
func (a *api) clientAddr(r *http.Request) netip.Addr {
	peer := parseAddr(r.RemoteAddr)
	if !peer.IsValid() || !a.trusted(peer) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values(HeaderForwardedFor) {
		hops = append(hops, strings.Split(v, ",")...)
	}
	if len(hops) > maxForwardedHops {
		hops = hops[len(hops)-maxForwardedHops:]
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		hop := parseAddr(strings.TrimSpace(hops[i]))
		if !hop.IsValid() {
			break
		}
		client = hop
		if !a.trusted(hop) {
			break
		}
	}
	return client
}

func (a *api) trusted(addr netip.Addr) bool {
	for _, p := range a.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// parseAddr parses "ip", "ip:port" or "[ipv6]:port", IPv4-mapped IPv6
// addresses as IPv4; the zero Addr when s is none of these.
func parseAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if addr, err := netip.ParseAddr(s); err == nil {
		return addr.Unmap().WithZone("")
	}
	return netip.Addr{}
}
