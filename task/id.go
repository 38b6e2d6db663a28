package task

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"time"
)

// MaxTenantIDLen is the longest tenant id accepted.
const MaxTenantIDLen = 128

var (
	tenantIDRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	taskIDRe     = regexp.MustCompile(`^task-[0-9A-HJKMNP-TV-Z]{26}$`)
	instanceIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// ValidTenantID reports whether id may name a tenant. Tenant ids reach Redis
// keys and log lines, so the allowlist keeps out braces, colons, glob
// characters, whitespace and control characters.
func ValidTenantID(id string) bool { return tenantIDRe.MatchString(id) }

// ValidID reports whether id has the form of an id made by NewID.
func ValidID(id string) bool { return taskIDRe.MatchString(id) }

// ValidInstanceID reports whether id may name a coordinator instance (it is
// stored in lock values and task records, so it follows the tenant allowlist).
func ValidInstanceID(id string) bool { return instanceIDRe.MatchString(id) }

// CheckTenantID returns a descriptive error when id is not a valid tenant id.
func CheckTenantID(id string) error {
	if ValidTenantID(id) {
		return nil
	}
	return fmt.Errorf("%w: tenant id %s must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", ErrInvalid, Quote(id))
}

// NewID returns a new time-ordered task id: "task-" and a ULID.
func NewID(now time.Time) string { return "task-" + ULID(now) }

// ULID returns a Universally Unique Lexicographically Sortable Identifier for
// time now: 48 bits of Unix milliseconds and 80 random bits, in Crockford's
// base 32. Ids made later sort after ids made earlier (to the millisecond).
func ULID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic("task: crypto/rand failed: " + err.Error())
	}
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var out [26]byte
	// 128 bits as 26 base-32 digits: the first digit holds the top 3 bits.
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Quote renders a value taken from input for an error message: quoted, with
// control characters escaped and cut to a readable length, so that hostile
// input cannot forge log lines or flood a response.
func Quote(s string) string {
	const limit = 80
	if len(s) > limit {
		return fmt.Sprintf("%q… (%d bytes)", s[:limit], len(s))
	}
	return fmt.Sprintf("%q", s)
}
