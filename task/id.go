package task

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"
)

// MaxTenantIDLen is the longest tenant id accepted.
const MaxTenantIDLen = 128

// The validators below are hand-written byte loops (they run on every store
// call) with the semantics of these regular expressions:
//
//	tenant, instance  ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$
//	task              ^task-[0-9A-HJKMNP-TV-Z]{26}$

// nameChars marks the bytes of [A-Za-z0-9._-]: 1 for alphanumerics (which
// may start a name), 2 for '.', '_' and '-' (which may only follow).
var nameChars = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] = 1
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = 1
		t[c+'a'-'A'] = 1
	}
	t['.'], t['_'], t['-'] = 2, 2, 2
	return t
}()

// crockfordChars marks the bytes of [0-9A-HJKMNP-TV-Z], the upper-case
// Crockford base-32 digits of a ULID.
var crockfordChars = func() (t [256]bool) {
	for _, c := range []byte("0123456789ABCDEFGHJKMNPQRSTVWXYZ") {
		t[c] = true
	}
	return t
}()

// validName reports whether id matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$.
func validName(id string) bool {
	if len(id) == 0 || len(id) > MaxTenantIDLen || nameChars[id[0]] != 1 {
		return false
	}
	for i := 1; i < len(id); i++ {
		if nameChars[id[i]] == 0 {
			return false
		}
	}
	return true
}

// ValidULIDID reports whether id is prefix followed by 26 upper-case
// Crockford base-32 digits (an id made with ULID, like NewID's).
func ValidULIDID(id, prefix string) bool {
	if len(id) != len(prefix)+26 || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		if !crockfordChars[id[i]] {
			return false
		}
	}
	return true
}

// ValidTenantID reports whether id may name a tenant. Tenant ids reach Redis
// keys and log lines, so the allowlist keeps out braces, colons, glob
// characters, whitespace and control characters.
func ValidTenantID(id string) bool { return validName(id) }

// ValidID reports whether id has the form of an id made by NewID.
func ValidID(id string) bool { return ValidULIDID(id, "task-") }

// ValidInstanceID reports whether id may name a coordinator instance (it is
// stored in lock values and task records, so it follows the tenant allowlist).
func ValidInstanceID(id string) bool { return validName(id) }

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
// time now: 48 bits of Unix milliseconds and 80 bits that order the ids of
// one millisecond, in Crockford's base 32. Ids made later sort after ids
// made earlier: to the millisecond across processes and strictly within one,
// whatever the milliseconds of the ids made in between (callers pass their
// own now: a plan's creation, a retry and tests with clocks of their own
// interleave). The 80 bits are a counter of this process (64 bits, started
// at a random point below 2^62) and 16 random bits: a tenant's newest task
// is the greatest id among those of one millisecond (see repository: the
// tenant index). Two processes' ids of one millisecond collide only if
// their counters met and the 16 bits agree.
func ULID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	ulidMu.Lock()
	if !ulidStarted {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			ulidMu.Unlock()
			panic("task: crypto/rand failed: " + err.Error())
		}
		ulidSeq, ulidStarted = binary.BigEndian.Uint64(r[:])>>2, true
	}
	ulidSeq++
	binary.BigEndian.PutUint64(b[6:14], ulidSeq)
	ulidMu.Unlock()
	binary.BigEndian.PutUint16(b[14:], uint16(mrand.Uint32()))
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

// The counter of ULID (see there).
var (
	ulidMu      sync.Mutex
	ulidSeq     uint64
	ulidStarted bool
)

// ULIDMillis returns the Unix milliseconds a ULID (26 Crockford base-32
// digits, as ULID makes) was made at: its first 10 digits, the top 48 bits.
// It reads any 26 digits a valid id holds; the caller checks the id.
func ULIDMillis(ulid string) int64 {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var ms int64
	for i := 0; i < 10 && i < len(ulid); i++ {
		ms = ms<<5 | int64(strings.IndexByte(alphabet, ulid[i])&31)
	}
	return ms & (1<<48 - 1)
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
