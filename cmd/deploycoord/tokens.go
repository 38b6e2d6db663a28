package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// minSecretLen is the shortest token secret accepted.
const minSecretLen = 16

// maxSecretLen is the longest token secret accepted.
const maxSecretLen = 1024

// parseTokenEntry parses one "name:role:secret" entry (the secret may hold
// colons) and keeps only the SHA-256 of the secret. Errors quote nothing of
// the entry: a mistyped one may have its secret anywhere.
func parseTokenEntry(entry string) (httpapi.Token, error) {
	name, rest, ok1 := strings.Cut(entry, ":")
	role, secret, ok2 := strings.Cut(rest, ":")
	name, role = strings.TrimSpace(name), strings.TrimSpace(role)
	switch {
	case !ok1 || !ok2:
		return httpapi.Token{}, errors.New("want name:role:secret")
	case !httpapi.ValidTokenName(name):
		return httpapi.Token{}, errors.New("the name must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
	case !httpapi.Role(role).Valid():
		return httpapi.Token{}, errors.New("the role must be viewer or operator")
	case len(secret) < minSecretLen:
		return httpapi.Token{}, fmt.Errorf("the secret is shorter than %d characters", minSecretLen)
	case len(secret) > maxSecretLen:
		return httpapi.Token{}, fmt.Errorf("the secret is longer than %d characters", maxSecretLen)
	}
	if !printable(secret) {
		return httpapi.Token{}, errors.New("the secret may hold only printable ASCII characters, no spaces")
	}
	return httpapi.Token{Name: name, Role: httpapi.Role(role), Hash: httpapi.HashSecret(secret)}, nil
}

// parseTokenList parses DEPLOYCOORD_TOKENS: comma-separated name:role:secret
// entries. Errors name the entry by its position.
func parseTokenList(v string) ([]httpapi.Token, error) {
	var (
		out  []httpapi.Token
		errs []error
	)
	for i, e := range strings.Split(v, ",") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		t, err := parseTokenEntry(strings.TrimSpace(e))
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %d: %w", i+1, err))
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}

// parseTokenFile parses a DEPLOYCOORD_TOKENS_FILE: one name:role:secret entry
// a line; blank lines and lines starting with # are skipped. Errors name the
// file and the line number.
func parseTokenFile(path string) ([]httpapi.Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		out  []httpapi.Token
		errs []error
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseTokenEntry(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s line %d: %w", path, n, err))
			continue
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	return out, errors.Join(errs...)
}

// loadTokensFile adds the tokens of c.TokensFile to those of
// DEPLOYCOORD_TOKENS and checks them together: a name (or a secret) given
// twice is refused.
func (c *Config) loadTokensFile() error {
	if c.TokensFile != "" {
		fromFile, err := parseTokenFile(c.TokensFile)
		if err != nil {
			return fmt.Errorf("DEPLOYCOORD_TOKENS_FILE: %w", err)
		}
		c.Tokens = append(c.Tokens, fromFile...)
	}
	if err := httpapi.ValidateTokens(c.Tokens); err != nil {
		return fmt.Errorf("DEPLOYCOORD_TOKENS / DEPLOYCOORD_TOKENS_FILE: %w", err)
	}
	return nil
}

// checkExposure refuses to serve the API without tokens on anything but a
// loopback address: anyone who can reach it could start deployments.
func checkExposure(listen string, tokens int) error {
	if tokens > 0 || isLoopback(listen) {
		return nil
	}
	return fmt.Errorf("DEPLOYCOORD_LISTEN %s is not a loopback address and no API tokens are configured: "+
		"refusing to serve the API without authentication; set DEPLOYCOORD_TOKENS_FILE (or DEPLOYCOORD_TOKENS) "+
		"or listen on 127.0.0.1", listen)
}

// isLoopback reports whether the listen address is on loopback only
// (127.0.0.0/8, ::1 or localhost); an empty host means every interface.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// parseProxies parses DEPLOYCOORD_TRUSTED_PROXIES: comma-separated IP
// addresses and CIDR prefixes.
func parseProxies(v string) ([]netip.Prefix, error) {
	var (
		out  []netip.Prefix
		errs []error
	)
	for _, s := range splitList(v) {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		addr, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", s))
			continue
		}
		addr = addr.Unmap()
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, errors.Join(errs...)
}

// parseRate parses DEPLOYCOORD_RATE_LIMIT: "<n>/<unit>" with unit s, m, h
// or a Go duration ("60/m", "10/s", "100/30s"), or "off".
func parseRate(v string) (n int, per time.Duration, err error) {
	if v == "off" {
		return -1, 0, nil
	}
	count, unit, ok := strings.Cut(v, "/")
	n, err = strconv.Atoi(count)
	if !ok || err != nil || n < 1 {
		return 0, 0, fmt.Errorf("%q: want <requests>/<s|m|h|duration> with requests ≥ 1, or off", v)
	}
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		if per, err = time.ParseDuration(unit); err != nil || per < time.Second {
			return 0, 0, fmt.Errorf("%q: the window must be s, m, h or a duration of at least 1s", v)
		}
	}
	return n, per, nil
}
