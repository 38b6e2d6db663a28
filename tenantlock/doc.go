// Package tenantlock names what deploycoord's per-tenant lock is about:
// who holds a lock (Holder), a view of one (Info), and the errors a locker
// returns. One lock per tenant is held while the tenant's task runs, with a
// lease that its holder renews and a fencing token that every task and
// checkpoint write carries (docs/architecture.md).
//
// The package imports only the standard library. The lock itself — on Redis
// with redsync and go-redis, or in process for single-instance mode — is
// package tenantlock/redislock; package facade declares the Locker and Lease
// it needs in these terms, so facade, httpapi and cmd/deployctl can name a
// holder or match a lock error without linking a Redis client.
//
// # Errors
//
//	ErrLocked        *LockedError    Acquire: another holder has the lock (names it)
//	ErrLeaseLost     (and below)     the lease is lost: the holder must stop writing
//	ErrLeaseRefused  *RefusedError   lost for good: an extension or re-acquisition was refused
//	ErrNotHeld                       ForceRelease: nobody holds the lock
//	ErrFenceMismatch *MismatchError  ForceRelease: the lock changed hands since the operator looked
//	ErrInvalid                       a malformed tenant id, holder field or argument
//
// A lease is lost in one of two ways. Refused: the lock was deleted
// (force-released) or holds another value, or another holder took a fencing
// token since; the error is a *RefusedError, matching ErrLeaseRefused and
// ErrLeaseLost, and the holder stops. Lapsed: the lease's deadline passed
// while the lock's store did not confirm an extension; the error matches
// ErrLeaseLost only, and the holder may take the lease back with the same
// fence once the store answers, if nobody took the tenant meanwhile.
package tenantlock
