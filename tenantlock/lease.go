package tenantlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// errRefused is what a backend returns when the lock no longer holds the
// lease's value (deleted, expired, or taken by someone else).
var errRefused = errors.New("extension refused")

// backend is what a Lease needs from the store of its lock: Redis through
// redsync (redsyncBackend), or, in single-instance mode, the in-process lock
// table (localBackend). extend and release are never concurrent: the renewer
// makes them, and Release after the renewer has exited; forget may run at
// any time (the local backend locks its table).
type backend interface {
	// extend pushes the lock's expiry out by one lease and returns the new
	// local deadline. It returns an error wrapping errRefused when the lock
	// is not ours any more; any other error is worth a retry.
	extend(ctx context.Context) (time.Time, error)
	// release deletes the lock if it still holds our value. It returns nil
	// when the lock is gone and errRefused when it holds another value
	// (left in place).
	release(ctx context.Context) error
	// forget is Forget's part: nothing on Redis (the task's last write
	// deleted the lock there); the in-process table frees the lock if it
	// still holds our value, since no Redis write can.
	forget()
}

// Lease is one holding of a tenant lock. One goroutine (started by Acquire)
// owns the underlying redsync mutex and renews it every Config.RenewEvery;
// every other method is safe to call from any goroutine.
//
// The lease is lost (Lost closes, Err says why) when Redis refuses an
// extension — the lock was deleted, expired or taken over — or when the local
// deadline passes without a confirmed extension. A holder must stop writing
// then; its fenced writes would be refused anyway. Refused tells the two
// apart: a refused lease is gone for good, one that only ran out while Redis
// did not answer may be taken back by Locker.Reacquire.
type Lease struct {
	tenantID   string
	holder     Holder
	value      string
	fence      int64
	renewEvery time.Duration
	backend    backend
	// onRenew is told the outcome of every extension attempt (may be nil).
	onRenew func(ok bool)

	deadline  atomic.Pointer[time.Time]
	confirmed atomic.Pointer[time.Time]
	lost      chan struct{}
	err       atomic.Pointer[error]

	// stop ends renewal; done closes when the renewer has exited.
	stop     context.CancelFunc
	stopped  atomic.Bool
	done     chan struct{}
	relMu    sync.Mutex // serializes Release and Reacquire calls
	released atomic.Bool
	// deleted is set when Release gave the lock up, replaced when
	// Locker.Reacquire handed out a new Lease for it: it cannot be
	// re-acquired then.
	deleted  atomic.Bool
	replaced atomic.Bool
}

func newLease(tenantID string, h Holder, value string, fence int64, until time.Time, renewEvery time.Duration, b backend, onRenew func(bool)) *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lease{
		tenantID:   tenantID,
		holder:     h,
		value:      value,
		fence:      fence,
		renewEvery: renewEvery,
		backend:    b,
		onRenew:    onRenew,
		lost:       make(chan struct{}),
		stop:       cancel,
		done:       make(chan struct{}),
	}
	l.deadline.Store(&until)
	now := time.Now()
	l.confirmed.Store(&now)
	go l.renew(ctx)
	return l
}

// TenantID returns the locked tenant.
func (l *Lease) TenantID() string { return l.tenantID }

// Holder returns who holds the lease.
func (l *Lease) Holder() Holder { return l.holder }

// Value returns the lock value; fenced writes check it in Redis.
func (l *Lease) Value() string { return l.value }

// Fence returns the fencing token taken with the lock.
func (l *Lease) Fence() int64 { return l.fence }

// Deadline returns when the lease ends unless renewed (local clock, drift
// allowed for): the time of the last confirmed acquisition or extension's
// request plus the lease, less 1% for clock drift (redsync's Until).
func (l *Lease) Deadline() time.Time { return *l.deadline.Load() }

// Confirmed returns when the lock's store last confirmed the lease: when
// the answer to its acquisition, re-acquisition or latest successful
// extension arrived (local monotonic clock).
func (l *Lease) Confirmed() time.Time { return *l.confirmed.Load() }

// Local reports whether the lease is an in-process lock of a Locker made by
// NewLocal (single-instance mode). No lock key exists in Redis then: fenced
// writes must carry an empty lock value (the fence and sequence checks still
// apply).
func (l *Lease) Local() bool {
	_, ok := l.backend.(*localBackend)
	return ok
}

// Refused reports whether the lease was lost because an extension was
// refused — the lock was deleted (force-released) or holds another value —
// rather than because its deadline passed without an answer. Err then
// matches ErrLeaseRefused too. It is false while the lease is not lost.
func (l *Lease) Refused() bool { return errors.Is(l.Err(), ErrLeaseRefused) }

// Check returns nil while the lease is valid for at least margin more, else
// an error matching ErrLeaseLost. After Release or Forget it returns an error
// too: the lease is not held any more.
func (l *Lease) Check(margin time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	if l.stopped.Load() {
		return fmt.Errorf("%w: tenant %s: lease released", ErrLeaseLost, l.tenantID)
	}
	if dl := l.Deadline(); !time.Now().Add(margin).Before(dl) {
		return fmt.Errorf("%w: tenant %s: lease ends at %s, within the %s margin",
			ErrLeaseLost, l.tenantID, dl.Format(time.RFC3339Nano), margin)
	}
	return nil
}

// Lost returns a channel closed when the lease is lost. Release and Forget
// do not close it.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns why the lease was lost, nil before: an error matching
// ErrLeaseLost, and also ErrLeaseRefused (a *RefusedError) when an
// extension was refused.
func (l *Lease) Err() error {
	if p := l.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Release stops renewal and deletes the lock if it still holds Value
// (compare-and-delete). It returns nil when the lock is deleted or already
// gone (expired, or deleted by the task's last write), an error matching
// ErrLeaseLost when the lock holds another holder's value (it is left in
// place), and a *RedisError when Redis failed; Release may be called again
// then. Once it returned nil, after Forget, and after Locker.Reacquire
// replaced the lease, it does nothing (the new Lease holds the same value:
// release that one).
func (l *Lease) Release(ctx context.Context) error {
	l.halt()
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released.Load() {
		return nil
	}
	// The renewer owns the mutex until it exits; an extension in flight
	// ends by the lease's deadline at the latest.
	select {
	case <-l.done:
	case <-ctx.Done():
		return redisError(ctx, "release", l.tenantID, fmt.Errorf("waiting for the renewal in flight: %w", ctx.Err()))
	}
	err := l.backend.release(ctx)
	if errors.Is(err, errRefused) {
		l.deleted.Store(true)
		l.released.Store(true)
		return fmt.Errorf("tenantlock: release tenant %s: %w: the lock holds another holder's value, left in place", l.tenantID, ErrLeaseLost)
	}
	if err != nil {
		return err
	}
	l.deleted.Store(true)
	l.released.Store(true)
	return nil
}

// Forget stops renewal without touching Redis: the task's last write already
// deleted the lock (task.Write.ReleaseLock). A Local lease also frees its
// in-process lock if it still holds the lease's value, since no Redis write
// can. Forget is safe to call at any time, more than once, and on a lease
// that Locker.Reacquire replaced (it does nothing then).
func (l *Lease) Forget() {
	l.halt()
	if !l.released.Swap(true) {
		l.backend.forget()
	}
}

func (l *Lease) halt() {
	l.stopped.Store(true)
	l.stop()
}

// lose records why the lease was lost and closes Lost. Only the renewer
// calls it, once.
func (l *Lease) lose(err error) {
	l.err.Store(&err)
	close(l.lost)
}

// renew extends the lock every renewEvery until stopped or lost. A refused
// extension loses the lease at once; a failed one is retried every
// renewEvery/4, each attempt bounded by the lease's deadline, and the lease
// is lost when the deadline passes without a confirmed extension.
func (l *Lease) renew(ctx context.Context) {
	defer close(l.done)
	retryEvery := max(l.renewEvery/4, time.Millisecond)
	timer := time.NewTimer(min(l.renewEvery, time.Until(l.Deadline())))
	defer timer.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		dl := l.Deadline()
		if !time.Now().Before(dl) {
			cause := "no extension confirmed before the deadline"
			if lastErr != nil {
				cause += " (last error: " + lastErr.Error() + ")"
			}
			l.lose(fmt.Errorf("%w: tenant %s: %s", ErrLeaseLost, l.tenantID, cause))
			return
		}
		// An attempt ends by the deadline: a confirmation after it is
		// worthless, and a hung Redis must not keep the renewer past it. It
		// also ends after renewEvery, so that a retry on a fresh connection
		// gets a chance before the deadline.
		actx, cancel := context.WithDeadline(ctx, minTime(dl, time.Now().Add(l.renewEvery)))
		until, err := l.backend.extend(actx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if l.onRenew != nil {
			l.onRenew(err == nil)
		}
		wait := l.renewEvery
		switch {
		case err == nil:
			now := time.Now()
			l.deadline.Store(&until)
			l.confirmed.Store(&now)
			lastErr = nil
		case errors.Is(err, errRefused):
			l.lose(&RefusedError{TenantID: l.tenantID, Fence: l.fence, Reason: err.Error()})
			return
		default:
			// An attempt cut short by the lease's deadline says less than
			// the failure before it.
			if lastErr == nil || time.Now().Before(dl) {
				lastErr = err
			}
			wait = retryEvery
		}
		timer.Reset(min(wait, time.Until(l.Deadline())))
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
