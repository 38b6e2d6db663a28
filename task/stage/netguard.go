package stage

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deploycoord/deploycoord/task"
)

// Timeouts of the default HTTP transport.
const (
	dialTimeout           = 10 * time.Second
	keepAlive             = 30 * time.Second
	idleConnTimeout       = 90 * time.Second
	expectContinueTimeout = time.Second
	maxRedirects          = 10
)

// blockedPrefixes are addresses an inline http stage never connects to: the
// link-local ranges, where every cloud's instance metadata service lives and
// hands out credentials, and the metadata addresses outside them.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),     // IPv4 link-local; 169.254.169.254 (AWS, GCP, Azure, ...)
	netip.MustParsePrefix("fe80::/10"),          // IPv6 link-local
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS metadata over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
}

// nat64 is the well-known NAT64 prefix; its last 32 bits are an IPv4 address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// blockedNames are metadata host names refused before any lookup (the dial
// check would refuse their addresses anyway).
var blockedNames = map[string]bool{
	"metadata.google.internal": true,
	"metadata.goog":            true,
}

// blockedAddr reports whether a is an address inline stages must not reach,
// also when written as IPv4-mapped IPv6 or behind the NAT64 prefix.
func blockedAddr(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// errBlockedAddr is the dial error for a refused address.
var errBlockedAddr = errors.New("refused to connect to a link-local or cloud metadata address")

// refuseBlocked is the net.Dialer Control hook of inline stages. It runs
// after name resolution, on the address about to be connected to, so a name
// that resolves (or re-resolves: DNS rebinding) to a metadata address is
// refused too. An address it cannot parse is refused.
func refuseBlocked(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %s", errBlockedAddr, task.Quote(address))
	}
	if blockedAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", errBlockedAddr, ap.Addr())
	}
	return nil
}

// errRedirectRefused is the error of a redirect an inline stage does not follow.
var errRedirectRefused = errors.New("redirect refused")

// sameHostRedirect follows redirects only to the same scheme and host:port.
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: stopped after %d redirects", errRedirectRefused, maxRedirects)
	}
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || !strings.EqualFold(req.URL.Host, first.Host) {
		return fmt.Errorf("%w: inline stages do not follow redirects to another host (%s)",
			errRedirectRefused, clean(req.URL.Scheme+"://"+req.URL.Host, 200))
	}
	return nil
}

// inlineClient derives the client of inline stages from base: same
// transport settings, but no proxy (a proxy would connect for us, past the
// dial check), a dialer that refuses blocked addresses, and same-host
// redirects only. resolver is for tests (nil: the default resolver).
func inlineClient(base *http.Client, resolver *net.Resolver) *http.Client {
	var t *http.Transport
	if bt, ok := base.Transport.(*http.Transport); ok {
		t = bt.Clone()
	} else {
		t = newTransport(nil)
	}
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive, Control: refuseBlocked, Resolver: resolver}
	t.Proxy = nil
	t.OnProxyConnectResponse = nil
	t.DialContext = d.DialContext
	t.Dial = nil //nolint:staticcheck // a set Dial must not bypass the guarded dialer
	t.DialTLSContext = nil
	t.DialTLS = nil //nolint:staticcheck // as above
	return &http.Client{Transport: t, Timeout: base.Timeout, CheckRedirect: sameHostRedirect}
}

// hostEntry is one InlineHTTPHosts entry; port "" matches any port.
type hostEntry struct {
	host, port string
}

// String is the entry as it is written in the setting.
func (e hostEntry) String() string {
	h := e.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if e.port == "" {
		return h
	}
	return h + ":" + e.port
}

var hostnameRe = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$`)

func parseHostEntry(s string) (hostEntry, error) {
	if s == "" {
		return hostEntry{}, errors.New("empty")
	}
	host, port := s, ""
	switch h, p, err := net.SplitHostPort(s); {
	case err == nil:
		host, port = h, p
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return hostEntry{}, fmt.Errorf("bad port %s", task.Quote(p))
		}
	case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
		host = s[1 : len(s)-1]
	case strings.Count(s, ":") == 1:
		return hostEntry{}, errors.New("want host or host:port")
	}
	host, err := checkHost(host)
	if err != nil {
		return hostEntry{}, err
	}
	return hostEntry{host: host, port: port}, nil
}

// checkHost normalizes a literal host (an IP address or a DNS name, without
// brackets or port) and refuses blocked, malformed and ambiguous ones.
func checkHost(host string) (string, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if blockedAddr(a) {
			return "", fmt.Errorf("%s is a link-local or cloud metadata address", a)
		}
		if a.Zone() != "" {
			return "", fmt.Errorf("address %s has a zone", task.Quote(host))
		}
		return a.Unmap().String(), nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if len(name) > 253 || !hostnameRe.MatchString(name) {
		return "", fmt.Errorf("host %s is neither an IP address nor a DNS name", task.Quote(host))
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		// "2852039166" or "0xa9fea9fe" is not a name, and some resolvers
		// read it as an IPv4 address.
		return "", fmt.Errorf("host %s looks like a numeric address in a non-standard form", task.Quote(host))
	}
	if blockedNames[name] {
		return "", fmt.Errorf("host %s is a cloud metadata service", task.Quote(host))
	}
	return name, nil
}

// allowed reports whether host (normalized by checkHost) and port are listed.
func allowedHost(entries []hostEntry, host, port string) bool {
	for _, e := range entries {
		if e.host == host && (e.port == "" || e.port == port) {
			return true
		}
	}
	return false
}
