package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deploycoord/deploycoord/tenantlock"
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

// Lease is one holding of a tenant lock. One goroutine, its renewer, owns
// the underlying redsync mutex and renews it every Config.RenewEvery; every
// other method is safe to call from any goroutine. The renewer starts at the
// first renewal (a timer until then), so a lease given up within
// RenewEvery never has a goroutine of its own.
//
// The lease is lost (Lost closes, the contexts made by Context are
// cancelled, Err says why) when Redis refuses an extension — the lock was
// deleted, expired or taken over — or when the local deadline passes without
// a confirmed extension. A holder must stop writing then; its fenced writes
// would be refused anyway. Refused tells the two apart: a refused lease is
// gone for good, one that only ran out while Redis did not answer may be
// taken back by Locker.Reacquire.
type Lease struct {
	tenantID   string
	holder     tenantlock.Holder
	value      string
	fence      int64
	renewEvery time.Duration
	backend    backend
	// onRenew is told the outcome of every extension attempt (may be nil).
	onRenew func(ok bool)

	// times is the deadline and the last confirmation; first holds the
	// acquisition's, so that a new Lease allocates nothing for them.
	times atomic.Pointer[leaseTimes]
	first leaseTimes
	err   atomic.Pointer[error]

	// start runs the renewer at the first renewal. done closes when the
	// renewer has exited, or when halt stopped start before it ran.
	start *time.Timer
	done  chan struct{}

	mu sync.Mutex
	// stop cancels the renewer's context; set by the renewer when it starts.
	stop context.CancelFunc
	// lost is made by the first call of Lost (closed if the lease is lost
	// already), and closed by lose.
	lost chan struct{}
	// hooks are the cancel functions of the contexts made by Context and
	// not cancelled yet; lose calls them.
	hooks []*lostHook

	stopped  atomic.Bool
	relMu    sync.Mutex // serializes Release and Reacquire calls
	released atomic.Bool
	// deleted is set when Release gave the lock up, replaced when
	// Locker.Reacquire handed out a new Lease for it: it cannot be
	// re-acquired then.
	deleted  atomic.Bool
	replaced atomic.Bool
}

// leaseTimes is what the renewer publishes after each confirmed extension.
type leaseTimes struct {
	deadline, confirmed time.Time
}

// lostHook is one function registered by Lease.OnLost (Lease.Context's
// among them), called with the loss.
type lostHook struct {
	cancel func(cause error)
}

func newLease(tenantID string, h tenantlock.Holder, value string, fence int64, until time.Time, renewEvery time.Duration, b backend, onRenew func(bool)) *Lease {
	l := &Lease{
		tenantID:   tenantID,
		holder:     h,
		value:      value,
		fence:      fence,
		renewEvery: renewEvery,
		backend:    b,
		onRenew:    onRenew,
		first:      leaseTimes{deadline: until, confirmed: time.Now()},
		done:       make(chan struct{}),
	}
	l.times.Store(&l.first)
	l.start = time.AfterFunc(min(renewEvery, time.Until(until)), l.run)
	return l
}

// TenantID returns the locked tenant.
func (l *Lease) TenantID() string { return l.tenantID }

// Holder returns who holds the lease.
func (l *Lease) Holder() tenantlock.Holder { return l.holder }

// Value returns the lock value; fenced writes check it in Redis.
func (l *Lease) Value() string { return l.value }

// Fence returns the fencing token taken with the lock.
func (l *Lease) Fence() int64 { return l.fence }

// Deadline returns when the lease ends unless renewed (local clock, drift
// allowed for): the time of the last confirmed acquisition or extension's
// request plus the lease, less 1% for clock drift (redsync's Until).
func (l *Lease) Deadline() time.Time { return l.times.Load().deadline }

// Confirmed returns when the lock's store last confirmed the lease: when
// the answer to its acquisition, re-acquisition or latest successful
// extension arrived (local monotonic clock).
func (l *Lease) Confirmed() time.Time { return l.times.Load().confirmed }

// Local reports whether the lease is an in-process lock of a Locker made by
// NewLocal (single-instance mode). No lock key exists in Redis then: fenced
// writes must carry an empty lock value (the fence and sequence checks still
// apply).
func (l *Lease) Local() bool {
	_, ok := l.backend.(*localBackend)
	return ok
}

// Refused reports whether the lease was lost because an extension was refused —
// the lock was deleted (force-released) or holds another value — rather than
// because its deadline passed without an answer. Err then matches
// tenantlock.ErrLeaseRefused too. It is false while the lease is not lost.
func (l *Lease) Refused() bool { return errors.Is(l.Err(), tenantlock.ErrLeaseRefused) }

// Check returns nil while the lease is valid for at least margin more, else an
// error matching tenantlock.ErrLeaseLost. After Release or Forget it returns an
// error too: the lease is not held any more.
func (l *Lease) Check(margin time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	if l.stopped.Load() {
		return fmt.Errorf("%w: tenant %s: lease released", tenantlock.ErrLeaseLost, l.tenantID)
	}
	if dl := l.Deadline(); !time.Now().Add(margin).Before(dl) {
		return fmt.Errorf("%w: tenant %s: lease ends at %s, within the %s margin",
			tenantlock.ErrLeaseLost, l.tenantID, dl.Format(time.RFC3339Nano), margin)
	}
	return nil
}

// Lost returns a channel closed when the lease is lost. Release and Forget
// do not close it. (Context gives the same signal as a context, without a
// goroutine of the caller's to watch this channel.)
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.err.Load() != nil {
			close(l.lost)
		}
	}
	return l.lost
}

// Context returns a copy of parent that is cancelled, with Err as its cause
// (context.Cause), the moment the lease is lost: when its renewer finds an
// extension refused (the cause matches tenantlock.ErrLeaseRefused and
// tenantlock.ErrLeaseLost) or the deadline passed with no extension confirmed
// (tenantlock.ErrLeaseLost only). If the lease is lost already, the context is
// returned cancelled. No goroutine is started: the lease's renewer, which
// notices the loss, cancels the context itself (a parent of a context type of
// its own still costs the goroutine context.WithCancelCause starts to watch it).
//
// Release, Forget and a Locker.Reacquire that replaces the lease are not
// losses: they leave the context alone (call Context again on the Lease
// that Reacquire returned). The context also ends with parent, as any
// derived context. Call the returned CancelFunc when the context is no
// longer needed: it cancels the context (cause context.Canceled, unless the
// loss came first) and unregisters it from the lease.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := l.OnLost(cancel)
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// OnLost calls f with the loss (Err's value) the moment the lease is lost,
// in the step that records it (at once if it is lost already), unless stop
// was called first; f runs under the lease's lock and must not call the
// lease. Release, Forget and a replacing Reacquire are not losses. Context
// is OnLost cancelling a context; a caller that only needs to be told
// needs no context and no goroutine.
func (l *Lease) OnLost(f func(cause error)) (stop func()) {
	h := &lostHook{cancel: f}
	l.mu.Lock()
	if p := l.err.Load(); p != nil {
		l.mu.Unlock()
		f(*p)
		return func() {}
	}
	l.hooks = append(l.hooks, h)
	l.mu.Unlock()
	return func() { l.unhook(h) }
}

// unhook removes h from the lease's hooks, if it is still there.
func (l *Lease) unhook(h *lostHook) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, x := range l.hooks {
		if x == h {
			last := len(l.hooks) - 1
			l.hooks[i] = l.hooks[last]
			l.hooks[last] = nil
			l.hooks = l.hooks[:last]
			return
		}
	}
}

// Err returns why the lease was lost, nil before: an error matching
// tenantlock.ErrLeaseLost, and also tenantlock.ErrLeaseRefused (a
// *tenantlock.RefusedError) when an extension was refused.
func (l *Lease) Err() error {
	if p := l.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Release stops renewal and deletes the lock if it still holds Value
// (compare-and-delete). It returns nil when the lock is deleted or already gone
// (expired, or deleted by the task's last write), an error matching
// tenantlock.ErrLeaseLost when the lock holds another holder's value (it is left
// in place), and a *RedisError when Redis failed; Release may be called again
// then. Once it returned nil, after Forget, and after Locker.Reacquire replaced
// the lease, it does nothing (the new Lease holds the same value: release that
// one).
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
		return fmt.Errorf("tenantlock: release tenant %s: %w: the lock holds another holder's value, left in place", l.tenantID, tenantlock.ErrLeaseLost)
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

// halt stops renewal: the renewer's context is cancelled, or, if it has not
// started yet, its timer is stopped. Safe to call more than once.
func (l *Lease) halt() {
	if l.stopped.Swap(true) {
		return
	}
	l.mu.Lock()
	stop := l.stop
	// Stop reports false when the timer has fired: the renewer is starting
	// and will find the lease stopped (it checks under mu), closing done.
	never := stop == nil && l.start.Stop()
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	if never {
		close(l.done)
	}
}

// lose records why the lease was lost, cancels the contexts made by Context
// and closes Lost, all under mu: whoever sees Lost closed — including a
// channel Lost makes afterwards, made closed — finds those contexts done.
// (A context's cancel function never calls back into the lease: it only
// cancels contexts of the context package.) Only the renewer calls it, once.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err.Store(&err)
	for _, h := range l.hooks {
		h.cancel(err)
	}
	l.hooks = nil
	if l.lost != nil {
		close(l.lost)
	}
}

// run is the renewer goroutine, started by the timer at the first renewal.
func (l *Lease) run() {
	defer close(l.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.mu.Lock()
	if l.stopped.Load() {
		l.mu.Unlock()
		return
	}
	l.stop = cancel
	l.mu.Unlock()
	l.renew(ctx)
}

// renew extends the lock now and then every renewEvery until stopped or
// lost. A refused extension loses the lease at once; a failed one is retried
// every renewEvery/4, each attempt bounded by the lease's deadline, and the
// lease is lost when the deadline passes without a confirmed extension.
func (l *Lease) renew(ctx context.Context) {
	retryEvery := max(l.renewEvery/4, time.Millisecond)
	var (
		timer   *time.Timer
		lastErr error
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		dl := l.Deadline()
		if !time.Now().Before(dl) {
			if ctx.Err() != nil {
				return // stopped: Release and Forget are not losses
			}
			cause := "no extension confirmed before the deadline"
			if lastErr != nil {
				cause += " (last error: " + lastErr.Error() + ")"
			}
			l.lose(fmt.Errorf("%w: tenant %s: %s", tenantlock.ErrLeaseLost, l.tenantID, cause))
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
			l.times.Store(&leaseTimes{deadline: until, confirmed: time.Now()})
			lastErr = nil
		case errors.Is(err, errRefused):
			l.lose(&tenantlock.RefusedError{TenantID: l.tenantID, Fence: l.fence, Reason: err.Error()})
			return
		default:
			// An attempt cut short by the lease's deadline says less than
			// the failure before it.
			if lastErr == nil || time.Now().Before(dl) {
				lastErr = err
			}
			wait = retryEvery
		}
		wait = min(wait, time.Until(l.Deadline()))
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
