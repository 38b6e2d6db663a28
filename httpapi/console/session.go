package console

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/deploycoord/deploycoord/httpapi"
)

// Cookie names.
const (
	sessionCookie = "deploycoord_session"
	flashCookie   = "deploycoord_flash"
)

// session is what the session cookie holds, signed: who signed in (the
// token's name and role, never its secret), a random id that the CSRF token
// is bound to, and when it expires.
type session struct {
	ID      string `json:"sid"`
	Name    string `json:"n"`
	Role    string `json:"r"`
	Expires int64  `json:"exp"`
}

// keys signs sessions, CSRF tokens and flash messages.
type keys struct {
	key []byte
}

// newKeys derives the signing key. With tokens, it is an HMAC of every
// token's name, role and secret hash (sorted by name): every instance with
// the same tokens signs alike, so a session works on any of them and across
// restarts, and changing any token signs everybody out. Without tokens
// (authentication off, loopback only) it is random: sessions only carry the
// CSRF binding then, and a restart asks for a reload.
func newKeys(tokens []httpapi.Token) keys {
	if len(tokens) == 0 {
		k := make([]byte, 32)
		_, _ = rand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
		return keys{key: k}
	}
	sorted := slices.Clone(tokens)
	slices.SortFunc(sorted, func(a, b httpapi.Token) int { return cmp.Compare(a.Name, b.Name) })
	mac := hmac.New(sha256.New, []byte("deploycoord web console session key v1"))
	for _, t := range sorted {
		mac.Write([]byte(t.Name))
		mac.Write([]byte{0})
		mac.Write([]byte(t.Role))
		mac.Write([]byte{0})
		mac.Write(t.Hash[:])
	}
	return keys{key: mac.Sum(nil)}
}

func (k keys) mac(purpose string, b []byte) []byte {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(b)
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding

// seal returns v as JSON, base64url, and its MAC for purpose.
func (k keys) seal(purpose string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(b) + "." + b64.EncodeToString(k.mac(purpose, b)), nil
}

var errBadSeal = errors.New("console: bad signature")

// open checks a value made by seal for purpose and decodes it into v.
func (k keys) open(purpose, s string, v any) error {
	body, sig, ok := strings.Cut(s, ".")
	if !ok || len(s) > 4096 {
		return errBadSeal
	}
	b, err1 := b64.DecodeString(body)
	mac, err2 := b64.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, k.mac(purpose, b)) {
		return errBadSeal
	}
	return json.Unmarshal(b, v)
}

// csrf returns the CSRF token of a session: a MAC of its id, so it needs no
// storage and changes with every sign-in.
func (k keys) csrf(s session) string {
	return b64.EncodeToString(k.mac("csrf", []byte(s.ID)))[:32]
}

// validCSRF compares a form's CSRF token with the session's in constant time.
func (k keys) validCSRF(s session, got string) bool {
	want := k.csrf(s)
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return b64.EncodeToString(b[:])
}

// secure reports whether the browser reached the console over TLS: the
// connection's, or one a proxy in front terminated (X-Forwarded-Proto,
// Forwarded). A client that lies here only makes its own cookies Secure,
// which its browser then keeps from plain HTTP: nobody else is affected.
func secure(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	return strings.Contains(strings.ToLower(r.Header.Get("Forwarded")), "proto=https")
}

// cookie returns a cookie of the console: HttpOnly, SameSite=Strict, Secure
// when the browser came over TLS, scoped to the console's path.
func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: c.root, MaxAge: maxAge,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode,
	}
}

// readSession returns the request's valid session: signed by this key, not
// expired, and naming a token that still exists with that role (anonymous
// when authentication is off).
func (c *Console) readSession(r *http.Request) (session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return session{}, false
	}
	var s session
	if c.keys.open("session", ck.Value, &s) != nil || s.ID == "" || time.Now().Unix() >= s.Expires {
		return session{}, false
	}
	if len(c.tokens) == 0 {
		return s, s.Name == anonymous && s.Role == string(httpapi.RoleOperator)
	}
	t, ok := c.tokens[s.Name]
	return s, ok && string(t.Role) == s.Role
}

// startSession sets a new session cookie for the token name and role.
func (c *Console) startSession(w http.ResponseWriter, r *http.Request, name string, role httpapi.Role) (session, error) {
	s := session{ID: newSessionID(), Name: name, Role: string(role), Expires: time.Now().Add(c.cfg.SessionTTL).Unix()}
	v, err := c.keys.seal("session", s)
	if err != nil {
		return session{}, err
	}
	http.SetCookie(w, c.cookie(r, sessionCookie, v, int(c.cfg.SessionTTL/time.Second)))
	return s, nil
}

// lookupToken returns the configured token whose secret is secret, compared
// as the API does: by the SHA-256 of the secret, in constant time.
func (c *Console) lookupToken(secret string) (httpapi.Token, bool) {
	h := httpapi.HashSecret(secret)
	var found httpapi.Token
	ok := false
	for _, t := range c.tokens {
		if subtle.ConstantTimeCompare(h[:], t.Hash[:]) == 1 {
			found, ok = t, true
		}
	}
	return found, ok
}

// flash is a one-time message shown on the next page (after a POST that
// redirects), kept in a signed cookie.
type flash struct {
	Kind string `json:"k"` // "ok" or "error"
	Text string `json:"t"`
}

// maxFlash bounds a flash message's text, in bytes (a cookie holds 4 KiB).
const maxFlash = 1500

func (c *Console) setFlash(w http.ResponseWriter, r *http.Request, kind, text string) {
	if len(text) > maxFlash {
		text = strings.ToValidUTF8(text[:maxFlash], "") + "…"
	}
	if v, err := c.keys.seal("flash", flash{Kind: kind, Text: text}); err == nil {
		http.SetCookie(w, c.cookie(r, flashCookie, v, 60))
	}
}

// takeFlash returns the request's flash message and clears it.
func (c *Console) takeFlash(w http.ResponseWriter, r *http.Request) *flash {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, c.cookie(r, flashCookie, "", -1))
	var f flash
	if c.keys.open("flash", ck.Value, &f) != nil {
		return nil
	}
	return &f
}
