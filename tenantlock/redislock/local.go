package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/deploycoord/deploycoord/tenantlock"
)

// LocalConfig configures an in-process Locker (NewLocal). Zero fields take
// the documented defaults.
type LocalConfig struct {
	// Lease is the lock TTL (default LeaseDefault, at least LeaseMin).
	Lease time.Duration
	// RenewEvery is the renewal period (default Lease/3; less than Lease).
	RenewEvery time.Duration
	// Clock gives the floor of fencing tokens (default time.Now): a token is
	// never below Clock().UnixMilli(), so it is above every token a
	// Redis-backed Locker handed out before. Expiry uses the monotonic clock.
	Clock func() time.Time
	// OnRenew is called after each extension attempt, as Config.OnRenew.
	OnRenew func(ok bool)
}

// NewLocal returns a Locker whose locks live in process memory, for the
// single-instance mode (docs/architecture.md): the same API and semantics as a Redis
// Locker — lock values naming the holder in the same JSON form, leases with
// the same TTL and renewal, fencing tokens strictly increasing per tenant
// and never below the clock floor — with no Redis involved, so an outage
// does not touch the locks. A renewal is refused only when the lock was
// force-released or taken over after it expired. The leases it hands out
// are Local: fenced writes must carry an empty lock value. Returns an error
// matching tenantlock.ErrInvalid for a bad lease or renewal period.
func NewLocal(cfg LocalConfig) (*Locker, error) {
	lease := cfg.Lease
	if lease == 0 {
		lease = LeaseDefault
	}
	if lease < LeaseMin {
		return nil, fmt.Errorf("%w: lease %s is shorter than %s", tenantlock.ErrInvalid, lease, LeaseMin)
	}
	renewEvery := cfg.RenewEvery
	if renewEvery == 0 {
		renewEvery = lease / 3
	}
	if renewEvery < 0 || renewEvery >= lease {
		return nil, fmt.Errorf("%w: renewal period %s must be positive and shorter than the lease %s", tenantlock.ErrInvalid, renewEvery, lease)
	}
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Locker{local: &localTable{
		lease:      lease,
		renewEvery: renewEvery,
		clock:      clock,
		onRenew:    cfg.OnRenew,
		locks:      map[string]*localLock{},
	}}, nil
}

// localTable holds the in-process locks of one Locker.
type localTable struct {
	lease      time.Duration
	renewEvery time.Duration
	clock      func() time.Time
	onRenew    func(bool)

	mu sync.Mutex
	// locks keeps an entry per tenant ever locked, for its last fence.
	locks map[string]*localLock
	gen   uint64
}

// localLock is one tenant's lock. It is held while value is set and expires
// is ahead; gen tells apart the Leases that held the same value (a Lease and
// the one Reacquire made from it), so that a retired Lease never frees its
// successor's lock.
type localLock struct {
	value   string
	expires time.Time
	gen     uint64
	// fence is the last token handed out for the tenant.
	fence int64
}

func (e *localLock) held(now time.Time) bool {
	return e != nil && e.value != "" && now.Before(e.expires)
}

// until is a lease's deadline for an expiry pushed out at now: earlier than
// the lock's expiry by the same drift allowance as on Redis.
func (t *localTable) until(now time.Time) time.Time {
	return now.Add(t.lease - time.Duration(float64(t.lease)*driftFactor))
}

func (t *localTable) info(tenantID string, e *localLock, now time.Time) tenantlock.Info {
	info := tenantlock.Info{TenantID: tenantID}
	if e == nil {
		return info
	}
	info.Fence = e.fence
	if e.held(now) {
		fillHeld(&info, e.value, e.expires.Sub(now))
	}
	return info
}

func (t *localTable) acquire(tenantID string, h tenantlock.Holder) (*Lease, error) {
	value := encodeValue(h)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	e := t.locks[tenantID]
	if e.held(now) {
		info := t.info(tenantID, e, now)
		return nil, &tenantlock.LockedError{TenantID: tenantID, Holder: info.Holder, TTL: info.TTL, Fence: info.Fence, Value: info.Value}
	}
	if e == nil {
		e = &localLock{}
		t.locks[tenantID] = e
	}
	t.gen++
	e.value, e.expires, e.gen = value, now.Add(t.lease), t.gen
	e.fence = max(e.fence+1, t.clock().UnixMilli())
	b := &localBackend{t: t, tenantID: tenantID, value: value, gen: e.gen}
	return newLease(tenantID, h, value, e.fence, t.until(now), t.renewEvery, b, t.onRenew), nil
}

func (t *localTable) view(tenantID string) tenantlock.Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.info(tenantID, t.locks[tenantID], time.Now())
}

func (t *localTable) forceRelease(tenantID string, expected int64) (tenantlock.Info, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	e := t.locks[tenantID]
	info := t.info(tenantID, e, now)
	switch {
	case !info.Held:
		return info, fmt.Errorf("tenantlock: force-release tenant %s: %w", tenantID, tenantlock.ErrNotHeld)
	case info.Fence != expected:
		return info, &tenantlock.MismatchError{Expected: expected, Current: info}
	}
	e.value = ""
	// As in Redis: the released holder must not be able to re-acquire.
	e.fence++
	return info, nil
}

func (t *localTable) reacquire(old *Lease) (*Lease, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	e := t.locks[old.tenantID]
	info := t.info(old.tenantID, e, now)
	switch {
	case info.Held && info.Value != old.value:
		return nil, &tenantlock.RefusedError{TenantID: old.tenantID, Fence: old.fence, Reason: "the lock holds another value", Current: info}
	case !info.Held && info.Fence != old.fence:
		return nil, &tenantlock.RefusedError{TenantID: old.tenantID, Fence: old.fence, Current: info,
			Reason: fmt.Sprintf("the lock is free but its fence counter is %d: another holder took the tenant since", info.Fence)}
	}
	// The lock holds our value, or is free with our fence the last one:
	// e exists either way.
	t.gen++
	e.value, e.expires, e.gen = old.value, now.Add(t.lease), t.gen
	b := &localBackend{t: t, tenantID: old.tenantID, value: old.value, gen: e.gen}
	return newLease(old.tenantID, old.holder, old.value, old.fence, t.until(now), t.renewEvery, b, t.onRenew), nil
}

// localBackend is a Lease's backend in a localTable.
type localBackend struct {
	t        *localTable
	tenantID string
	value    string
	gen      uint64
}

// ours reports whether e is this backend's lock (held or expired).
func (b *localBackend) ours(e *localLock) bool {
	return e != nil && e.value == b.value && e.gen == b.gen
}

func (b *localBackend) extend(context.Context) (time.Time, error) {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	now := time.Now()
	e := b.t.locks[b.tenantID]
	if !b.ours(e) || !e.held(now) {
		return time.Time{}, fmt.Errorf("%w: the in-process lock was force-released, expired or taken over", errRefused)
	}
	e.expires = now.Add(b.t.lease)
	return b.t.until(now), nil
}

func (b *localBackend) release(context.Context) error {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	now := time.Now()
	e := b.t.locks[b.tenantID]
	switch {
	case !e.held(now):
		return nil
	case !b.ours(e):
		return errRefused
	}
	e.value = ""
	return nil
}

func (b *localBackend) forget() { _ = b.release(context.Background()) }
