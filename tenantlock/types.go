package tenantlock

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Holder names who holds a tenant lock: the plan and task it runs for and the
// coordinator instance running it. It is stored in the lock's value.
type Holder struct {
	PlanID   string `json:"planId"`
	TaskID   string `json:"taskId"`
	Instance string `json:"owner"`
}

// Info is a read-only view of a tenant lock.
type Info struct {
	TenantID string
	// Held is false when nobody holds the lock (the other fields are zero,
	// except Fence: the last token handed out).
	Held   bool
	Holder Holder
	// TTL is the time left on the lease.
	TTL time.Duration
	// Fence is the fencing token of the current holder (the last one
	// handed out for the tenant).
	Fence int64
	// Value is the raw lock value, as compared by the fenced writes.
	Value string
}

// Claim is a tenant lock that a script of the caller's is to take in the
// same atomic step as a write of its own (a store's task start, see
// task.Write.TakeLock), prepared by a Locker so that the lock looks as if
// the Locker took it: Value in the Locker's layout (a fresh nonce), Fence
// above every fence the Locker hands out before it, the Locker's Lease,
// counted from Sent (before the script is sent). The Locker turns it into
// a lease once the script took the lock (Adopt).
type Claim struct {
	Value string
	Fence int64
	Lease time.Duration
	Sent  time.Time
}

var (
	// ErrLocked is matched by every *LockedError.
	ErrLocked = errors.New("tenantlock: tenant is locked")
	// ErrLeaseLost means the lease ran out or the lock was taken or deleted
	// by someone else: the holder must stop writing at once.
	ErrLeaseLost = errors.New("tenantlock: lease lost")
	// ErrLeaseRefused is matched, besides ErrLeaseLost, when the lease is
	// known to be gone for good: an extension or a re-acquisition was refused
	// because the lock was deleted, holds another value, or another holder
	// took a fencing token since (every *RefusedError). A lease lost only
	// because its deadline passed while Redis did not answer does not match
	// it: Locker.Reacquire may still get it back.
	ErrLeaseRefused = errors.New("tenantlock: lease refused")
	// ErrNotHeld is returned by ForceRelease when nobody holds the lock.
	ErrNotHeld = errors.New("tenantlock: lock not held")
	// ErrFenceMismatch is matched by every *MismatchError.
	ErrFenceMismatch = errors.New("tenantlock: fence mismatch")
	// ErrInvalid is matched by the errors for a malformed tenant id, holder
	// field or argument; nothing reaches Redis then.
	ErrInvalid = errors.New("tenantlock: invalid argument")
)

// LockedError is returned by Acquire when another holder has the lock.
type LockedError struct {
	TenantID string
	// Holder is zero when the lock holds a value this package did not
	// write (see Value).
	Holder Holder
	TTL    time.Duration
	Fence  int64
	// Value is the raw lock value.
	Value string
}

func (e *LockedError) Error() string {
	if e.Holder == (Holder{}) {
		return fmt.Sprintf("tenant %s is locked by a foreign value %s (fence %d, %s left)",
			e.TenantID, quote(e.Value), e.Fence, e.TTL.Round(time.Millisecond))
	}
	return fmt.Sprintf("tenant %s is locked by task %s of plan %s on instance %s (fence %d, %s left)",
		e.TenantID, e.Holder.TaskID, e.Holder.PlanID, e.Holder.Instance, e.Fence, e.TTL.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLocked) match.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// MismatchError is returned by ForceRelease when the lock's fence is not the
// one the operator saw: someone else holds it now.
type MismatchError struct {
	Expected int64
	Current  Info
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("tenant %s: lock fence is %d, expected %d was given", e.Current.TenantID, e.Current.Fence, e.Expected)
}

// Is makes errors.Is(err, ErrFenceMismatch) match.
func (e *MismatchError) Is(target error) bool { return target == ErrFenceMismatch }

// RefusedError is a lease's loss that is final: Redis (or the in-process
// lock table) refused to extend or re-acquire it. It matches both
// ErrLeaseRefused and ErrLeaseLost.
type RefusedError struct {
	TenantID string
	// Fence is the refused lease's fencing token.
	Fence int64
	// Reason says what was found.
	Reason string
	// Current is the lock as Locker.Reacquire found it (Held false when it
	// was free but another holder had taken a token since); zero after a
	// refused extension, which does not read the lock.
	Current Info
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("tenantlock: lease of tenant %s with fence %d refused: %s", e.TenantID, e.Fence, e.Reason)
	switch {
	case e.Current.Held && e.Current.Holder == (Holder{}):
		msg += fmt.Sprintf(" (the lock holds a foreign value %s, fence %d)", quote(e.Current.Value), e.Current.Fence)
	case e.Current.Held:
		msg += fmt.Sprintf(" (held by task %s of plan %s on instance %s, fence %d)",
			e.Current.Holder.TaskID, e.Current.Holder.PlanID, e.Current.Holder.Instance, e.Current.Fence)
	case e.Current.Fence != 0:
		msg += fmt.Sprintf(" (the lock is free, last fence %d)", e.Current.Fence)
	}
	return msg
}

// Is makes errors.Is(err, ErrLeaseRefused) and errors.Is(err, ErrLeaseLost)
// match.
func (e *RefusedError) Is(target error) bool {
	return target == ErrLeaseRefused || target == ErrLeaseLost
}

// quote quotes s for an error message, escaping control characters and
// cutting it short.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}
