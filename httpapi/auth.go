package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/deploycoord/deploycoord/plan"
	"github.com/deploycoord/deploycoord/task"
)

// Role is what a token may do.
type Role string

// The roles, from least to most allowed.
const (
	// RoleViewer may send every GET and HEAD, and POST /v1/tenants:status
	// (a read with a body).
	RoleViewer Role = "viewer"
	// RoleOperator may also send every other POST and DELETE.
	RoleOperator Role = "operator"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == RoleViewer || r == RoleOperator }

// Token is an API token as the server keeps it: a name (in logs, the audit
// trail and timelines), a role and the SHA-256 of its secret. The secret
// itself is never kept.
type Token struct {
	Name string
	Role Role
	Hash [sha256.Size]byte
}

// HashSecret returns the SHA-256 of a token secret, the only form of it the
// server keeps.
func HashSecret(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

// tokenNameRe is the alphabet of token names.
var tokenNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidTokenName reports whether name may name a token:
// ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$.
func ValidTokenName(name string) bool { return tokenNameRe.MatchString(name) }

// ValidateTokens checks tokens for New: valid names, unique names, known
// roles, unique secrets. Messages name tokens, never secrets.
func ValidateTokens(tokens []Token) error {
	_, err := newKeyring(tokens)
	return err
}

// keyring finds tokens by the hash of their secret.
type keyring struct {
	byHash map[[sha256.Size]byte]*Token
}

func newKeyring(tokens []Token) (keyring, error) {
	k := keyring{byHash: make(map[[sha256.Size]byte]*Token, len(tokens))}
	names := make(map[string]bool, len(tokens))
	var errs []error
	for i := range tokens {
		t := tokens[i]
		switch {
		case !ValidTokenName(t.Name):
			errs = append(errs, fmt.Errorf("token name %s must match %s", task.Quote(t.Name), tokenNameRe))
		case names[t.Name]:
			errs = append(errs, fmt.Errorf("token name %s is used twice", t.Name))
		case !t.Role.Valid():
			errs = append(errs, fmt.Errorf("token %s: role %s must be %s or %s", t.Name, task.Quote(string(t.Role)), RoleViewer, RoleOperator))
		case k.byHash[t.Hash] != nil:
			errs = append(errs, fmt.Errorf("tokens %s and %s have the same secret", k.byHash[t.Hash].Name, t.Name))
		default:
			names[t.Name] = true
			k.byHash[t.Hash] = &t
		}
	}
	return k, errors.Join(errs...)
}

// enabled reports whether authentication is on (tokens are configured).
func (k keyring) enabled() bool { return len(k.byHash) > 0 }

// lookup returns the token whose secret is secret. The map finds the entry
// by the SHA-256 of what the client sent, so no comparison there depends on
// the secret's bytes; the hashes are compared once more in constant time
// (crypto/subtle) before the token is believed.
func (k keyring) lookup(secret string) (*Token, bool) {
	h := HashSecret(secret)
	t := k.byHash[h]
	if t == nil || subtle.ConstantTimeCompare(h[:], t.Hash[:]) != 1 {
		return nil, false
	}
	return t, true
}

// maxTokenBytes bounds the token a client sends.
const maxTokenBytes = 1024

// bearerToken returns the token of r's Authorization: Bearer header; found
// is false when there is no Authorization header, err says what is wrong
// with one that is malformed — precisely enough for the client's operator
// to fix it (an empty token is a script's unset variable, an over-long one
// a pasted file, a control character a stray line end), and never with
// any of the header's text: it may be the secret itself.
func bearerToken(r *http.Request) (secret string, found bool, err error) {
	vals := r.Header.Values("Authorization")
	switch {
	case len(vals) == 0:
		return "", false, nil
	case len(vals) > 1:
		return "", true, fmt.Errorf("%d Authorization headers, want one", len(vals))
	}
	scheme, tok, _ := strings.Cut(vals[0], " ")
	tok = strings.TrimLeft(tok, " ")
	switch {
	case !strings.EqualFold(scheme, "Bearer"):
		return "", true, errors.New("the Authorization header must be Bearer <token> (its scheme is not Bearer)")
	case tok == "":
		return "", true, errors.New("the Authorization header is Bearer with no token after it")
	case len(tok) > maxTokenBytes:
		return "", true, fmt.Errorf("the bearer token is %d bytes, more than a token may have (%d)", len(tok), maxTokenBytes)
	case strings.IndexFunc(tok, isControl) >= 0:
		// net/http refuses most of them before the handler; a request
		// handed over otherwise (a mount, a test) must not reach lookup
		// and be answered "unknown" for a token no configuration can hold.
		return "", true, errors.New("the bearer token contains control characters")
	case strings.Contains(tok, " "):
		return "", true, errors.New("the bearer token contains a space")
	}
	return tok, true, nil
}

// isControl reports whether c is an ASCII control character (a tab too).
func isControl(c rune) bool { return c < 0x20 || c == 0x7f }

// mutating reports whether r changes state: every POST and DELETE but the
// read-only POST /v1/tenants:status. Mutating requests need role operator,
// are rate limited and written to the audit log.
func mutating(r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	return routePattern(r) != "/v1/tenants:status"
}

// authenticate answers 401 UNAUTHENTICATED unless the request carries a
// known token (with authentication off, everyone is "anonymous" with role
// operator). It runs after routing, so it also notes the route's target and
// whether the request goes to the audit log.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := infoOf(r)
		info.audit = mutating(r)
		if id := chi.URLParam(r, paramPlanID); plan.ValidID(id) {
			info.planID = id
		}
		if id := chi.URLParam(r, paramTenantID); task.ValidTenantID(id) {
			info.tenantID = id
		}
		if a.identify(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// identify sets the request's actor and role from its token and reports
// true, or answers 401 and reports false.
func (a *api) identify(w http.ResponseWriter, r *http.Request) bool {
	info := infoOf(r)
	if !a.keys.enabled() {
		info.actor, info.role = "anonymous", RoleOperator
		return true
	}
	secret, found, err := bearerToken(r)
	challenge := `Bearer realm="deploycoord"`
	const send = "send Authorization: Bearer <token> with a token configured on the server"
	var detail string
	switch {
	case !found:
		info.denied = "no bearer token"
		detail = "no bearer token (the request has no Authorization header): " + send
	case err != nil:
		info.denied = err.Error()
		detail = "malformed Authorization header: " + info.denied + ": " + send
		challenge += `, error="invalid_request"`
	default:
		if t, ok := a.keys.lookup(secret); ok {
			info.actor, info.role = t.Name, t.Role
			return true
		}
		info.denied = "unknown token"
		// Which token it was is not said: the secret is never echoed,
		// and its hash would let anyone who can read answers test guesses.
		detail = "unknown token: the bearer token is well formed but is not one configured on this server " +
			"(mistyped, cut short, revoked, or another server's): " + send
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	WriteProblem(w, r, http.StatusUnauthorized, CodeUnauthenticated, detail)
	return false
}

// authorize answers 403 PERMISSION_DENIED to a viewer's mutating request.
func (a *api) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := infoOf(r)
		if info.role != RoleOperator && mutating(r) {
			info.denied = "role " + string(info.role) + " may not change state"
			WriteProblem(w, r, http.StatusForbidden, CodePermissionDenied, fmt.Sprintf(
				"token %s has role %s; %s %s needs role %s", info.actor, info.role, r.Method, routePattern(r), RoleOperator))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// rateLimit answers 429 RATE_LIMITED with Retry-After to a mutating request
// over Config.RateLimit, counted per token name (per client address with
// authentication off) on this instance.
func (a *api) rateLimit(next http.Handler) http.Handler {
	if a.limiter == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !mutating(r) {
			next.ServeHTTP(w, r)
			return
		}
		info := infoOf(r)
		key := "token:" + info.actor
		if !a.keys.enabled() {
			key = "addr:" + canonicalAddr(info)
		}
		if a.limiter.RespondOnLimit(w, r, key) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// canonicalAddr is the rate limit key of an anonymous client: its IPv4
// address, or its IPv6 /64 (one host usually owns a whole /64).
func canonicalAddr(info *requestInfo) string {
	if ip := info.clientAddr; ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return info.client
}

// rateLimited answers a request over the rate limit (httprate has set
// Retry-After).
func (a *api) rateLimited(w http.ResponseWriter, r *http.Request) {
	info := infoOf(r)
	info.denied = "rate limit"
	who := "token " + info.actor
	if !a.keys.enabled() {
		who = info.client
	}
	WriteProblem(w, r, http.StatusTooManyRequests, CodeRateLimited, fmt.Sprintf(
		"more than %d requests that may change something (POST, DELETE; dry runs count too) per %s from %s; retry after %s seconds",
		a.cfg.RateLimit, a.cfg.RateWindow, who, w.Header().Get("Retry-After")))
}

// GET /metrics: Config.Metrics, open to clients on loopback, needing any
// valid token from elsewhere.
func (a *api) metrics(w http.ResponseWriter, r *http.Request) {
	info := infoOf(r)
	if !info.clientAddr.IsLoopback() && !a.identify(w, r) {
		return
	}
	if a.cfg.Metrics == nil {
		WriteProblem(w, r, http.StatusNotFound, CodeNotFound, "metrics are not served by this server")
		return
	}
	a.cfg.Metrics.ServeHTTP(w, r)
}
